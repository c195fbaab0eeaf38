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
    """A :class:`~purejaxppo.lm.models.causal_lm.CausalLM` over a Flax module that meets
    :class:`~purejaxppo.lm.models.causal_lm.CausalModule` (:class:`~purejaxppo.lm.models.tiny_lm.TinyLM`,
    :class:`~purejaxppo.lm.models.gpt2.GPT2`, :class:`~purejaxppo.lm.models.llama.Llama`, or a
    user's own). ``params`` are the module's variables (``{"params": ...}``); LoRA factors beside
    a Dense kernel (``purejaxppo.lm.lora_attach``) are read unmerged. Frozen and hashable: a
    static argument under ``jit``.

    Attributes:
      model: the Flax module.
      transposed_decode: sampling reads each ``nn.Dense`` kernel from a transposed copy made
        once per generation (:meth:`decode_params`; about 1.4x faster decode products on CPU);
        False for a module whose Dense-shaped parameters are not ``nn.Dense`` layers.
    """

    model: Any
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
        """:meth:`CausalLM.logits <purejaxppo.lm.models.causal_lm.CausalLM.logits>`;
        ``[B, L - first, V]`` float32: the logits of positions ``first..L-1`` (static ``first``)."""
        kw = self._head_args(first)
        return self._apply(params, tokens, valid, heads="logits", **kw)[0][:, 0 if kw else first :]

    def forward(self, params, tokens, valid, first: int = 0):
        """:meth:`CausalLM.forward <purejaxppo.lm.models.causal_lm.CausalLM.forward>`;
        ``(logits [B, L - first, V], values [B, L])`` float32."""
        kw = self._head_args(first)
        logits, values = self._apply(params, tokens, valid, **kw)
        return logits[:, 0 if kw else first :], values

    def values(self, params, tokens, valid):
        """:meth:`CausalLM.values <purejaxppo.lm.models.causal_lm.CausalLM.values>`: ``[B, L]`` float32."""
        return self._apply(params, tokens, valid, heads="values")[1]

    def prefill(self, params, tokens, valid, max_len: int):
        """:meth:`CausalLM.prefill <purejaxppo.lm.models.causal_lm.CausalLM.prefill>`: the
        module's ``empty_cache(B, max_len)`` filled from slot 0, only the last position's logits
        computed."""
        cache, kw = self.model.empty_cache(tokens.shape[0], max_len), self._head_args(tokens.shape[1] - 1)
        logits, _, cache = self._apply(params, tokens, valid, cache, 0, heads="logits", **kw)  # the last position's
        return logits[:, -1], cache

    def decode(self, params, cache, token, position):
        """:meth:`CausalLM.decode <purejaxppo.lm.models.causal_lm.CausalLM.decode>`."""
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
    """A :class:`~purejaxppo.lm.models.causal_lm.CausalLM` from a bare teacher-forced logits
    function, without a cache: the "cache" is the token buffer ``(tokens [B, S] int32, valid
    [B, S] bool)`` and every decode step re-runs the full causal pass over all ``S`` slots (the
    reference the cached models are tested against). It has no value head: ``forward`` and
    ``values`` give zeros (pair it with a separate critic).

    Attributes:
      logits_fn: ``logits_fn(params, tokens [B, L] int32, valid [B, L] bool) -> [B, L, V]``
        float32, causal, with outputs at valid positions independent of left padding.
    """

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
