"""Sampling controls and the generation loop over a :class:`purejaxppo.lm.models.causal_lm.CausalLM`.

Old log-probs and the sampled distribution. :func:`sample_tokens` returns the log-prob of the
token under the distribution ``q`` it was ACTUALLY drawn from: ``softmax`` of the logits divided
by ``temperature``, restricted to the top-k / top-p set and renormalised (:func:`filter_logits`).
At ``temperature=1, top_k=0, top_p=1`` ``q`` is the policy ``pi`` itself and these log-probs
are PPO's old log-probs (equal to a teacher-forced ``token_logprobs`` of the raw logits up to
float rounding, 1e-5: two different programs). With any other setting the tokens come
from ``q``, not ``pi``, and a choice has to be made: (a) sample at the defaults (on-policy);
(b) treat ``q`` as the policy: compute ``logp_new`` through the same :func:`filter_logits`
(the first-minibatch ratio is then 1; the cut set depends on the parameters, and a token cut
under the new parameters gets ``logp_new = -inf``); (c) keep ``pi``'s teacher-forced log-probs
as ``logp_old`` (as experiments/rlhf_toy.py does): the ratio starts at 1, but the samples are
from ``q``, so the update is biased towards ``q``'s support unless weighted by
``pi / q = exp(logp_pi - logp_sampled)``. Mixing them (``logp_old`` from here, ``logp_new``
from the raw logits) compares two different distributions: the first ratio is not 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo.lm.models.length_buckets import bucket_sizes


def filter_logits(logits, temperature=1.0, top_k: int = 0, top_p=1.0, banned: int | None = None):
    """``logits [..., V] -> [..., V]``: the logits of the distribution :func:`sample_tokens`
    draws from (``-inf`` on the tokens cut; softmax of the result is the renormalised law).

    In order: divide by ``temperature`` (traced, > 0); cut the ``banned`` token id (static;
    :func:`sample_response` bans its ``pad_id``: a sampled pad would read as padding); keep the
    ``top_k`` largest (static int, exactly ``k`` tokens, ties broken by lower index; 0 = off;
    1 = greedy); keep the smallest set of most probable tokens whose renormalised mass is
    ``>= top_p`` (traced; ``1.0`` = off, exactly: nothing is cut by rounding; the most probable
    token is always kept).
    """
    x = logits / temperature
    if banned is not None:
        x = jnp.where(jnp.arange(x.shape[-1]) == banned, -jnp.inf, x)
    if not top_k and isinstance(top_p, (int, float)) and top_p >= 1.0:
        return x  # nothing is cut (the same numbers as below, without sorting the vocabulary)
    order = jnp.argsort(-x, axis=-1, stable=True)  # descending, ties by index
    rank = jnp.argsort(order, axis=-1)  # rank[i]: where token i sits in ``order``
    if top_k:
        x = jnp.where(rank < top_k, x, -jnp.inf)
    probs = jax.nn.softmax(jnp.take_along_axis(x, order, axis=-1), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of the more probable tokens
    keep = jnp.take_along_axis(before < top_p, rank, axis=-1) | (top_p >= 1.0)
    return jnp.where(keep, x, -jnp.inf)


def categorical(key, logits):
    """``jax.random.categorical(key, logits, axis=-1)``, the same draw bit for bit: the first
    index of the largest ``logits + gumbel(key)`` over the last axis (NaN counts as largest, as
    in ``jnp.argmax``), found as a max and then a min over the indices that reach it. XLA:CPU runs
    ``argmax``'s index-carrying reduce unvectorised: over an ``[8, 49152]`` vocabulary about 3.7 ms
    a decode step, a sixth of a SmolLM2-135M-shaped step's time besides the model
    (benchmarks/NOTES.md)."""
    z = jax.random.gumbel(key, logits.shape, logits.dtype) + logits
    top = jnp.max(z, axis=-1, keepdims=True)
    hit = (z == top) | jnp.isnan(z)
    index = jnp.arange(z.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(hit, index, z.shape[-1]), axis=-1)


def sample_tokens(key, logits, temperature=1.0, top_k: int = 0, top_p=1.0, banned: int | None = None):
    """One token per row from ``logits [B, V]`` ``-> (token [B] int32, logp [B])``: a
    ``jax.random.categorical`` draw from :func:`filter_logits` (at the defaults bit for bit
    ``jax.random.categorical(key, logits)``). ``logp`` is the log of the token's renormalised
    probability under that filtered distribution, the one actually sampled from.
    """
    x = filter_logits(logits, temperature, top_k, top_p, banned)
    token = categorical(key, x)
    logp = jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), token[:, None], axis=-1)[:, 0]
    return token, logp


def sample_response(
    lm,
    params,
    key,
    prompt,
    prompt_valid,
    max_new: int,
    stop_ids,
    pad_id: int,
    temperature=1.0,
    top_k: int = 0,
    top_p=1.0,
    per_row: bool = False,
    rungs: int = 0,
):
    """Sample up to ``max_new`` tokens after left-padded prompts with ``lm``'s cache (one
    :meth:`CausalLM.prefill`, then one ``decode`` per token) in a ``lax.while_loop`` that ends
    once every row has sampled a stop token: the steps after that would only write ``pad_id``,
    0 and False, which the outputs already hold, so the result is the full decode's.

    Args:
      lm: a :class:`purejaxppo.lm.models.causal_lm.CausalLM`; ``params``: its parameters.
      prompt, prompt_valid: ``[B, P]``, left-padded.
      max_new: static; the cache has ``P + max_new`` slots.
      stop_ids: ``[N]`` int array (``N`` may be 0): a row stops after sampling one of them.
      pad_id: static; fills each row after its stop, and is never sampled (its logit is cut:
        :func:`filter_logits`' ``banned``), so a response never holds a pad that reads as padding.
      temperature, top_k, top_p: as :func:`sample_tokens`.
    Returns:
      ``(tokens [B, max_new], logp [B, max_new], mask [B, max_new])``: ``mask`` is True up to
      and including the first stop token; after it ``tokens`` is ``pad_id`` and ``logp`` 0.
      ``logp`` is the log-prob under the distribution sampled from (see the module docstring).
    The key is split once per token (``key, sub = split(key)``).
    ``per_row=True``: ``key`` is ``[B]`` keys, one per row, each split once per token, so a
    row's tokens do not depend on the batch it sits in (a batch split over devices samples
    what one device would).
    ``rungs > 0`` (static; needs ``lm.grow``, else ignored): the cache grows with the response
    instead of holding ``P + max_new`` slots from the start. It begins at ``P + rungs`` slots and
    is grown (:meth:`CausalLM.grow`) to the next width of
    :func:`purejaxppo.lm.models.length_buckets.bucket_sizes` (``rungs, 2*rungs, ..., max_new``) only
    when a row is still going at the end of a rung, so each decode step attends over the rung
    holding the current position, not the cap. Nested ``lax.cond``s in the one program: a rung
    not reached costs nothing. The slots past the rung are unwritten (masked) keys, whose softmax
    weight is exactly 0, so the tokens are the one-cache decode's; logits differ by float
    reassociation over fewer keys only (other shapes: another reduction order).
    """
    assert max_new >= 1, max_new
    b, p = prompt.shape
    stop_ids = jnp.asarray(stop_ids, prompt.dtype).reshape(-1)

    def draw(key, logits):
        if not per_row:
            key, sub = jax.random.split(key)
            return key, sample_tokens(sub, logits, temperature, top_k, top_p, pad_id)
        keys = jax.vmap(jax.random.split)(key)

        def one(k, x):
            return jax.tree.map(lambda a: a[0], sample_tokens(k, x[None], temperature, top_k, top_p, pad_id))

        return keys[:, 0], jax.vmap(one)(keys[:, 1], logits)

    def pick(logits, done, key):
        key, (tok, lp) = draw(key, logits)
        live = ~done
        tok = jnp.where(live, tok.astype(prompt.dtype), pad_id)
        done = done | jnp.any(tok[:, None] == stop_ids[None, :], axis=1)
        return (tok, jnp.where(live, lp, 0.0), live), done, key

    def write(outs, out, t):  # column t of each [B, max_new] output
        return tuple(
            jax.lax.dynamic_update_slice_in_dim(o, x[:, None].astype(o.dtype), t, axis=1) for o, x in zip(outs, out)
        )

    sizes = bucket_sizes(max_new, rungs) if getattr(lm, "grow", None) is not None else (max_new,)

    def step(carry):
        t, logits, cache, done, key, outs = carry
        out, done, key = pick(logits, done, key)
        logits, cache = lm.decode(step_params, cache, out[0], p + t)
        return t + 1, logits, cache, done, key, write(outs, out, t)

    def left(carry):  # a decode is left (the last token needs none) and some row has not stopped
        return (carry[0] < max_new - 1) & ~jnp.all(carry[3])

    def without_cache(carry):  # what every rung returns: the cache's shape is the rung's own
        return carry[:2] + carry[3:]

    def run(k, carry):  # carry's cache holds p + sizes[k] slots: decode positions p + t, t < sizes[k]
        carry = jax.lax.while_loop(lambda c: left(c) & (c[0] < sizes[k]), step, carry)
        if k + 1 == len(sizes):
            return without_cache(carry)

        def grown(c):
            return run(k + 1, c[:2] + (lm.grow(c[2], p + sizes[k + 1]),) + c[3:])

        return jax.lax.cond(left(carry), grown, without_cache, carry)

    prepare = getattr(lm, "decode_params", None)  # once, outside the token loop; prefill keeps params
    step_params = prepare(params) if prepare is not None else params
    logits, cache = lm.prefill(params, prompt, prompt_valid, p + sizes[0])
    outs = (
        jnp.full((b, max_new), pad_id, prompt.dtype),
        jnp.zeros((b, max_new), jnp.float32),
        jnp.zeros((b, max_new), bool),
    )  # what every step after a row's stop writes
    carry = (jnp.zeros((), jnp.int32), logits, cache, jnp.zeros((b,), bool), key, outs)
    t, logits, done, key, outs = run(0, carry)
    last, _, _ = pick(logits, done, key)  # the last token (or, after an early end, pads) needs no decode
    return write(outs, last, t)
