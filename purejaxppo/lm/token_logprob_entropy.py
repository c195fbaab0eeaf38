"""The sampled token's log-prob and the entropy of the next-token law from one ``[N, V]`` pass,
with a hand-written VJP.

``logprob_entropy(x [..., V], tokens [...]) -> (logp [...], entropy [...])``: ``logp =
log_softmax(x)[token]`` and ``entropy = -sum p log p``, where ``x`` may hold ``-inf`` on tokens
cut from the law (a pad id, top-k / top-p): they have probability 0, their entropy terms are 0
and they get no gradient. Autodiff through ``log_softmax`` keeps ``[N, V]`` intermediates
(the log-probs, ``p``, ``p log p``) and its backward reads them in several passes; here the
forward keeps only ``x`` and two ``[N]`` scalars (the log-normaliser and the entropy), and the
backward is one elementwise pass over ``x``:

    d logp / d x_j    = 1[j == token] - p_j
    d entropy / d x_j = -p_j (log p_j + H)

(benchmarks/NOTES.md has what it measured at SmolLM2-135M's vocabulary).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _stats(x, tokens):
    """``(logp, entropy, lse)`` of ``x [..., V]`` in float32."""
    x = x.astype(jnp.float32)
    m = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    finite = jnp.isfinite(x)
    z = jnp.where(finite, x - m, 0.0)
    e = jnp.where(finite, jnp.exp(z), 0.0)
    s = jnp.sum(e, axis=-1)
    lse = m[..., 0] + jnp.log(s)
    entropy = lse - m[..., 0] - jnp.sum(e * z, axis=-1) / s  # -sum p (z - log s), z = x - m
    picked = jnp.take_along_axis(x, tokens[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return picked - lse, entropy, lse


@jax.custom_vjp
def logprob_entropy(x, tokens):
    """``x [..., V]`` logits (any float dtype; ``-inf`` = cut), ``tokens [...]`` ints ``->
    (logp [...], entropy [...])`` float32. ``logp`` is ``-inf`` for a cut token (its gradient
    is 0)."""
    logp, entropy, _ = _stats(x, tokens)
    return logp, entropy


def _fwd(x, tokens):
    logp, entropy, lse = _stats(x, tokens)
    return (logp, entropy), (x, tokens, lse, entropy)


def _bwd(res, g):
    x, tokens, lse, entropy = res
    g_logp, g_ent = g
    x32 = x.astype(jnp.float32)
    finite = jnp.isfinite(x32)
    logp_all = jnp.where(finite, x32 - lse[..., None], 0.0)
    p = jnp.where(finite, jnp.exp(logp_all), 0.0)
    hot = jnp.arange(x.shape[-1]) == tokens[..., None]
    dx = g_logp[..., None] * (hot - p) - g_ent[..., None] * p * (logp_all + entropy[..., None])
    return jnp.where(finite, dx, 0.0).astype(x.dtype), None


logprob_entropy.defvjp(_fwd, _bwd)
