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
``t``); :func:`purejaxppo.lm.ppo.token_stages.token_logprobs` / ``shift_right`` align them to tokens.
"""

from __future__ import annotations

from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp


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
      (:func:`purejaxppo.lm.models.sampling.sample_response`'s ``rungs``).
    * ``decode_params(params) -> params`` (optional): what the sampler hands ``decode``, made
      once per generation outside the token loop (:class:`FlaxLM`: the Dense kernels
      transposed for few-row products); absent: ``params`` as they are. ``prefill`` (and
      ``decode``) must accept both.

    Logits and values come back in float32 whatever the compute dtype. The cache is a pytree
    with fixed shapes (it rides a ``lax.scan`` carry); it is opaque to the caller.
    :class:`FlaxLM` (over :class:`TinyLM`, :class:`purejaxppo.lm.models.gpt2.GPT2`, or any module with
    their calling convention) and :class:`FullRecompute` implement this.
    """

    def logits(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array: ...

    def forward(self, params: Any, tokens: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]: ...

    def values(self, params: Any, tokens: jax.Array, valid: jax.Array) -> jax.Array: ...

    def prefill(self, params: Any, tokens: jax.Array, valid: jax.Array, max_len: int) -> tuple[jax.Array, Any]: ...

    def decode(self, params: Any, cache: Any, token: jax.Array, position: jax.Array) -> tuple[jax.Array, Any]: ...

    def grow(self, cache: Any, max_len: int) -> Any: ...

    def decode_params(self, params: Any) -> Any: ...


class CausalModule(Protocol):
    """The calling convention of a Flax causal LM module (what :class:`~purejaxppo.lm.models.adapters.FlaxLM`
    wraps; TinyLM, GPT-2 and the Llama family meet it).

    ``module(tokens [B, L] int32, valid [B, L] bool, cache=None, slot=0, heads="both",
    logits_from=0)``:

    * ``cache``: ``None`` for a teacher-forced pass over the chunk alone, or the module's cache
      (``module.empty_cache(batch, max_len)``); the chunk is written at slot ``slot`` (an int or
      traced int32 scalar) and attention reads the whole cache.
    * ``heads``: ``"both"``, ``"logits"`` (no value head computed) or ``"values"`` (no LM head).
    * ``logits_from`` (static, optional for a user's module): logits only for positions
      ``logits_from..L-1`` (``[B, L - logits_from, V]``), so a prefill computes one row.

    Returns ``(logits [B, L', V] float32, values [B, L] float32)`` without a cache and
    ``(logits, values, cache)`` with one; the head not asked for is ``None``.
    """

    def __call__(
        self,
        tokens: jax.Array,
        valid: jax.Array,
        cache: Any = None,
        slot: Any = 0,
        heads: str = "both",
        logits_from: int = 0,
    ) -> tuple: ...

    def empty_cache(self, batch: int, max_len: int) -> Any: ...


def value_head(x: jax.Array, dtype) -> jax.Array:
    """The zero-initialised value head (a ``Dense`` named ``value_head``) on the final hidden
    states ``x [B, L, D] -> [B, L]`` float32. Called inside a module's compact ``__call__``,
    so its parameters are that module's ``value_head``."""
    return nn.Dense(1, kernel_init=nn.initializers.zeros, dtype=dtype, name="value_head")(x)[..., 0].astype(jnp.float32)
