"""A tiny causal transformer LM with a per-token value head, its KV cache, and the protocol
that generation (:mod:`purejaxppo.lm.sampling`) drives.

Batches are ``tokens [B, L]`` with ``valid [B, L]`` (False on padding). Prompts are
LEFT-padded and responses RIGHT-padded, so positions come from the mask
(``cumsum(valid) - 1``) and padded keys are masked out of attention: the same prompt
with more left padding gives the same outputs at its valid positions.

``TinyLM.__call__ -> (logits [B, L, V], values [B, L])``: both are per POSITION
(``logits[:, t]`` predicts token ``t+1``; ``values[:, t]`` is V of the prefix ending at
``t``); :func:`purejaxppo.lm.tokens.token_logprobs` / ``shift_right`` align them to tokens.
Used as policy (logits), frozen reference (logits) and critic (values): three parameter
sets of one module.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.lm.attention import QUERY_BLOCK, attend, attention_mask, write_kv
from purejaxppo.lm.decode_layout import dense_interceptor as transposed_interceptor
from purejaxppo.lm.decode_layout import transposed_kernels
from purejaxppo.lm.lora import dense_interceptor


class CausalLM(Protocol):
    """What generation and token-level PPO need of a language model; ``params`` is whatever
    the model takes.

    * ``logits(params, tokens [B, L], valid [B, L]) -> [B, L, V]``: teacher-forced;
      ``logits[:, t]`` predicts token ``t+1``. Prompts are left-padded (``valid`` False on
      padding); outputs at valid positions do not depend on how much padding there is.
    * ``forward(params, tokens, valid) -> (logits [B, L, V], values [B, L])``: one pass with
      both heads (a value head on the trunk: ``values[:, t]`` is V of the prefix ending at
      ``t``); ``values(params, tokens, valid) -> [B, L]``: the value head alone (no LM head
      computed: a separate critic pays for its trunk only).
    * ``prefill(params, tokens [B, P], valid [B, P], max_len) -> (logits_last [B, V], cache)``:
      reads a left-padded prompt into a cache of ``max_len >= P`` slots (slot ``i`` holds
      token ``i`` of the row); ``logits_last == logits(params, tokens, valid)[:, -1]``.
    * ``decode(params, cache, token [B], position) -> (logits [B, V], cache)``: appends
      ``token`` (a valid token) at slot ``position`` (an int32 scalar, traced, the same for
      every row: ``P`` for the first decoded token, then ``P+1``, ...; ``< max_len``) and
      returns the logits predicting the next token, i.e. ``logits(params, seq, valid)[:, -1]``
      of the prompt with every decoded token appended as valid.
    * ``grow(cache, max_len) -> cache`` (optional): the same cache with ``max_len`` slots, the
      new ones empty (unwritten), so generation can start small and grow with the response
      (:func:`purejaxppo.lm.sampling.sample_response`'s ``rungs``).
    * ``decode_params(params) -> params`` (optional): what the sampler hands ``decode``, made
      once per generation outside the token loop (:class:`FlaxLM`: the Dense kernels
      transposed for few-row products); absent: ``params`` as they are. ``prefill`` (and
      ``decode``) must accept both.

    Logits and values come back in float32 whatever the compute dtype. The cache is a pytree
    with fixed shapes (it rides a ``lax.scan`` carry); it is opaque to the caller.
    :class:`FlaxLM` (over :class:`TinyLM`, :class:`purejaxppo.lm.gpt2.GPT2`, or any module with
    their calling convention) and :class:`FullRecompute` implement this.
    """

    def logits(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array: ...

    def forward(self, params: Any, tokens: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]: ...

    def values(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array: ...

    def prefill(self, params: Any, tokens: jax.Array, valid: jax.Array, max_len: int) -> tuple[jax.Array, Any]: ...

    def decode(self, params: Any, cache: Any, token: jax.Array, position: jax.Array) -> tuple[jax.Array, Any]: ...

    def grow(self, cache: Any, max_len: int) -> Any: ...

    def decode_params(self, params: Any) -> Any: ...


class KVCache(NamedTuple):
    """TinyLM's cache for ``S`` slots: per layer keys ``k[i]: [B, heads, S, head_dim]`` and
    values ``v[i]: [B, heads, head_dim, S]`` (slots last: :data:`purejaxppo.lm.attention.CACHE_KEYS`;
    a tuple, or one stacked array ``[layers, ...]``: a scanned Llama's),
    ``valid [B, S]`` (which slots hold valid tokens; False on padding and on slots not yet
    written) and ``count [B]`` (valid tokens so far: the position id of the next valid token)."""

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


def value_head(x: jax.Array, dtype) -> jax.Array:
    """The zero-initialised value head (a ``Dense`` named ``value_head``) on the final hidden
    states ``x [B, L, D] -> [B, L]`` float32. Called inside a module's compact ``__call__``,
    so its parameters are that module's ``value_head``."""
    return nn.Dense(1, kernel_init=nn.initializers.zeros, dtype=dtype, name="value_head")(x)[..., 0].astype(jnp.float32)


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


class Block(nn.Module):
    d_model: int
    n_heads: int
    dtype: Any = jnp.float32
    query_block: int = QUERY_BLOCK  # teacher-forced passes (no cache): see attend()

    @nn.compact
    def __call__(self, x, attn_mask, kv=None, slot=0):
        """``x [B, L, D]``, ``attn_mask [B, L, S]``. Without ``kv`` the keys are this chunk's
        (``S == L``); with ``kv = (k [B, H, S, hd], v [B, H, hd, S])`` the chunk's keys and
        values are written at ``slot`` first and attention reads the whole cache. ``-> (x, kv)``."""
        b, l, d = x.shape
        hd = d // self.n_heads
        dense = lambda n, **kw: nn.Dense(n, dtype=self.dtype, **kw)  # noqa: E731
        h = nn.LayerNorm(dtype=self.dtype)(x)
        qkv = dense(3 * d, use_bias=False)(h).reshape(b, l, 3, self.n_heads, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        spec = "bkhd"
        if kv is not None:
            kv = write_kv(kv, k, v, slot)
            (k, v), spec = kv, "cache"
        out = attend(q, k, v, attn_mask, spec, self.query_block if kv is None else 0)
        x = x + dense(d)(out.reshape(b, l, d))
        h = nn.LayerNorm(dtype=self.dtype)(x)
        return x + dense(d)(nn.gelu(dense(4 * d)(h))), kv


HEADS = ("both", "logits", "values")


class TinyLM(nn.Module):
    """A pre-LayerNorm causal transformer with learned positions, an LM head (``lm_head``) and
    a zero-initialised value head (``value_head``). ``dtype``: the compute dtype (parameters
    stay float32; ``jnp.bfloat16`` for mixed precision; attention softmax, logits and values in
    float32)."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    max_len: int = 32  # position-embedding rows: valid tokens per row, prompt + response
    dtype: Any = jnp.float32
    query_block: int = QUERY_BLOCK  # teacher-forced attention in blocks of this many queries (attend)

    @nn.compact
    def __call__(
        self,
        tokens: jax.Array,
        valid: jax.Array,
        cache: KVCache | None = None,
        slot=0,
        heads: str = "both",
        logits_from: int = 0,
    ):
        """``tokens, valid [B, L] -> (logits [B, L, V], values [B, L])``; with a ``cache`` the
        chunk sits at slots ``slot..slot+L-1`` after what the cache holds, and the updated
        cache is returned third. One code path: without a cache it is the full causal pass.
        ``heads`` (static): ``"logits"`` or ``"values"`` computes that head only (the other
        output is None). ``logits_from`` (static): logits of positions ``logits_from..L-1`` only (``[B, L - logits_from, V]``)."""
        valid = valid.astype(bool)
        l = tokens.shape[1]
        start, key_valid = cache_view(valid, cache, slot)
        x = nn.Embed(self.vocab_size, self.d_model, dtype=self.dtype, name="wte")(tokens)
        x = x + nn.Embed(self.max_len, self.d_model, dtype=self.dtype, name="wpe")(positions_from_mask(valid, start))
        attn_mask = attention_mask(key_valid, slot, l)
        ks, vs = [], []
        for i in range(self.n_layers):
            x, kv = Block(self.d_model, self.n_heads, self.dtype, self.query_block, name=f"block_{i}")(
                x, attn_mask, None if cache is None else (cache.k[i], cache.v[i]), slot
            )
            if kv is not None:
                ks.append(kv[0])
                vs.append(kv[1])
        x = nn.LayerNorm(dtype=self.dtype, name="ln_f")(x)
        logits = values = None
        if heads in ("both", "logits"):
            logits = nn.Dense(self.vocab_size, dtype=self.dtype, name="lm_head")(x[:, logits_from:]).astype(jnp.float32)
        if heads in ("both", "values"):
            values = value_head(x, self.dtype)
        if cache is None:
            return logits, values
        return logits, values, written_cache(cache, ks, vs, key_valid, valid)

    def empty_cache(self, batch: int, max_len: int) -> KVCache:
        """A :class:`KVCache` of ``max_len`` slots holding nothing (in the compute dtype)."""
        return empty_kv_cache(batch, max_len, self.n_layers, self.n_heads, self.d_model // self.n_heads, self.dtype)


@dataclass(frozen=True)
class FlaxLM:
    """:class:`CausalLM` over a Flax module with TinyLM's calling convention (``params``: its
    variables): ``module(tokens, valid, cache=None, slot=0, heads="both")`` returning
    ``(logits, values)``, or ``(logits, values, cache)`` with a cache, and
    ``module.empty_cache(batch, max_len)``. :class:`TinyLM` and
    :class:`purejaxppo.lm.gpt2.GPT2` meet it; so can a user's own model."""

    model: Any
    # sampling reads each Dense kernel from a transposed copy made once per generation
    # (decode_layout: about 1.4x faster decode products on CPU); False for a module whose
    # Dense-shaped parameters are not nn.Dense layers
    transposed_decode: bool = True
    lora_unmerged = True  # its Dense layers read LoRA factors beside their kernels (lora.lora_attach)

    def _apply(self, params, *args, **kwargs):
        # LoRA's outside: it adds the low-rank path to whatever computes x W
        with nn.intercept_methods(dense_interceptor), nn.intercept_methods(transposed_interceptor):
            return self.model.apply(params, *args, **kwargs)

    def decode_params(self, params):
        """What :meth:`decode` is given by the sampler, made once per generation: ``params``
        with the Dense kernels transposed and, where the module's ``dtype`` (its compute dtype)
        is the kernel's, LoRA's ``A`` stacked into the copy
        (:func:`purejaxppo.lm.decode_layout.transposed_kernels`), or ``params`` itself."""
        if not self.transposed_decode:
            return params
        return transposed_kernels(params, getattr(self.model, "dtype", None))

    def _head_args(self, first: int) -> dict:
        """``logits_from=first`` when the module takes it (a user's module may not: then sliced)."""
        takes = "logits_from" in inspect.signature(type(self.model).__call__).parameters
        return {"logits_from": first} if first and takes else {}

    def logits(self, params, tokens, valid, first: int = 0):
        """``[B, L - first, V]``: the logits of positions ``first..L-1`` (static ``first``)."""
        kw = self._head_args(first)
        return self._apply(params, tokens, valid, heads="logits", **kw)[0][:, 0 if kw else first :]

    def forward(self, params, tokens, valid, first: int = 0):
        """``(logits [B, L - first, V], values [B, L])``."""
        kw = self._head_args(first)
        logits, values = self._apply(params, tokens, valid, **kw)
        return logits[:, 0 if kw else first :], values

    def values(self, params, tokens, valid):
        return self._apply(params, tokens, valid, heads="values")[1]

    def prefill(self, params, tokens, valid, max_len: int):
        cache, kw = self.model.empty_cache(tokens.shape[0], max_len), self._head_args(tokens.shape[1] - 1)
        logits, _, cache = self._apply(params, tokens, valid, cache, 0, heads="logits", **kw)  # the last position's
        return logits[:, -1], cache

    def decode(self, params, cache, token, position):
        ones = jnp.ones(token.shape + (1,), bool)
        logits, _, cache = self._apply(params, token[:, None], ones, cache, position, heads="logits")
        return logits[:, 0], cache

    def grow(self, cache, max_len: int):
        """A :class:`KVCache` (every module here) grown by :func:`grow_kv_cache`; a module with
        another cache grows it with its own ``grow_cache(cache, max_len)``."""
        own = getattr(self.model, "grow_cache", None)
        return own(cache, max_len) if own is not None else grow_kv_cache(cache, max_len)


@dataclass(frozen=True)
class FullRecompute:
    """:class:`CausalLM` from any teacher-forced ``logits_fn(params, tokens [B, L], valid [B, L])
    -> [B, L, V]``, without a cache: the "cache" is the token buffer ``(tokens [B, S], valid
    [B, S])`` and every step re-runs the full causal pass over all ``S`` slots. It has no
    value head: ``forward`` gives zero values (pair it with a separate critic)."""

    logits_fn: Callable

    def logits(self, params, tokens, valid):
        return self.logits_fn(params, tokens, valid)

    def forward(self, params, tokens, valid):
        logits = self.logits_fn(params, tokens, valid)
        return logits, jnp.zeros(logits.shape[:2], jnp.float32)

    def values(self, params, tokens, valid):
        return jnp.zeros(tokens.shape, jnp.float32)

    def prefill(self, params, tokens, valid, max_len: int):
        b, p = tokens.shape
        buf = jnp.concatenate([tokens, jnp.zeros((b, max_len - p), tokens.dtype)], axis=1)
        vbuf = jnp.concatenate([valid.astype(bool), jnp.zeros((b, max_len - p), bool)], axis=1)
        return self.logits_fn(params, buf, vbuf)[:, p - 1], (buf, vbuf)

    def decode(self, params, cache, token, position):
        buf, vbuf = cache
        buf, vbuf = buf.at[:, position].set(token.astype(buf.dtype)), vbuf.at[:, position].set(True)
        return self.logits_fn(params, buf, vbuf)[:, position], (buf, vbuf)

    def grow(self, cache, max_len: int):
        buf, vbuf = cache
        more = max_len - buf.shape[1]
        return tuple(jnp.concatenate([x, jnp.zeros((x.shape[0], more), x.dtype)], axis=1) for x in (buf, vbuf))
