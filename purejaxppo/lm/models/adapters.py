"""Two implementations of :class:`~purejaxppo.lm.models.causal_lm.CausalLM`: :class:`FlaxLM`
over any Flax module with the :class:`~purejaxppo.lm.models.causal_lm.CausalModule` convention,
and :class:`FullRecompute` over a bare logits function (no cache).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from purejaxppo.lm.models.decode_layout import dense_interceptor as transposed_interceptor
from purejaxppo.lm.models.decode_layout import transposed_kernels
from purejaxppo.lm.models.kv_cache import grow_kv_cache
from purejaxppo.lm.models.lora import dense_interceptor


@dataclass(frozen=True)
class FlaxLM:
    """:class:`CausalLM` over a Flax module with TinyLM's calling convention (``params``: its
    variables): ``module(tokens, valid, cache=None, slot=0, heads="both")`` returning
    ``(logits, values)``, or ``(logits, values, cache)`` with a cache, and
    ``module.empty_cache(batch, max_len)``. :class:`TinyLM` and
    :class:`purejaxppo.lm.models.gpt2.GPT2` meet it; so can a user's own model."""

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
        (:func:`purejaxppo.lm.models.decode_layout.transposed_kernels`), or ``params`` itself."""
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
