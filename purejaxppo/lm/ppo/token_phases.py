"""The phases of one token-level PPO iteration, as pure functions with explicit arguments.

:func:`~purejaxppo.lm.ppo.token_ppo.make_token_ppo` composes them, in order:

1. :func:`prompt_phase`: the iteration's prompts, each ``group_size`` times in a row, with
   their dataset row ids (-1 from a prompt source without rows);
2. :func:`sample_phase`: this device's rows' responses (the policy's KV cache, one key per
   row) and their scores by the reward (given each row's id when it takes ``rows``); under
   ``dynamic_sampling``, :func:`purejaxppo.lm.ppo.dynamic_sampling.dynamic_sample_phase` runs
   both until the batch holds only groups with a signal (or its draws run out);
3. :func:`width_phase`: the rung of response widths that holds the longest response
   (:mod:`purejaxppo.lm.models.length_buckets`); the next three phases run at that width;
4. :func:`score_phase`: the sequences read back teacher-forced (policy, reference and, for GAE,
   the critic; each pass only where something reads it);
5. :func:`finish_phase`: every device's rows gathered, the KL, the advantages (GAE or a group
   baseline) and the batch statistics (:func:`purejaxppo.lm.ppo.experience.finish`);
6. :func:`~purejaxppo.lm.ppo.token_update.update_phase`: the epochs of minibatch steps;
7. :func:`diagnostics_phase` (a task's metrics of the responses) and :func:`beta_phase`: the
   adaptive KL controller moves ``beta``.

Shapes: ``B = batch_size`` rows (responses), ``B / G`` prompts of ``P`` slots, ``T =
max_new_tokens``; on ``D`` devices each holds ``b = B / D`` rows (rows ``[d*b, (d+1)*b)``, with
the row keys one device would use) until :func:`finish_phase` gathers them.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.models import length_buckets
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo.group_advantages import repeat_prompts
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_records import Experience, TokenBatch
from purejaxppo.lm.ppo.token_update import Devices, detached, kl_off
from purejaxppo.stages import device_rows

#: ``prompts(key, n) -> (prompt [n, P] int32, prompt_valid [n, P] bool[, row [n] int32])``,
#: left-padded; ``row``: each prompt's id in its dataset, carried to the reward (none: -1)
PromptFn = Callable[[jax.Array, int], tuple]


class Sampled(NamedTuple):
    """This device's ``b`` rows after sampling.

    Attributes:
      prompt, prompt_valid: ``[b, P]`` int / bool, left-padded.
      response, logp_sampled, mask: ``[b, T]`` int / float32 / bool, right-padded (``mask``
        the valid response tokens): the sampler's :class:`~purejaxppo.lm.models.sampling.Response`.
      scores: ``[b]`` float, the reward's.
      row: ``[b]`` int32, each row's prompt's id in its dataset (-1: none), the one the reward
        was given; None in a record built without it.
    """

    prompt: jax.Array
    prompt_valid: jax.Array
    response: jax.Array
    logp_sampled: jax.Array
    mask: jax.Array
    scores: jax.Array
    row: Optional[jax.Array] = None


def takes_rows(reward) -> bool:
    """Whether a reward function takes the row ids: a parameter named ``rows``."""
    try:
        return "rows" in inspect.signature(reward).parameters
    except (TypeError, ValueError):
        return False


def position_rows(model) -> Optional[int]:
    """The position table of a :class:`~purejaxppo.lm.models.adapters.FlaxLM`'s module (TinyLM's ``max_len``,
    GPT-2's ``n_positions``, the Llama family's ``config.max_position_embeddings``), None when unknown."""
    module = getattr(model, "model", model)
    for holder in (module, getattr(module, "config", None)):  # the Llama family keeps its sizes in .config
        for name in ("max_len", "n_positions", "max_position_embeddings"):
            if isinstance(getattr(holder, name, None), int):
                return getattr(holder, name)
    return None


def check_prompts(batch_prompts, cfg: TokenPPOConfig, policy) -> None:
    """Shapes are static under ``jit``: a prompts function's wrong batch or a prompt table wider
    than the model's positions is refused at trace time, naming the fix (instead of a vmap
    error, or positions past the table that clamp silently)."""
    form = "prompts(key, n) must return (prompt [n, P] int32, prompt_valid [n, P] bool[, row [n] int32])"
    if not isinstance(batch_prompts, (tuple, list)) or len(batch_prompts) not in (2, 3):
        raise ConfigError(form)
    prompt, valid = batch_prompts[:2]
    n = cfg.batch_size // cfg.group_size
    if prompt.ndim != 2 or prompt.shape != valid.shape or prompt.shape[0] != n:
        what = f"batch_size={cfg.batch_size}" if cfg.group_size == 1 else f"batch_size / group_size = {n}"
        raise ConfigError(
            f"prompts(key, {n}) returned prompt {tuple(prompt.shape)} and prompt_valid "
            f"{tuple(valid.shape)}; both must be [{what}, P]"
        )
    if len(batch_prompts) == 3 and tuple(jnp.shape(batch_prompts[2])) != (n,):
        raise ConfigError(f"{form}; its row ids have shape {tuple(jnp.shape(batch_prompts[2]))}, not ({n},)")
    rows = position_rows(policy)
    if rows is not None and prompt.shape[1] + cfg.max_new_tokens > rows:
        raise ConfigError(
            f"prompts of {prompt.shape[1]} slots + max_new_tokens={cfg.max_new_tokens} exceed the "
            f"model's {rows} positions; shorten the prompts or the response budget"
        )


def prompt_phase(prompts: Optional[PromptFn], key, batch_prompts, cfg: TokenPPOConfig, policy) -> tuple:
    """``(prompt, prompt_valid) [B, P]`` and ``row [B]`` int32: ``batch_prompts`` (``B / G``
    prompts, with or without row ids), or drawn with ``prompts(key, B / G)`` when None, each
    repeated ``G = group_size`` times in a row (so is its row id; -1 when the source has none)."""
    if batch_prompts is None:
        if prompts is None:
            raise ConfigError("iteration() without prompts needs make_token_ppo(..., prompts=fn)")
        batch_prompts = prompts(key, cfg.batch_size // cfg.group_size)
    check_prompts(batch_prompts, cfg, policy)
    prompt, valid = batch_prompts[:2]
    n = prompt.shape[0]
    row = jnp.asarray(batch_prompts[2], jnp.int32) if len(batch_prompts) == 3 else jnp.full((n,), -1, jnp.int32)
    if cfg.group_size == 1:
        return prompt, valid, row
    return (*repeat_prompts(prompt, valid, cfg.group_size), jnp.repeat(row, cfg.group_size, axis=0))


def sample_phase(
    models: experience.Models,
    params: dict,
    reward_params,
    key: jax.Array,
    prompt: jax.Array,
    prompt_valid: jax.Array,
    cfg: TokenPPOConfig,
    devices: Devices,
    rows: Optional[jax.Array] = None,
) -> Sampled:
    """This device's rows of the prompts, their responses and the reward's scores.

    Args:
      models: the :class:`~purejaxppo.lm.ppo.experience.Models`; the policy samples.
      params: ``{"policy", "critic"}`` as the models run them
        (:func:`~purejaxppo.lm.ppo.token_update.trained_params`).
      reward_params: the reward's parameters (None for a reward function).
      key: row ``i`` is drawn with ``split(key, B)[i]``: a row's response does not depend on
        the device split.
      prompt, prompt_valid: the global ``[B, P]`` prompts, left-padded.
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      devices: the :class:`~purejaxppo.lm.ppo.token_update.Devices` split.
      rows: the global ``[B]`` int32 row ids of the prompts (:func:`prompt_phase`; None: -1),
        split with them; a reward with a ``rows`` parameter is given this device's.
    Returns:
      The :class:`Sampled` rows ``[b, ...]`` of this device (``b = B / D``).
    """
    rows = jnp.full(prompt.shape[:1], -1, jnp.int32) if rows is None else rows
    prompt, prompt_valid, row = device_rows.mine((prompt, prompt_valid, rows), devices.axis_name, devices.num_devices)
    row_keys = device_rows.mine(jax.random.split(key, cfg.batch_size), devices.axis_name, devices.num_devices)
    response, logp_sampled, mask = experience.sample(models, params, row_keys, prompt, prompt_valid, cfg)
    # the reward reads the whole [b, T] response (a task may index by column), and its rows' ids if it takes them
    extra = {"rows": row} if takes_rows(models.reward) else {}
    scores = models.reward(reward_params, prompt, prompt_valid, response, mask, **extra)
    return Sampled(prompt, prompt_valid, response, logp_sampled, mask, scores, row)


def width_phase(mask: jax.Array, cfg: TokenPPOConfig, devices: Devices) -> tuple[tuple[int, ...], jax.Array]:
    """The response widths the teacher-forced passes and the update switch over, and the one
    this batch runs at (:mod:`purejaxppo.lm.models.length_buckets`).

    Args:
      mask: ``[b, T]`` bool, this device's response masks (right-padded).
      cfg: its ``length_buckets``, ``stop_ids`` (none: one width) and ``max_new_tokens``.
      devices: the longest response is taken over its axes (the data and the runs axis).
    Returns:
      ``(sizes, index)``: the static ladder of widths and the int32 scalar index of the first
      that holds the longest response, one value over every device and run.
    """
    smallest = length_buckets.smallest_width(cfg.length_buckets, cfg.stop_ids)  # no stop ids: one width
    sizes = length_buckets.bucket_sizes(cfg.max_new_tokens, smallest)
    names = tuple(a for a in (devices.axis_name, devices.runs_axis) if a)
    return sizes, length_buckets.bucket_index(mask, sizes, names)


def score_phase(
    models: experience.Models, params: dict, reference_params, s: Sampled, width: int, cfg: TokenPPOConfig
) -> Experience:
    """The rows read back teacher-forced at a response width that holds every response: the
    policy's pass skipped when the update uses its own log-probs
    (:func:`~purejaxppo.lm.ppo.token_update.detached`), the reference's when there is no KL term
    (:func:`~purejaxppo.lm.ppo.token_update.kl_off`).

    Args:
      models, params, cfg: as :func:`sample_phase`.
      reference_params: the reference's parameters.
      s: this device's :class:`Sampled` rows.
      width: static, ``<= T``; every response column past it is padding.
    Returns:
      The rows' :class:`~purejaxppo.lm.ppo.token_records.Experience` ``[b, P + width]``
      (:func:`purejaxppo.lm.ppo.experience.score`), its scores ``s.scores``.
    """
    return experience.score(
        models,
        params,
        reference_params,
        None,
        s.prompt,
        s.prompt_valid,
        s.response[:, :width],
        s.logp_sampled[:, :width],
        s.mask[:, :width],
        cfg,
        scores=s.scores,
        policy=not detached(cfg),
        reference=not kl_off(cfg),
    )


def finish_phase(
    exp: Experience, beta, cfg: TokenPPOConfig, devices: Devices, keep: Optional[jax.Array] = None
) -> tuple[TokenBatch, dict]:
    """Every device's rows gathered, then the advantages and the batch's statistics.

    Args:
      exp: this device's :class:`~purejaxppo.lm.ppo.token_records.Experience` ``[b, L]``.
      beta: the KL coefficient (scalar).
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      devices: the :class:`~purejaxppo.lm.ppo.token_update.Devices` split.
      keep: ``[B]`` bool over every device's rows, the rows trained on
        (:func:`~purejaxppo.lm.ppo.dynamic_sampling.dynamic_sample_phase`), or None: all.
    Returns:
      :func:`purejaxppo.lm.ppo.experience.finish`'s ``(data, stats)`` over all ``B`` rows
      (``data`` a :class:`~purejaxppo.lm.ppo.token_records.TokenBatch` ``[B, L]`` in the
      single-device row order, so a group's rows sit together; ``stats`` float32 scalars).
    """
    return experience.finish(device_rows.gather(exp, devices.axis_name), beta, cfg, keep)


def beta_phase(beta, stats: dict, cfg: TokenPPOConfig) -> jax.Array:
    """The next KL coefficient: Ziegler et al.'s controller under ``adaptive_kl``, else ``beta``."""
    if not cfg.adaptive_kl:
        return beta
    return tk.adaptive_kl_update(beta, stats["kl_k1"], cfg.kl_target, cfg.batch_size, cfg.kl_horizon)


def diagnostics_phase(diagnostics: Optional[Callable], s: Sampled, devices: Devices) -> dict[str, Any]:
    """``task_<name>`` metrics of the sampled responses (every device's rows), ``{}`` without
    ``diagnostics(prompt, prompt_valid, response, mask) -> {name: scalar}``."""
    if diagnostics is None:
        return {}
    found = diagnostics(*device_rows.gather((s.prompt, s.prompt_valid, s.response, s.mask), devices.axis_name))
    return {f"task_{k}": jnp.asarray(v, jnp.float32) for k, v in found.items()}
