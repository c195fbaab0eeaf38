"""One token-level PPO iteration, composed from its named phases
(:mod:`purejaxppo.lm.ppo.token_phases`, :mod:`purejaxppo.lm.ppo.token_update`).

:func:`token_iteration` is ``state, prompts -> state, metrics``, read top to bottom:

1. **prompts**: ``batch_size / group_size`` prompts, each ``group_size`` times, with their
   dataset row ids (-1 when the prompt source gives none);
2. **sample**: a response per row with the policy's KV cache, scored by the reward (given each
   row's id when it takes ``rows``: its dataset columns reach a Python reward); under
   ``dynamic_sampling`` (DAPO) prompts and samples are drawn again, in a ``while_loop`` of the
   same program, until the batch holds only groups whose scores differ (or ``max_extra_draws``
   draws more ran out: the rest then has no weight);
3. **width**: the rung of response widths that holds the longest response; the next three
   phases (:func:`score_finish_update`) run at it, one branch of a ``lax.switch`` per rung;
4. **score**: teacher-forced log-probs of the policy and the reference (and the critic's values,
   for GAE): an :class:`~purejaxppo.lm.ppo.token_records.Experience`; no policy pass when the update
   takes one gradient step and uses its own log-probs, gradient stopped, as the old ones, no
   reference pass when there is no KL term (``beta`` 0);
5. **finish**: the rows gathered; the KL (in the rewards, or kept for a loss term), the
   advantages: masked GAE and whitening, or a group baseline (GRPO, RLOO; no critic): a
   :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`;
6. **update**: ``update_epochs`` x ``num_minibatches`` steps of the clipped objective through
   :func:`purejaxppo.stages.update.update_epochs` (the control world's loop, not a copy);
7. **beta**: the adaptive KL controller moves ``beta`` (traced: it lives in the state).

:func:`~purejaxppo.lm.ppo.token_ppo.make_token_ppo` binds a :class:`TokenParts` and the config.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.lm.models import length_buckets
from purejaxppo.lm.ppo import dynamic_sampling, experience
from purejaxppo.lm.ppo import token_phases as ph
from purejaxppo.lm.ppo.token_phases import PromptFn, Sampled
from purejaxppo.lm.ppo.token_update import Devices, trained_params, update_phase
from purejaxppo.stages.update import TrainState

#: ``ptx(key, batch) -> (tokens [B, L], valid [B, L], loss_mask [B, L])``: the pretraining batch
PtxFn = Callable[[jax.Array, int], tuple]


class TokenParts(NamedTuple):
    """What an iteration is built from, fixed when
    :func:`~purejaxppo.lm.ppo.token_ppo.make_token_ppo` builds it.

    Attributes:
      models: the :class:`~purejaxppo.lm.ppo.experience.Models`.
      devices: the :class:`~purejaxppo.lm.ppo.token_update.Devices` split.
      prompts: the caller's prompts function (:data:`~purejaxppo.lm.ppo.token_phases.PromptFn`),
        or None (every iteration is given its prompts).
      ptx: the pretraining batch function (:data:`PtxFn`), or None.
      diagnostics: ``(prompt, prompt_valid, response, mask) -> {name: scalar}``, or None.
    """

    models: experience.Models
    devices: Devices
    prompts: Optional[PromptFn]
    ptx: Optional[PtxFn]
    diagnostics: Optional[Callable]


class IterationKeys(NamedTuple):
    """The keys one iteration draws from its state's key: ``split(key, 5)``, in this order."""

    next: jax.Array  # the state's key after the iteration
    prompt: jax.Array
    sample: jax.Array
    update: jax.Array
    ptx: jax.Array


def score_finish_update(
    parts: TokenParts, state, params: dict, key, ptx_batch, width: int, sampled: Sampled, cfg, keep=None
) -> tuple[TrainState, dict, dict]:
    """The iteration's phases at response width ``width`` (one branch of the width switch):
    score (:func:`~purejaxppo.lm.ppo.token_phases.score_phase`), finish
    (:func:`~purejaxppo.lm.ppo.token_phases.finish_phase`) and update
    (:func:`~purejaxppo.lm.ppo.token_update.update_phase`, with ``key``).

    Args:
      parts: the :class:`TokenParts`.
      state: the iteration's :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPOState`.
      params: ``{"policy", "critic"}`` as the models run them.
      key: the update's (its minibatch permutations).
      ptx_batch: ``(tokens, valid, mask) [B, L']`` under ``cfg.ptx``, else None.
      width: static, ``<= T``: it holds every response of ``sampled``, this device's
        :class:`~purejaxppo.lm.ppo.token_phases.Sampled` rows; cfg: the (traced) config.
      keep: ``[B]`` bool, the rows trained on (dynamic sampling), or None: all.
    Returns:
      ``(train, stats, metrics)``: the updated :class:`~purejaxppo.stages.update.TrainState`,
      :func:`~purejaxppo.lm.ppo.experience.finish`'s statistics and the update's metrics.
    """
    exp = ph.score_phase(parts.models, params, state.reference, sampled, width, cfg)
    data, stats = ph.finish_phase(exp, state.beta, cfg, parts.devices, keep)
    if cfg.ptx:
        ptx_tokens, ptx_valid, ptx_mask = ptx_batch
        data = data._replace(ptx_mask=ptx_mask, ptx_tokens=ptx_tokens, ptx_valid=ptx_valid)
    first = sampled.prompt.shape[1] - 1  # logits from the last prompt slot on (token_update.share_loss)
    train, upd = update_phase(
        parts.models, state.train, data, key, state.beta, cfg, parts.devices, state.reference, first
    )
    return train, stats, upd


def token_iteration(parts: TokenParts, state, batch_prompts, cfg) -> tuple[Any, dict]:
    """One iteration: prompts, sample, then score, finish and update at the width holding the
    longest response, then the task's diagnostics and the KL coefficient.

    Args:
      parts: the :class:`TokenParts` the iteration is built from.
      state: the :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPOState` before it.
      batch_prompts: ``(prompt, prompt_valid) [B / G, P]`` (and ``row [B / G]`` int32, the
        prompts' dataset row ids), or None to draw them with ``parts.prompts``.
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` (traced numeric fields).
    Returns:
      ``(state, metrics)``: the next state and a dict of float32 scalars (the batch's
      statistics, the update's means, ``response_width``, ``task_<name>`` diagnostics; under
      ``dynamic_sampling`` also ``groups_kept``, ``extra_draws``, ``groups_dropped`` and
      ``first_draw_score``: :func:`~purejaxppo.lm.ppo.dynamic_sampling.dynamic_sample_phase`).
    """
    keys = IterationKeys(*jax.random.split(state.key, 5))
    if cfg.dynamic_sampling:  # draws until the groups with a signal fill the batch (keep: the rows trained on)
        params = trained_params(state.train.params, state.reference, parts.models)
        sampled, keep, drawn = dynamic_sampling.dynamic_sample_phase(
            parts.models,
            parts.prompts,
            params,
            state.reward,
            keys.prompt,
            keys.sample,
            batch_prompts,
            cfg,
            parts.devices,
        )
    else:
        prompt, prompt_valid, rows = ph.prompt_phase(
            parts.prompts, keys.prompt, batch_prompts, cfg, parts.models.policy
        )
        params = trained_params(state.train.params, state.reference, parts.models)  # LoRA adapters on the base
        sampled = ph.sample_phase(
            parts.models, params, state.reward, keys.sample, prompt, prompt_valid, cfg, parts.devices, rows
        )
        keep, drawn = None, {}
    ptx_batch = parts.ptx(keys.ptx, cfg.batch_size) if cfg.ptx else None
    sizes, index = ph.width_phase(sampled.mask, cfg, parts.devices)

    def at_width(width):
        return lambda s: score_finish_update(parts, state, params, keys.update, ptx_batch, width, s, cfg, keep)

    train, stats, upd = length_buckets.on_width(index, sizes, at_width, sampled)
    stats.update(drawn)
    stats.update(ph.diagnostics_phase(parts.diagnostics, sampled, parts.devices))
    stats["response_width"] = jnp.asarray(sizes, jnp.float32)[index]
    beta = ph.beta_phase(state.beta, stats, cfg)
    new = state._replace(train=train, beta=beta, key=keys.next, iteration=state.iteration + 1)
    return new, {**stats, **upd}
