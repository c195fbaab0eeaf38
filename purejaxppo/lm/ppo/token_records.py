"""The records one token-level PPO iteration passes between its phases.

:class:`Experience` is what scoring produces (:func:`purejaxppo.lm.ppo.experience.score`): the
sampled rows read back teacher-forced, with the reward's scores. :class:`TokenBatch` is what
the update reads (:func:`purejaxppo.lm.ppo.experience.finish`'s output, minibatched by
:func:`purejaxppo.lm.ppo.token_update.update_phase`).

Shapes: ``B`` rows (responses), ``L = P + W`` token slots: the left-padded prompt's ``P`` slots,
then the right-padded response cut to the width ``W <= T`` it is scored at
(:mod:`purejaxppo.lm.models.length_buckets`). Per-token arrays are aligned to the token they
are about (``x[:, t]`` concerns ``tokens[:, t]``, :mod:`purejaxppo.lm.ppo.token_stages`).

Both are NamedTuples (pytrees: ``jit``, ``vmap``, ``lax.scan`` and the device gather take them
as they took the dicts they replaced). Their fields are in alphabetical order on purpose: the
leaf order of those dicts, so every compiled program reads its inputs in the order it did.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax


class Experience(NamedTuple):
    """Scored rows, before the advantages (every slot outside ``mask`` holds 0 in the float
    arrays).

    Attributes:
      has_stop: ``[B]`` bool; the response holds one of the config's stop ids.
      logp_old: ``[B, L]`` float32; the policy's teacher-forced log-prob of each response
        token under the distribution it was sampled from (temperature, top-k / top-p, pad cut).
      logp_ref: ``[B, L]`` float32; the reference's, at the same temperature, only the pad cut.
      logp_sampled: ``[B, L]`` float32; the sampler's own log-probs (the KV-cache decode), kept
        to measure ``logp_mismatch`` against ``logp_old``.
      mask: ``[B, L]`` bool; the response tokens (the actions), up to and including the stop.
      score: ``[B]`` float32; the reward's score of each response.
      tokens: ``[B, L]`` int; prompt then response.
      valid: ``[B, L]`` bool; the prompt's valid slots and ``mask``.
      values_old: ``[B, L]`` float32; the critic's value of the state before each response
        token (0 without a critic).
    """

    has_stop: jax.Array
    logp_old: jax.Array
    logp_ref: jax.Array
    logp_sampled: jax.Array
    mask: jax.Array
    score: jax.Array
    tokens: jax.Array
    valid: jax.Array
    values_old: jax.Array


class TokenBatch(NamedTuple):
    """The update's batch: ``[B, L]`` rows (a minibatch: ``[m, L]``), no gradient through it.

    Attributes:
      advantages: ``[B, L]`` float32; GAE's (whitened if asked) or the group baseline's, 0
        off ``mask``.
      logp_old: ``[B, L]`` float32; as :class:`Experience`'s (the PPO ratio's denominator).
      logp_ref: ``[B, L]`` float32 under ``kl_in == "loss"`` (the KL loss term's reference),
        else None.
      mask: ``[B, L]`` bool; the response tokens the loss averages over.
      ptx_mask: ``[B, L']`` bool under ``ptx`` (the pretraining tokens scored), else None.
      ptx_tokens: ``[B, L']`` int under ``ptx`` (the pretraining batch), else None.
      ptx_valid: ``[B, L']`` bool under ``ptx``, else None.
      returns: ``[B, L]`` float32; the critic's targets (0 without a critic).
      tokens: ``[B, L]`` int; prompt then response.
      valid: ``[B, L]`` bool; the valid slots.
      values_old: ``[B, L]`` float32; the critic's values when sampled (the value clip's centre).
    """

    advantages: jax.Array
    logp_old: jax.Array
    logp_ref: Optional[jax.Array]
    mask: jax.Array
    ptx_mask: Optional[jax.Array]
    ptx_tokens: Optional[jax.Array]
    ptx_valid: Optional[jax.Array]
    returns: jax.Array
    tokens: jax.Array
    valid: jax.Array
    values_old: jax.Array


def update_batch(exp: Experience, advantages, returns, mask, kl_in: str) -> TokenBatch:
    """The update's :class:`TokenBatch` of scored experience (the ptx fields None; a ptx batch
    is joined by the update).

    Args:
      exp: the :class:`Experience` ``[B, L]``.
      advantages, returns: ``[B, L]`` float32; mask: ``[B, L]`` bool, the tokens the loss reads.
      kl_in: ``"loss"`` keeps the reference log-probs for the KL loss term; else they are dropped.
    Returns:
      The :class:`TokenBatch` (gradients not yet stopped).
    """
    return TokenBatch(
        advantages=advantages,
        logp_old=exp.logp_old,
        logp_ref=exp.logp_ref if kl_in == "loss" else None,
        mask=mask,
        ptx_mask=None,
        ptx_tokens=None,
        ptx_valid=None,
        returns=returns,
        tokens=exp.tokens,
        valid=exp.valid,
        values_old=exp.values_old,
    )
