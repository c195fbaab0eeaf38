"""A tiny causal transformer LM with a per-token value head (:class:`TinyLM`): the built-in
tasks' model and the tests' reference. It meets :class:`~purejaxppo.lm.models.causal_lm.CausalModule`,
so ``FlaxLM(TinyLM(...))`` is a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`. Used as policy
(logits), frozen reference (logits) and critic (values): three parameter sets of one module.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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
    a zero-initialised value head (``value_head``): the built-in tasks' model. It meets
    :class:`~purejaxppo.lm.models.causal_lm.CausalModule`; ``FlaxLM(TinyLM(...))`` is a
    :class:`~purejaxppo.lm.models.causal_lm.CausalLM`. ``purejaxppo.lm.init_tiny_lm(task, key)``
    sizes one for a task and initialises it.

    Attributes:
      vocab_size: rows of the token embedding and width of the LM head (``V``).
      d_model: the hidden width ``D`` (a multiple of ``n_heads``).
      n_layers: transformer blocks.
      n_heads: attention heads (``head_dim = d_model // n_heads``).
      max_len: position-embedding rows: VALID tokens per row, prompt plus response (padding
        takes no position).
      dtype: the compute dtype; parameters stay float32 (``jnp.bfloat16`` for mixed
        precision); the attention softmax, the logits and the values are float32.
      query_block: teacher-forced attention runs in blocks of this many queries
        (:func:`~purejaxppo.lm.models.attention.attend`).
    """

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
        """The causal pass of :class:`~purejaxppo.lm.models.causal_lm.CausalModule` (its
        ``__call__`` documents the arguments and returns). TinyLM's own: the logits come from an
        untied ``lm_head``; ``cache`` is a :class:`~purejaxppo.lm.models.kv_cache.KVCache`."""
        valid = valid.astype(bool)
        l = tokens.shape[1]
        start, key_valid = cache_view(valid, cache, slot)
        x = nn.Embed(self.vocab_size, self.d_model, dtype=self.dtype, name="wte")(tokens)
        x = x + nn.Embed(self.max_len, self.d_model, dtype=self.dtype, name="wpe")(positions_from_mask(valid, start))
        attn_mask = attention_mask(key_valid, slot, l)
        block = lambda i: Block(self.d_model, self.n_heads, self.dtype, self.query_block, name=f"block_{i}")  # noqa: E731
        x, ks, vs = through_layers(block, self.n_layers, x, cache, slot, attn_mask)
        x = nn.LayerNorm(dtype=self.dtype, name="ln_f")(x)
        logits = values = None
        if heads in ("both", "logits"):
            logits = nn.Dense(self.vocab_size, dtype=self.dtype, name="lm_head")(x[:, logits_from:]).astype(jnp.float32)
        if heads in ("both", "values"):
            values = value_head(x, self.dtype)
        return causal_outputs(logits, values, cache, ks, vs, key_valid, valid)

    def empty_cache(self, batch: int, max_len: int) -> KVCache:
        """A :class:`KVCache` of ``max_len`` slots holding nothing (in the compute dtype)."""
        return empty_kv_cache(batch, max_len, self.n_layers, self.n_heads, self.d_model // self.n_heads, self.dtype)
