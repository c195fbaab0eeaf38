"""The protocol every language model here meets, and the calling convention of its Flax modules.

* :class:`CausalLM`: what generation and token-level PPO need of a model (teacher-forced
  logits and values, prefill and decode over a cache). :class:`~purejaxppo.lm.models.adapters.FlaxLM`
  and :class:`~purejaxppo.lm.models.adapters.FullRecompute` implement it.
* :class:`CausalModule`: the ``__call__`` of a Flax module that :class:`FlaxLM` wraps (TinyLM,
  GPT-2, the Llama family, or a user's own), written once here.

Batches are ``tokens [B, L]`` with ``valid [B, L]`` (False on padding). Prompts are
LEFT-padded and responses RIGHT-padded, so positions come from the mask
(``cumsum(valid) - 1``) and padded keys are masked out of attention: the same prompt
with more left padding gives the same outputs at its valid positions. Logits are per
POSITION (``logits[:, t]`` predicts token ``t+1``; ``values[:, t]`` is V of the prefix ending at
``t``); ``purejaxppo.lm.token_logprobs`` / ``shift_right`` align them to tokens.
"""

from __future__ import annotations

from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp


class CausalLM(Protocol):
    """What generation and token-level PPO need of a language model.

    A model is a pure object (hashable, a static argument under ``jit``); ``params`` is
    whatever it takes (for :class:`~purejaxppo.lm.models.adapters.FlaxLM`: its Flax variables
    ``{"params": ...}``). Logits and values come back float32 whatever the compute dtype. The
    cache is a pytree of fixed shapes (it rides a ``lax.scan`` carry), opaque to the caller.
    ``grow`` and ``decode_params`` are optional: the sampler falls back to a cache of the full
    length and to ``params`` as they are.

    Implemented by :class:`~purejaxppo.lm.models.adapters.FlaxLM` (over TinyLM, GPT-2, the Llama
    family, or any :class:`CausalModule`) and :class:`~purejaxppo.lm.models.adapters.FullRecompute`
    (over a bare logits function, no cache).
    """

    def logits(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array:
        """Teacher-forced logits of every position.

        Args:
          params: the model's parameters.
          tokens: ``[B, L]`` int32; prompts LEFT-padded, responses RIGHT-padded.
          valid: ``[B, L]`` bool, False on padding. Outputs at valid positions do not depend
            on how much padding there is.

        Returns:
          ``[B, L, V]`` float32; ``logits[:, t]`` predicts token ``t+1``.
        """
        ...

    def forward(self, params: Any, tokens: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One teacher-forced pass with both heads (the value head on the trunk).

        Args:
          params: the model's parameters.
          tokens: ``[B, L]`` int32.
          valid: ``[B, L]`` bool, False on padding.

        Returns:
          ``(logits [B, L, V], values [B, L])``, both float32; ``values[:, t]`` is V of the
          prefix ending at ``t``.
        """
        ...

    def values(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array:
        """The value head alone (no LM head computed: a separate critic pays for its trunk only).

        Args:
          params: the model's parameters.
          tokens: ``[B, L]`` int32.
          valid: ``[B, L]`` bool, False on padding.

        Returns:
          ``[B, L]`` float32.
        """
        ...

    def prefill(self, params: Any, tokens: jax.Array, valid: jax.Array, max_len: int) -> tuple[jax.Array, Any]:
        """Read a left-padded prompt into a fresh cache.

        Args:
          params: the model's parameters, as they are or as :meth:`decode_params` made them.
          tokens: ``[B, P]`` int32 prompt, LEFT-padded.
          valid: ``[B, P]`` bool, False on padding.
          max_len: the cache's slots (static), ``>= P``; slot ``i`` holds token ``i`` of the row.

        Returns:
          ``(logits_last [B, V] float32, cache)`` with ``logits_last == logits(params, tokens,
          valid)[:, -1]``.
        """
        ...

    def decode(self, params: Any, cache: Any, token: jax.Array, position: jax.Array) -> tuple[jax.Array, Any]:
        """Append one valid token per row and predict the next.

        Args:
          params: as :meth:`prefill` takes them.
          cache: the cache of :meth:`prefill` or of the previous ``decode``.
          token: ``[B]`` int32, written as valid.
          position: the slot, an int32 scalar (traced; the same for every row): ``P`` for the
            first decoded token, then ``P+1``, ...; ``< max_len``.

        Returns:
          ``(logits [B, V] float32, cache)``: ``logits(params, seq, valid)[:, -1]`` of the prompt
          with every decoded token appended as valid.
        """
        ...

    def grow(self, cache: Any, max_len: int) -> Any:
        """Optional: the same cache with more slots, so generation can start small and grow
        with the response (:func:`~purejaxppo.lm.models.sampling.sample_response`'s ``rungs``).

        Args:
          cache: a cache of ``S`` slots.
          max_len: the new slot count (static), ``>= S``.

        Returns:
          The cache with ``max_len`` slots, the new ones empty (unwritten).
        """
        ...

    def decode_params(self, params: Any) -> Any:
        """Optional: what the sampler hands :meth:`prefill` and :meth:`decode`, made once per
        generation outside the token loop (``FlaxLM``: the Dense kernels transposed for
        few-row products). ``prefill`` and ``decode`` must accept both forms.

        Args:
          params: the model's parameters.

        Returns:
          The parameters in the decode layout (absent method: ``params`` as they are).
        """
        ...


class CausalModule(Protocol):
    """The calling convention of a Flax causal-LM module: what
    :class:`~purejaxppo.lm.models.adapters.FlaxLM` wraps. TinyLM, GPT-2 and the Llama family
    meet it, and so can a user's own module; the contract is written here once (the models'
    ``__call__`` docstrings add only what is their own).
    """

    def __call__(
        self,
        tokens: jax.Array,
        valid: jax.Array,
        cache: Any = None,
        slot: Any = 0,
        heads: str = "both",
        logits_from: int = 0,
    ) -> tuple:
        """One causal pass over a chunk, teacher-forced or into a cache (one code path).

        Positions come from the mask (``cumsum(valid) - 1``, after what a cache holds), and
        padded keys are masked out of attention, so left padding changes nothing at the valid
        positions.

        Args:
          tokens: ``[B, L]`` int32.
          valid: ``[B, L]`` bool, False on padding.
          cache: None for a pass over the chunk alone, or the module's cache
            (:meth:`empty_cache`): the chunk is written at slots ``slot..slot+L-1`` and
            attention reads the whole cache.
          slot: where the chunk starts in the cache, an int or a traced int32 scalar.
          heads: static; ``"both"``, ``"logits"`` (no value head computed) or ``"values"``
            (no LM head).
          logits_from: static (optional for a user's module); logits only for positions
            ``logits_from..L-1``, so a prefill computes one row.

        Returns:
          ``(logits [B, L - logits_from, V] float32, values [B, L] float32)`` without a cache,
          ``(logits, values, cache)`` with one; the head not asked for is None.
        """
        ...

    def empty_cache(self, batch: int, max_len: int) -> Any:
        """A cache that holds nothing yet.

        Args:
          batch: rows ``B``.
          max_len: slots ``S``.

        Returns:
          The module's cache (every module here: a
          :class:`~purejaxppo.lm.models.kv_cache.KVCache` in the compute dtype).
        """
        ...


def value_head(x: jax.Array, dtype) -> jax.Array:
    """The zero-initialised value head (a ``Dense`` named ``value_head``) on the final hidden
    states ``x [B, L, D] -> [B, L]`` float32. Called inside a module's compact ``__call__``,
    so its parameters are that module's ``value_head``."""
    return nn.Dense(1, kernel_init=nn.initializers.zeros, dtype=dtype, name="value_head")(x)[..., 0].astype(jnp.float32)
