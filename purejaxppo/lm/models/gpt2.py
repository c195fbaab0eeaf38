"""GPT-2 (the architecture of Hugging Face's ``GPT2LMHeadModel``) with a value head, and its
Hugging Face ``config.json`` in and out (the weights' layout: :mod:`purejaxppo.lm.checkpoints.gpt2_hf`).

:class:`GPT2` meets :class:`purejaxppo.lm.models.causal_lm.CausalModule`, so
``FlaxLM(GPT2(...))`` is a :class:`purejaxppo.lm.models.causal_lm.CausalLM` (KV-cached generation,
left-padded prompts, positions from the mask). Its parameter tree mirrors HF's names:
``wte``, ``wpe``, ``h_{i}/{ln_1, attn/{c_attn, c_proj}, ln_2, mlp/{c_fc, c_proj}}``, ``ln_f``,
plus ``value_head``.
"""

from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.lm.models.attention import QUERY_BLOCK, attend, attention_mask, write_kv
from purejaxppo.lm.models.causal_lm import value_head
from purejaxppo.lm.models.kv_cache import (
    KVCache,
    cache_view,
    causal_outputs,
    empty_kv_cache,
    positions_from_mask,
    through_layers,
)

CONFIG_KEYS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "layer_norm_epsilon")


class _Attention(nn.Module):
    n_head: int
    dtype: Any
    query_block: int = QUERY_BLOCK

    @nn.compact
    def __call__(self, x, attn_mask, kv=None, slot=0):
        """``x [B, L, D]``, ``attn_mask [B, L, S]``; ``kv = (k [B, H, S, hd], v [B, H, hd, S])``
        or None (then ``S == L``): the chunk's keys/values are written at ``slot`` first.
        ``-> (out, kv)``."""
        b, l, d = x.shape
        hd = d // self.n_head
        qkv = nn.Dense(3 * d, dtype=self.dtype, name="c_attn")(x).reshape(b, l, 3, self.n_head, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, L, H, hd]
        spec = "bkhd"
        if kv is not None:
            kv = write_kv(kv, k, v, slot)
            (k, v), spec = kv, "cache"
        out = attend(q, k, v, attn_mask, spec, self.query_block if kv is None else 0)  # float32 softmax
        return nn.Dense(d, dtype=self.dtype, name="c_proj")(out.reshape(b, l, d)), kv


class _MLP(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        h = nn.Dense(4 * d, dtype=self.dtype, name="c_fc")(x)
        return nn.Dense(d, dtype=self.dtype, name="c_proj")(nn.gelu(h, approximate=True))  # HF "gelu_new"


class _Block(nn.Module):
    n_head: int
    eps: float
    dtype: Any
    query_block: int = QUERY_BLOCK

    @nn.compact
    def __call__(self, x, attn_mask, kv=None, slot=0):
        ln = lambda name: nn.LayerNorm(epsilon=self.eps, dtype=self.dtype, name=name)  # noqa: E731
        a, kv = _Attention(self.n_head, self.dtype, self.query_block, name="attn")(ln("ln_1")(x), attn_mask, kv, slot)
        x = x + a
        return x + _MLP(self.dtype, name="mlp")(ln("ln_2")(x)), kv


class GPT2(nn.Module):
    """GPT-2: token + learned position embeddings, ``n_layer`` pre-LayerNorm blocks (fused qkv
    with bias, tanh-GELU MLP of width ``4 * n_embd``), ``ln_f``, the LM head tied to ``wte``
    (``logits = h @ wte.T``) and a zero-initialised ``value_head`` on the final hidden state.
    It meets :class:`~purejaxppo.lm.models.causal_lm.CausalModule`; ``purejaxppo.lm.load_pretrained``
    / ``load_gpt2`` build one from a Hugging Face folder.

    Attributes:
      vocab_size: rows of ``wte`` (``V``).
      n_positions: rows of ``wpe``: at most this many VALID tokens per row (padding takes no
        position).
      n_embd: the hidden width ``D`` (a multiple of ``n_head``).
      n_layer: transformer blocks (``h_0 ... h_{n_layer-1}``).
      n_head: attention heads.
      layer_norm_epsilon: the LayerNorms' epsilon.
      dtype: the compute dtype; parameters stay float32; softmax, logits and values float32.
      query_block: teacher-forced attention runs in blocks of this many queries
        (:func:`~purejaxppo.lm.models.attention.attend`).
    """

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5
    dtype: Any = jnp.float32
    query_block: int = QUERY_BLOCK  # teacher-forced attention in blocks of this many queries (attention.attend)

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
        ``__call__`` documents the arguments and returns). GPT-2's own: the head is tied to
        ``wte`` (accumulated in float32); ``cache`` is a :class:`~purejaxppo.lm.models.kv_cache.KVCache`;
        ``ValueError`` when ``n_embd`` is not a multiple of ``n_head``."""
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head}")
        valid = valid.astype(bool)
        start, key_valid = cache_view(valid, cache, slot)
        wte = nn.Embed(self.vocab_size, self.n_embd, dtype=self.dtype, name="wte")
        wpe = nn.Embed(self.n_positions, self.n_embd, dtype=self.dtype, name="wpe")
        x = wte(tokens) + wpe(positions_from_mask(valid, start))
        attn_mask = attention_mask(key_valid, slot, tokens.shape[1])
        block = lambda i: _Block(self.n_head, self.layer_norm_epsilon, self.dtype, self.query_block, name=f"h_{i}")  # noqa: E731
        x, ks, vs = through_layers(block, self.n_layer, x, cache, slot, attn_mask)
        x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype, name="ln_f")(x)
        logits = values = None
        if heads in ("both", "logits"):
            # tied head, h @ wte.T: [B, L, D] x [V, D] -> [B, L, V], accumulated in float32
            w = wte.embedding.astype(self.dtype)
            logits = jnp.einsum("bld,vd->blv", x[:, logits_from:], w, preferred_element_type=jnp.float32)
        if heads in ("both", "values"):
            values = value_head(x, self.dtype)
        return causal_outputs(logits, values, cache, ks, vs, key_valid, valid)

    def empty_cache(self, batch: int, max_len: int) -> KVCache:
        """A :class:`KVCache` of ``max_len`` slots holding nothing (in the compute dtype)."""
        return empty_kv_cache(batch, max_len, self.n_layer, self.n_head, self.n_embd // self.n_head, self.dtype)


def gpt2_from_config(config: Mapping, dtype=jnp.float32) -> GPT2:
    """A :class:`GPT2` from an HF ``config.json`` dict; ``ValueError`` for a missing key or an
    option this architecture does not implement (another activation, ``n_inner != 4 * n_embd``,
    untied embeddings, unscaled or layer-scaled attention)."""
    missing = [k for k in CONFIG_KEYS[:-1] if k not in config]
    if missing:
        raise ValueError(f"GPT-2 config lacks {missing} (needs {list(CONFIG_KEYS)})")
    unsupported = {
        "activation_function": "gelu_new",
        "n_inner": 4 * config["n_embd"],
        "tie_word_embeddings": True,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
    }
    for key, want in unsupported.items():
        if config.get(key) is not None and config[key] != want:
            raise ValueError(f"GPT-2 config {key}={config[key]!r} is not supported (only {want!r})")
    if config["n_embd"] % config["n_head"]:
        raise ValueError(f"GPT-2 config: n_embd={config['n_embd']} is not a multiple of n_head={config['n_head']}")
    return GPT2(**{k: config[k] for k in CONFIG_KEYS if k in config}, dtype=dtype)


def gpt2_config(module: GPT2) -> dict:
    """The HF ``config.json`` dict of ``module`` (loadable by ``transformers``' GPT2LMHeadModel)."""
    cfg = {k: getattr(module, k) for k in CONFIG_KEYS}
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        **cfg,
        "n_ctx": module.n_positions,
        "n_inner": None,
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
    }
