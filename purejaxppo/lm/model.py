"""A tiny causal transformer LM with a per-token value head, and sampling by ``lax.scan``.

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

import flax.linen as nn
import jax
import jax.numpy as jnp

_NEG = -1e9  # finite: a row with every key masked stays finite (softmax -> uniform), never NaN


def positions_from_mask(valid: jax.Array) -> jax.Array:
    """``[B, L]`` position ids counting valid tokens only (left padding does not shift them)."""
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


class Block(nn.Module):
    d_model: int
    n_heads: int

    @nn.compact
    def __call__(self, x, attn_mask):
        b, l, d = x.shape
        hd = d // self.n_heads
        h = nn.LayerNorm()(x)
        qkv = nn.Dense(3 * d, use_bias=False)(h).reshape(b, l, 3, self.n_heads, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(hd).astype(x.dtype)
        scores = jnp.where(attn_mask[:, None], scores, _NEG)
        att = jax.nn.softmax(scores, axis=-1)
        x = x + nn.Dense(d)(jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, l, d))
        h = nn.LayerNorm()(x)
        return x + nn.Dense(d)(nn.gelu(nn.Dense(4 * d)(h)))


class TinyLM(nn.Module):
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    max_len: int = 32

    @nn.compact
    def __call__(self, tokens: jax.Array, valid: jax.Array):
        valid = valid.astype(bool)
        l = tokens.shape[1]
        x = nn.Embed(self.vocab_size, self.d_model)(tokens)
        x = x + nn.Embed(self.max_len, self.d_model)(positions_from_mask(valid))
        causal = jnp.tril(jnp.ones((l, l), bool))
        # key must be valid and not in the future; a query always sees itself (no empty rows)
        attn_mask = (causal[None] & valid[:, None, :]) | jnp.eye(l, dtype=bool)[None]
        for _ in range(self.n_layers):
            x = Block(self.d_model, self.n_heads)(x, attn_mask)
        x = nn.LayerNorm()(x)
        logits = nn.Dense(self.vocab_size)(x)
        values = nn.Dense(1, kernel_init=nn.initializers.zeros)(x)[..., 0]
        return logits, values


def generate(apply_fn, params, key, prompt, prompt_valid, max_new: int, eos_id: int, pad_id: int):
    """Sample ``max_new`` tokens after left-padded prompts, by ``lax.scan`` (no KV cache:
    one full causal pass per step, which is cheap at these lengths).

    Args:
      apply_fn: ``apply_fn(params, tokens [B, L], valid [B, L]) -> (logits, values)``.
      prompt, prompt_valid: ``[B, P]`` (left-padded).
    Returns:
      ``(tokens [B, P+T], valid [B, P+T], action_mask [B, P+T])``: ``valid`` marks every
      non-pad token, ``action_mask`` the generated ones (up to and including EOS).
      After EOS the row is padded with ``pad_id``.
    """
    b, p = prompt.shape
    total = p + max_new
    tokens = jnp.concatenate([prompt, jnp.full((b, max_new), pad_id, prompt.dtype)], axis=1)
    valid = jnp.concatenate([prompt_valid.astype(bool), jnp.zeros((b, max_new), bool)], axis=1)

    def step(carry, t):
        tokens, valid, done, key = carry
        key, sub = jax.random.split(key)
        logits, _ = apply_fn(params, tokens, valid)
        nxt = jax.random.categorical(sub, logits[:, p + t - 1], axis=-1).astype(tokens.dtype)
        live = ~done
        nxt = jnp.where(live, nxt, pad_id)
        tokens = tokens.at[:, p + t].set(nxt)
        valid = valid.at[:, p + t].set(live)
        done = done | (nxt == eos_id)
        return (tokens, valid, done, key), None

    (tokens, valid, _, _), _ = jax.lax.scan(
        step, (tokens, valid, jnp.zeros((b,), bool), key), jnp.arange(max_new)
    )
    action_mask = valid & (jnp.arange(total)[None, :] >= p)
    return tokens, valid, action_mask
