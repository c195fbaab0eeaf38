"""The KV cache of every Flax model here (TinyLM, GPT-2, the Llama family): a fixed-shape
pytree that rides ``lax.scan``, and the position ids that come with it.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class KVCache(NamedTuple):
    """The KV cache of every Flax model here for ``S`` slots: a fixed-shape pytree that rides a
    ``lax.scan`` carry. Made by a module's ``empty_cache(batch, max_len)``; slot ``i`` holds
    token ``i`` of the row (left padding included, as not valid).

    Attributes:
      k: per layer, keys ``[B, K, S, head_dim]`` in the compute dtype (``K``: the key/value
        heads); a tuple, or one stacked array ``[layers, B, K, S, head_dim]`` (a Llama under
        ``scan_layers``).
      v: per layer, values ``[B, K, head_dim, S]`` (slots last, so both decode products
        contract their minor axis: :func:`~purejaxppo.lm.models.attention.write_kv`); a tuple or
        one stacked array, as ``k``.
      valid: ``[B, S]`` bool, which slots hold valid tokens (False on padding and on slots not
        yet written).
      count: ``[B]`` int32, valid tokens so far: the position id of the next valid token.
    """

    k: tuple
    v: tuple
    valid: jax.Array
    count: jax.Array


def positions_from_mask(valid: jax.Array, start: jax.Array | int = 0) -> jax.Array:
    """``[B, L]`` position ids counting valid tokens only (left padding does not shift them);
    ``start [B]``: valid tokens before this chunk (a cache's ``count``)."""
    start = jnp.asarray(start, jnp.int32).reshape(-1, 1)
    return jnp.maximum(start + jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


def cache_view(valid: jax.Array, cache: KVCache | None, slot) -> tuple:
    """``(start, key_valid [B, S])`` of a chunk ``valid [B, L]`` written at ``slot`` (every model's)."""
    return (0, valid) if cache is None else (cache.count, jax.lax.dynamic_update_slice(cache.valid, valid, (0, slot)))


def empty_kv_cache(batch: int, max_len: int, n_layers: int, n_heads: int, head_dim: int, dtype) -> KVCache:
    """A :class:`KVCache` of ``max_len`` slots holding nothing (keys and values in ``dtype``)."""
    keys = tuple(jnp.zeros((batch, n_heads, max_len, head_dim), dtype) for _ in range(n_layers))
    values = tuple(jnp.zeros((batch, n_heads, head_dim, max_len), dtype) for _ in range(n_layers))
    return KVCache(keys, values, jnp.zeros((batch, max_len), bool), jnp.zeros((batch,), jnp.int32))


def grow_kv_cache(cache: KVCache, max_len: int) -> KVCache:
    """``cache`` with ``max_len >= S`` slots: empty ones (zero keys and values, not valid) appended."""
    more = max_len - cache.valid.shape[1]
    pad = lambda x, axis: jnp.concatenate([x, jnp.zeros(x.shape[:axis] + (more,) + x.shape[axis + 1 :], x.dtype)], axis)  # noqa: E731
    # the slots: the keys' next-to-last axis, the values' last (stacked or per layer alike)
    grow = lambda kv, axis: (
        pad(kv, kv.ndim + axis) if isinstance(kv, jax.Array) else tuple(pad(x, x.ndim + axis) for x in kv)
    )  # noqa: E731
    return KVCache(grow(cache.k, -2), grow(cache.v, -1), pad(cache.valid, 1), cache.count)


def written_cache(cache: KVCache, ks: list, vs: list, key_valid: jax.Array, valid: jax.Array) -> KVCache:
    """The cache after a chunk: every layer's keys and values (lists, or stacked arrays kept
    as they are), the slots' validity, and the count advanced by the chunk's valid tokens."""
    keep = lambda x: x if isinstance(x, jax.Array) else tuple(x)  # noqa: E731
    return KVCache(keep(ks), keep(vs), key_valid, cache.count + valid.sum(1, dtype=jnp.int32))


def through_layers(layer: Callable[[int], Any], n: int, x: jax.Array, cache: KVCache | None, slot, *inputs) -> tuple:
    """``x [B, L, D]`` through ``n`` layers, unrolled (every model family's loop).

    Args:
      layer: ``layer(i)`` makes the i-th layer (a Flax module, named by the caller, created
        inside the caller's compact ``__call__``); called ``(x, *inputs, kv, slot) -> (x, kv)``
        with ``kv = (k[i], v[i])`` of ``cache``, or None without one.
      n: the number of layers.
      x: the hidden states ``[B, L, D]``.
      cache: a :class:`KVCache` (per-layer tuples), or None.
      slot: where the chunk is written in the cache.
      *inputs: what every layer takes after ``x`` (the attention mask, RoPE angles, ...).

    Returns:
      ``(x, ks, vs)``: the last layer's output and the layers' written keys and values (lists,
      empty without a cache), as :func:`causal_outputs` takes them.
    """
    ks, vs = [], []
    for i in range(n):
        x, kv = layer(i)(x, *inputs, None if cache is None else (cache.k[i], cache.v[i]), slot)
        if kv is not None:
            ks.append(kv[0])
            vs.append(kv[1])
    return x, ks, vs


def causal_outputs(logits, values, cache: KVCache | None, ks, vs, key_valid: jax.Array, valid: jax.Array) -> tuple:
    """What a :class:`~purejaxppo.lm.models.causal_lm.CausalModule` returns: ``(logits, values)``
    without a cache, ``(logits, values, cache)`` with one (written by :func:`written_cache`)."""
    if cache is None:
        return logits, values
    return logits, values, written_cache(cache, ks, vs, key_valid, valid)
