"""The Llama family (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM2) as one Flax module with
a value head: RMSNorm, rotary positions (RoPE), grouped-query attention, a SwiGLU MLP.

:class:`Llama` meets :class:`purejaxppo.lm.models.causal_lm.CausalModule`, so
``FlaxLM(Llama(config))`` is a :class:`purejaxppo.lm.models.causal_lm.CausalLM`: left-padded prompts,
positions from the mask (RoPE angles of a row do not depend on its padding), a KV cache
holding only the ``num_key_value_heads`` key/value heads. The parameter tree mirrors HF's
names (:mod:`purejaxppo.lm.checkpoints.llama_hf` maps them): ``embed_tokens``, ``layers_{i}/{
input_layernorm, self_attn/{q,k,v,o}_proj (+ q_norm, k_norm), post_attention_layernorm,
mlp/{gate,up,down}_proj}``, ``norm``, ``lm_head`` (absent when tied), ``value_head``.

Precision: ``dtype`` is the compute dtype, ``param_dtype`` the dtype the matrices are kept in
(bf16 halves their memory). The RMSNorm scales and the value head stay float32 and the norms
are computed in float32 (as HF does); the RoPE angles, the attention softmax, the logits and
the values are float32.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.lm.models.llama_config import LlamaConfig, rope_inv_freq
from purejaxppo.lm.models.matmul import flat_dot, logits_dot
from purejaxppo.lm.models.attention import QUERY_BLOCK, attend, attention_mask, write_kv
from purejaxppo.lm.models.kv_cache import (
    KVCache,
    cache_view,
    causal_outputs,
    empty_kv_cache,
    positions_from_mask,
    through_layers,
)
from purejaxppo.lm.models.causal_lm import value_head

_INIT = nn.initializers.normal(0.02)  # HF's initializer_range default


def _dot(dtype):
    """The projections' product: :func:`~purejaxppo.lm.models.matmul.flat_dot` under a 16-bit compute
    dtype (float32 accumulation, the fast bf16 path), ``lax.dot_general`` under float32."""
    return None if jnp.dtype(dtype) == jnp.float32 else flat_dot


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * scale`` in float32 (scale float32, init 1), cast back to
    the compute dtype before the scale as HF's ``LlamaRMSNorm`` does."""

    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (scale * x32.astype(self.dtype)).astype(self.dtype)


def rotate(x, cos, sin):
    """RoPE in HF's "rotate half" layout: ``x [B, L, H, hd]``, ``cos, sin [B, L, hd]`` (the
    angles of dims ``i`` and ``i + hd/2`` are equal) -> ``x cos + rotate_half(x) sin``."""
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None] + rot * sin[:, :, None]


class _Attention(nn.Module):
    config: LlamaConfig
    dtype: Any
    param_dtype: Any
    query_block: int

    @nn.compact
    def __call__(self, x, cos, sin, attn_mask, kv=None, slot=0):
        """``x [B, L, D]``, ``cos, sin [B, L, hd]``, ``attn_mask [B, L, S]``; ``kv = (k [B, K, S,
        hd], v [B, K, hd, S])`` or None (``S == L``): the chunk's keys/values are written at
        ``slot`` first. ``-> (out [B, L, D], kv)``."""
        c = self.config
        b, l, _ = x.shape
        dense = lambda n, bias, name: nn.Dense(
            n,
            use_bias=bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,  # noqa: E731
            kernel_init=_INIT,
            dot_general=_dot(self.dtype),
            name=name,
        )
        q = dense(c.num_attention_heads * c.head_dim, c.qkv_bias, "q_proj")(x).reshape(b, l, -1, c.head_dim)
        k = dense(c.num_key_value_heads * c.head_dim, c.qkv_bias, "k_proj")(x).reshape(b, l, -1, c.head_dim)
        v = dense(c.num_key_value_heads * c.head_dim, c.qkv_bias, "v_proj")(x).reshape(b, l, -1, c.head_dim)
        if c.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before the rotation
            q = RMSNorm(c.rms_norm_eps, self.dtype, name="q_norm")(q)
            k = RMSNorm(c.rms_norm_eps, self.dtype, name="k_norm")(k)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        spec = "bkhd"
        if kv is not None:
            kv = write_kv(kv, k, v, slot)
            (k, v), spec = kv, "cache"
        out = attend(q, k, v, attn_mask, spec, self.query_block if kv is None else 0)
        return dense(c.hidden_size, c.o_bias, "o_proj")(out.reshape(b, l, -1)), kv


class _MLP(nn.Module):
    config: LlamaConfig
    dtype: Any
    param_dtype: Any

    @nn.compact
    def __call__(self, x):
        c = self.config
        dense = lambda n, name: nn.Dense(
            n,
            use_bias=False,
            dtype=self.dtype,
            param_dtype=self.param_dtype,  # noqa: E731
            kernel_init=_INIT,
            dot_general=_dot(self.dtype),
            name=name,
        )
        h = nn.silu(dense(c.intermediate_size, "gate_proj")(x)) * dense(c.intermediate_size, "up_proj")(x)
        return dense(c.hidden_size, "down_proj")(h)


class _Layer(nn.Module):
    config: LlamaConfig
    dtype: Any
    param_dtype: Any
    query_block: int

    @nn.compact
    def __call__(self, x, cos, sin, attn_mask, kv=None, slot=0):
        eps = self.config.rms_norm_eps
        h = RMSNorm(eps, self.dtype, name="input_layernorm")(x)
        a, kv = _Attention(self.config, self.dtype, self.param_dtype, self.query_block, name="self_attn")(
            h, cos, sin, attn_mask, kv, slot
        )
        x = x + a
        h = RMSNorm(eps, self.dtype, name="post_attention_layernorm")(x)
        return x + _MLP(self.config, self.dtype, self.param_dtype, name="mlp")(h), kv


class _LMHead(nn.Module):
    """An untied LM head ``kernel [D, V]`` (or sampling's ``kernel_t [V, D]``), logits
    accumulated in float32."""

    vocab_size: int
    dtype: Any
    param_dtype: Any
    reads_kernel_t = True  # decode_layout.dense_interceptor lets it read its transposed copy

    @nn.compact
    def __call__(self, x):
        if self.has_variable("params", "kernel_t"):  # sampling's transposed copy (decode_layout)
            return logits_dot(x.astype(self.dtype), self.get_variable("params", "kernel_t"), vocab_axis=0)
        w = self.param("kernel", _INIT, (x.shape[-1], self.vocab_size), self.param_dtype)
        return logits_dot(x.astype(self.dtype), w, vocab_axis=1)


class Llama(nn.Module):
    """A Llama-family causal LM (:class:`~purejaxppo.lm.models.llama_config.LlamaConfig`) with a
    zero-initialised value head on the final normed hidden state. It meets
    :class:`~purejaxppo.lm.models.causal_lm.CausalModule`; ``purejaxppo.lm.load_pretrained``
    builds one from a Hugging Face folder. Random init: matrices ``normal(0.02)`` as HF's
    ``initializer_range`` default, norms 1.

    Attributes:
      config: the architecture (:class:`~purejaxppo.lm.models.llama_config.LlamaConfig`).
      dtype: the compute dtype; the norms, RoPE angles, softmax, logits and values are float32.
      param_dtype: the dtype the matrices are kept in (``jnp.bfloat16`` halves their memory);
        the RMSNorm scales and the value head stay float32.
      query_block: teacher-forced attention runs in blocks of this many queries
        (:func:`~purejaxppo.lm.models.attention.attend`).
      scan_layers: run the layers as one ``lax.scan`` over their stacked parameters (one
        compiled layer body: about 3x faster to compile at 30 layers, slower to run on CPU);
        the parameter tree is the same either way, the cache's keys and values are stacked
        ``[layers, ...]``.
      remat_layers: under ``scan_layers``, recompute each layer's activations in the backward.
    """

    config: LlamaConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    query_block: int = QUERY_BLOCK  # teacher-forced attention in blocks of this many queries (attention.attend)
    # the layers as one lax.scan over their stacked parameters (one compiled layer body: about 3x
    # faster to compile at 30 layers, but slower to run on CPU, benchmarks/NOTES.md: off by
    # default) instead of unrolled; the parameter tree is the same either way
    scan_layers: bool = False
    remat_layers: bool = False  # under scan_layers: each layer's activations recomputed in the backward

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
        """The causal pass of :class:`~purejaxppo.lm.models.causal_lm.CausalModule` (its
        ``__call__`` documents the arguments and returns). Llama's own: RoPE angles from the
        mask's positions; the head tied to ``embed_tokens`` or an ``lm_head`` (logits
        accumulated in float32); Mistral's ``sliding_window`` masks keys by slot; ``cache`` is a
        :class:`~purejaxppo.lm.models.kv_cache.KVCache` of ``num_key_value_heads`` heads
        (stacked under ``scan_layers``)."""
        c = self.config
        valid = valid.astype(bool)
        start, key_valid = cache_view(valid, cache, slot)
        embed = nn.Embed(
            c.vocab_size,
            c.hidden_size,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            embedding_init=_INIT,
            name="embed_tokens",
        )
        x = embed(tokens)
        # RoPE angles in float32 from the mask's positions, cast to the compute dtype as HF does
        angles = positions_from_mask(valid, start)[..., None].astype(jnp.float32) * jnp.asarray(rope_inv_freq(c))
        angles = jnp.concatenate([angles, angles], axis=-1)
        cos, sin = jnp.cos(angles).astype(self.dtype), jnp.sin(angles).astype(self.dtype)
        attn_mask = attention_mask(key_valid, slot, tokens.shape[1])
        if c.sliding_window is not None:  # Mistral: at most `sliding_window` keys back, itself included (by slot,
            q_slot = slot + jnp.arange(tokens.shape[1])[:, None]  # as HF; left padding only precedes a row's tokens)
            attn_mask = attn_mask & (q_slot - jnp.arange(attn_mask.shape[-1])[None, :] < c.sliding_window)[None]
        if self.scan_layers and not self.is_initializing():
            x, (ks, vs) = self._scanned(x, cos, sin, attn_mask, cache, slot)
        else:
            layer = lambda i: _Layer(c, self.dtype, self.param_dtype, self.query_block, name=f"layers_{i}")  # noqa: E731
            x, ks, vs = through_layers(layer, c.num_hidden_layers, x, cache, slot, cos, sin, attn_mask)
        x = RMSNorm(c.rms_norm_eps, self.dtype, name="norm")(x)
        logits = values = None
        if heads in ("both", "logits"):
            if c.tie_word_embeddings:  # h @ embed.T: [B, L, D] x [V, D] -> [B, L, V], accumulated in float32
                logits = logits_dot(x[:, logits_from:], embed.embedding, vocab_axis=0)
            else:
                logits = _LMHead(c.vocab_size, self.dtype, self.param_dtype, name="lm_head")(x[:, logits_from:])
        if heads in ("both", "values"):
            values = value_head(x.astype(jnp.float32), jnp.float32)
        return causal_outputs(logits, values, cache, ks, vs, key_valid, valid)

    def _scanned(self, x, cos, sin, attn_mask, cache, slot):
        """The layers as one ``lax.scan`` over their parameters stacked here (the tree keeps
        ``layers_{i}``): one compiled layer body instead of ``num_hidden_layers``. With a cache
        (stacked, :meth:`empty_cache`) each layer reads its slice and returns only the chunk's
        new keys and values, written into the stacked cache after the scan (carrying the whole
        cache through the scan copied it at every layer: benchmarks/NOTES.md). ``-> (x, (k,
        v))`` (``(None, None)`` without a cache)."""
        n = self.config.num_hidden_layers
        layer = _Layer(self.config, self.dtype, self.param_dtype, self.query_block, parent=None)
        tree = self.variables["params"]
        stacked = jax.tree.map(lambda *p: jnp.stack(p), *(tree[f"layers_{i}"] for i in range(n)))
        length = x.shape[1]

        def body(h, inputs):
            p, kv = inputs
            h, kv = layer.apply({"params": p}, h, cos, sin, attn_mask, kv, slot)
            if kv is None:
                return h, None
            # the chunk's slots: the keys' axis 2, the values' axis 3 (attention.CACHE_KEYS)
            return h, tuple(jax.lax.dynamic_slice_in_dim(c, slot, length, axis=a) for c, a in zip(kv, (2, 3)))

        body = jax.checkpoint(body) if self.remat_layers else body
        kv = None if cache is None else (cache.k, cache.v)
        x, new = jax.lax.scan(body, x, (stacked, kv))
        if new is None:
            return x, (None, None)
        return x, tuple(jax.lax.dynamic_update_slice_in_dim(c, d, slot, axis=a) for c, d, a in zip(kv, new, (3, 4)))

    def empty_cache(self, batch: int, max_len: int) -> KVCache:
        """A :class:`KVCache` of ``max_len`` slots holding nothing: ``num_key_value_heads``
        heads per layer, in the compute dtype (keys ``[B, K, S, hd]``, values ``[B, K, hd, S]``);
        under ``scan_layers`` one stacked array ``[layers, ...]`` for the keys and one for the values."""
        c = self.config
        cache = empty_kv_cache(batch, max_len, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, self.dtype)
        if self.scan_layers:
            return cache._replace(k=jnp.stack(cache.k), v=jnp.stack(cache.v))
        return cache
