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

The generation loop. :func:`sample_response` runs, in order, :func:`prefill_phase` (the prompts
read into the KV cache: a :class:`DecodeCarry`), :func:`decode_phase` (one :func:`decode_step`
per token in a ``lax.while_loop`` per rung of cache widths, until every row has stopped) and
:func:`last_token_phase` (the last token, which needs no decode), each over a :class:`Decoder`
(what every step shares).
"""

from __future__ import annotations

from typing import Any, NamedTuple

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

    Args:
      logits: ``[..., V]``; temperature, top_p: scalars, may be traced; top_k, banned: static.
    Returns:
      ``[..., V]`` float logits, ``-inf`` on the tokens cut.
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
    """One token per row: a ``jax.random.categorical`` draw from :func:`filter_logits` (at the
    defaults bit for bit ``jax.random.categorical(key, logits)``).

    Args:
      key: one key for the batch.
      logits: ``[B, V]``.
      temperature, top_k, top_p, banned: as :func:`filter_logits`.
    Returns:
      ``(token [B] int32, logp [B] float32)``: ``logp`` is the log of the token's renormalised
      probability under the filtered distribution, the one actually sampled from.
    """
    x = filter_logits(logits, temperature, top_k, top_p, banned)
    token = categorical(key, x)
    logp = jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), token[:, None], axis=-1)[:, 0]
    return token, logp


class Response(NamedTuple):
    """Sampled responses, right-padded ``[B, T]`` (one decode step's column of them: ``[B]``).

    Attributes:
      tokens: in the prompt's dtype; ``pad_id`` after a row's stop token.
      logp: float32; the log-prob under the distribution sampled from (the module docstring), 0
        after the stop.
      mask: bool; True up to and including the first stop token.
    """

    tokens: jax.Array
    logp: jax.Array
    mask: jax.Array


class Decoder(NamedTuple):
    """What every decode step shares, fixed by :func:`sample_response`'s arguments."""

    lm: Any  # the CausalLM
    step_params: Any  # the parameters ``lm.decode`` runs with (``lm.decode_params(params)``, once)
    prompt_len: int  # P: response column ``t`` is decoded at position ``P + t``
    max_new: int  # T
    sizes: tuple  # the cache's rungs of response widths (``(T,)``: one cache of ``P + T`` slots)
    stop_ids: jax.Array  # [N] in the prompt's dtype
    pad_id: int
    temperature: Any
    top_k: int
    top_p: Any
    per_row: bool
    dtype: Any  # the prompt's (and the tokens') dtype


class DecodeCarry(NamedTuple):
    """The decode loop's state once ``t`` response tokens are written."""

    t: jax.Array  # int32 scalar: the response column the next token is written to
    logits: jax.Array  # [B, V]: the logits the next token is drawn from
    cache: Any  # the KV cache, P + (the current rung) slots; None once the loop is left
    done: jax.Array  # [B] bool: the row has sampled a stop token
    key: jax.Array  # the next draw's key ([B] keys under ``per_row``)
    out: Response  # [B, T]: the columns before ``t`` written, the rest what a stopped row holds


def draw(dec: Decoder, key, logits):
    """``(key, (token [B], logp [B]))``: one token per row (:func:`sample_tokens`, ``pad_id``
    banned) and the key for the next draw (``key, sub = split(key)``, per row under ``per_row``)."""
    if not dec.per_row:
        key, sub = jax.random.split(key)
        return key, sample_tokens(sub, logits, dec.temperature, dec.top_k, dec.top_p, dec.pad_id)
    keys = jax.vmap(jax.random.split)(key)

    def one(k, x):
        return jax.tree.map(
            lambda a: a[0], sample_tokens(k, x[None], dec.temperature, dec.top_k, dec.top_p, dec.pad_id)
        )

    return keys[:, 0], jax.vmap(one)(keys[:, 1], logits)


def pick(dec: Decoder, logits, done, key) -> tuple[Response, jax.Array, jax.Array]:
    """``(column, done, key)``: the next token of every row (a stopped row's: ``pad_id``, 0,
    False) as a :class:`Response` column ``[B]``, the rows stopped after it, the next key."""
    key, (tok, lp) = draw(dec, key, logits)
    live = ~done
    tok = jnp.where(live, tok.astype(dec.dtype), dec.pad_id)
    done = done | jnp.any(tok[:, None] == dec.stop_ids[None, :], axis=1)
    return Response(tok, jnp.where(live, lp, 0.0), live), done, key


def write(out: Response, column: Response, t) -> Response:
    """``out [B, T]`` with ``column [B]`` written at column ``t``."""
    return Response(
        *(jax.lax.dynamic_update_slice_in_dim(o, x[:, None].astype(o.dtype), t, axis=1) for o, x in zip(out, column))
    )


def decode_step(dec: Decoder, carry: DecodeCarry) -> DecodeCarry:
    """Token ``t`` drawn from ``carry.logits`` and decoded at position ``P + t`` (the logits of
    token ``t + 1``, the cache holding it), then written."""
    column, done, key = pick(dec, carry.logits, carry.done, carry.key)
    logits, cache = dec.lm.decode(dec.step_params, carry.cache, column.tokens, dec.prompt_len + carry.t)
    return DecodeCarry(carry.t + 1, logits, cache, done, key, write(carry.out, column, carry.t))


def tokens_left(dec: Decoder, carry: DecodeCarry) -> jax.Array:
    """bool scalar: a decode is left (the last token needs none) and some row has not stopped."""
    return (carry.t < dec.max_new - 1) & ~jnp.all(carry.done)


def prefill_phase(lm, params, key, prompt, prompt_valid, dec: Decoder) -> DecodeCarry:
    """The prompts read into a cache of ``P + sizes[0]`` slots; no row stopped, every output
    column what a stopped row writes (``pad_id``, 0, False)."""
    logits, cache = lm.prefill(params, prompt, prompt_valid, dec.prompt_len + dec.sizes[0])
    b = prompt.shape[0]
    out = Response(
        jnp.full((b, dec.max_new), dec.pad_id, prompt.dtype),
        jnp.zeros((b, dec.max_new), jnp.float32),
        jnp.zeros((b, dec.max_new), bool),
    )
    return DecodeCarry(jnp.zeros((), jnp.int32), logits, cache, jnp.zeros((b,), bool), key, out)


def decode_phase(dec: Decoder, carry: DecodeCarry, rung: int = 0) -> DecodeCarry:
    """:func:`decode_step` until no token is left to decode (:func:`tokens_left`): ``carry``'s
    cache holds ``P + sizes[rung]`` slots, so a ``while_loop`` decodes positions ``P + t``,
    ``t < sizes[rung]``; then, only if a row is still going, the cache grows
    (``lm.grow``) to the next rung and the loop goes on (a ``lax.cond``: a rung not reached costs
    nothing). Returns the carry without its cache (each rung's has its own shape)."""
    carry = jax.lax.while_loop(
        lambda c: tokens_left(dec, c) & (c.t < dec.sizes[rung]), lambda c: decode_step(dec, c), carry
    )
    if rung + 1 == len(dec.sizes):
        return carry._replace(cache=None)

    def grown(c):
        return decode_phase(dec, c._replace(cache=dec.lm.grow(c.cache, dec.prompt_len + dec.sizes[rung + 1])), rung + 1)

    return jax.lax.cond(tokens_left(dec, carry), grown, lambda c: c._replace(cache=None), carry)


def last_token_phase(dec: Decoder, carry: DecodeCarry) -> Response:
    """The outputs with the last token written (or, after an early end, pads): it needs no decode."""
    last, _, _ = pick(dec, carry.logits, carry.done, carry.key)
    return write(carry.out, last, carry.t)


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
) -> Response:
    """Sample up to ``max_new`` tokens after left-padded prompts with ``lm``'s cache.

    In order: :func:`prefill_phase` (one :meth:`CausalLM.prefill`), :func:`decode_phase` (one
    ``decode`` per token in a ``lax.while_loop`` that ends once every row has sampled a stop
    token: the steps after that would only write ``pad_id``, 0 and False, which the outputs
    already hold, so the result is the full decode's) and :func:`last_token_phase`.

    Args:
      lm: a :class:`purejaxppo.lm.models.causal_lm.CausalLM`.
      params: its parameters.
      key: a key, split once per token (``key, sub = split(key)``); ``[B]`` keys under
        ``per_row``.
      prompt, prompt_valid: ``[B, P]`` int / bool, left-padded.
      max_new: static ``T``; the cache has ``P + T`` slots (at most, under ``rungs``).
      stop_ids: ``[N]`` int array (``N`` may be 0): a row stops after sampling one of them.
      pad_id: static; fills each row after its stop, and is never sampled (its logit is cut:
        :func:`filter_logits`' ``banned``), so a response never holds a pad that reads as padding.
      temperature, top_k, top_p: as :func:`sample_tokens`.
      per_row: static; one key per row, each split once per token, so a row's tokens do not
        depend on the batch it sits in (a batch split over devices samples what one device
        would).
      rungs: static; > 0 grows the cache in rungs (below); 0 = one cache of ``P + T`` slots.
    Returns:
      A :class:`Response` ``(tokens [B, T], logp [B, T] float32, mask [B, T] bool)``, tokens in
      the prompt's dtype: ``mask`` is True up to and including the first stop token; after it
      ``tokens`` is ``pad_id`` and ``logp`` 0. ``logp`` is the log-prob under the distribution
      sampled from (see the module docstring).

    ``rungs > 0`` (needs ``lm.grow``, else ignored): the cache grows with the response
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
    p = prompt.shape[1]
    stop_ids = jnp.asarray(stop_ids, prompt.dtype).reshape(-1)
    sizes = bucket_sizes(max_new, rungs) if getattr(lm, "grow", None) is not None else (max_new,)
    prepare = getattr(lm, "decode_params", None)  # once, outside the token loop; prefill keeps params
    step_params = prepare(params) if prepare is not None else params
    dec = Decoder(
        lm, step_params, p, max_new, sizes, stop_ids, pad_id, temperature, top_k, top_p, per_row, prompt.dtype
    )
    carry = prefill_phase(lm, params, key, prompt, prompt_valid, dec)
    return last_token_phase(dec, decode_phase(dec, carry))
