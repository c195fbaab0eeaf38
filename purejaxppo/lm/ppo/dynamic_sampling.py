"""DAPO's dynamic sampling (Yu et al. 2025) inside the compiled token-level iteration.

Under a group baseline (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline) a group whose scores are
all equal gets advantages of exactly 0: it adds no signal, only a smaller effective batch.
:func:`dynamic_sample_phase` drops such groups and draws more prompts (a whole batch at a time:
shapes are fixed) until ``B / G`` groups with a signal fill the batch, at most
``max_extra_draws`` draws after the first; short of them, the rest of the batch is flat groups
with no weight in the loss (``keep``: :func:`purejaxppo.lm.ppo.experience.finish`).

Why inside the compiled iteration and not a host loop: the iteration stays one program (the
chunked ``lax.scan`` of iterations and the vmapped seeds keep running without a host round trip
per draw), and it stays a pure function of the state, so a resumed run is bit-exact by
construction; timed against a host loop in benchmarks/NOTES.md (dynamic sampling).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_phases as ph
from purejaxppo.lm.ppo.group_advantages import informative_groups
from purejaxppo.lm.ppo.sequence_rewards import shaped_score, stopped
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_phases import PromptFn, Sampled
from purejaxppo.lm.ppo.token_update import Devices
from purejaxppo.stages import device_rows

#: dynamic sampling's draw ``k >= 1`` takes its keys from ``fold_in(sample_key, EXTRA_DRAW_SALT + k)``
#: (:func:`extra_draw_keys`): far from the row indices ``split(sample_key, B)`` counts through
EXTRA_DRAW_SALT = 0x44A90000


def extra_draw_keys(sample_key: jax.Array, k) -> tuple[jax.Array, jax.Array]:
    """``(prompt_key, sample_key)`` of dynamic sampling's draw ``k >= 1`` (int, may be traced):
    ``split(fold_in(sample_key, EXTRA_DRAW_SALT + k))``, a function of the iteration's sample key
    alone (draw 0 takes the iteration's own prompt and sample keys, as without dynamic sampling)."""
    pair = jax.random.split(jax.random.fold_in(sample_key, EXTRA_DRAW_SALT + k))
    return pair[0], pair[1]


def fill_groups(buffer, filled: jax.Array, draw, signal: jax.Array) -> tuple[Any, jax.Array]:
    """The groups of ``draw`` with a signal, in their order, into ``buffer``'s slots ``filled,
    filled + 1, ...``; those past the last slot are left out.

    Args:
      buffer: a pytree of ``[n, G, ...]`` leaves, groups ``[0, filled)`` taken.
      filled: int32 scalar, the groups taken so far (``<= n``).
      draw: a pytree like ``buffer``, a new draw's groups.
      signal: ``[n]`` bool, which of ``draw``'s groups to take
        (:func:`~purejaxppo.lm.ppo.group_advantages.informative_groups`).
    Returns:
      ``(buffer, filled)``: the buffer with the groups written (a stable order: a cumulative
      count places each, no sort), and ``min(n, filled + signal's count)``.
    """
    n = signal.shape[0]
    place = jnp.where(signal, filled + jnp.cumsum(signal, dtype=jnp.int32) - 1, n)  # n and past: left out
    buffer = jax.tree.map(lambda b, x: b.at[place].set(x, mode="drop"), buffer, draw)
    return buffer, jnp.minimum(filled + jnp.sum(signal, dtype=jnp.int32), n)


def dynamic_sample_phase(
    models: experience.Models,
    prompts: Optional[PromptFn],
    params: dict,
    reward_params,
    prompt_key: jax.Array,
    sample_key: jax.Array,
    batch_prompts,
    cfg: TokenPPOConfig,
    devices: Devices,
) -> tuple[Sampled, jax.Array, dict]:
    """DAPO's dynamic sampling (Yu et al. 2025): the prompts and sample phases
    (:func:`~purejaxppo.lm.ppo.token_phases.prompt_phase`,
    :func:`~purejaxppo.lm.ppo.token_phases.sample_phase`) drawn again until the batch holds
    ``B / G`` groups whose scores are not all equal, at most ``max_extra_draws`` draws after the
    first, in a ``while_loop`` of fixed shapes (each draw is a whole batch).

    The batch is the first groups with a signal in draw order (a group's scores as its
    advantage reads them, no KL: :func:`~purejaxppo.lm.ppo.sequence_rewards.shaped_score`,
    :func:`~purejaxppo.lm.ppo.group_advantages.informative_groups`). Short of them after the last
    draw, the rest is the first draw's last flat groups, in order (the slots no later group
    took), outside ``keep``: no weight in the loss (:func:`~purejaxppo.lm.ppo.experience.finish`).
    The choice is made on every device's rows (gathered), the same on each.

    Args:
      models, params, reward_params, cfg, devices: as the sample phase takes them.
      prompts: the prompts function; the draws after the first take theirs from it.
      prompt_key, sample_key: the iteration's; draw 0 uses them as the prompts and sample
        phases do, draw ``k >= 1`` :func:`extra_draw_keys`.
      batch_prompts: the first draw's prompts, as the prompts phase takes them (None: drawn).
    Returns:
      ``(sampled, keep, metrics)``: this device's
      :class:`~purejaxppo.lm.ppo.token_phases.Sampled` rows of the batch, ``keep`` ``[B]`` bool
      (every device's rows: those trained on), and float32 scalars: ``groups_kept`` (the share
      of the batch's groups with a signal), ``extra_draws`` (draws after the first),
      ``groups_dropped`` (flat groups drawn, over every draw) and ``first_draw_score`` (the first
      draw's mean score: the policy's, before any choice).
    Raises:
      ConfigError: without a prompts function (the draws after the first need one).
    """
    if prompts is None:
        raise ConfigError(
            "dynamic_sampling draws more prompts in place of dropped groups: make_token_ppo(..., prompts=fn)"
        )
    g, n = cfg.group_size, cfg.batch_size // cfg.group_size

    def draw(pkey, skey, given=None):  # every device's rows of one draw, as [n, G, ...] groups
        prompt, valid, rows = ph.prompt_phase(prompts, pkey, given, cfg, models.policy)
        s = ph.sample_phase(models, params, reward_params, skey, prompt, valid, cfg, devices, rows)
        s = device_rows.gather(s, devices.axis_name)
        stop = stopped(s.response, s.mask, cfg.stop_ids)
        signal = informative_groups(shaped_score(s.scores.astype(jnp.float32), stop, s.mask, cfg), g)
        return jax.tree.map(lambda x: x.reshape((n, g) + x.shape[1:]), s), signal

    first, signal = draw(prompt_key, sample_key, batch_prompts)
    order = jnp.argsort((~signal).astype(jnp.int32), stable=True)  # signal first, then the flat, each in order
    carry = (jnp.int32(1), jnp.sum(signal, dtype=jnp.int32), jnp.sum(~signal, dtype=jnp.int32))
    carry = (*carry, jax.tree.map(lambda x: x[order], first))

    def more(c):
        draws, filled = c[:2]
        return (filled < n) & (draws <= cfg.max_extra_draws)

    def one_more(c):
        draws, filled, dropped, buffer = c
        s, signal = draw(*extra_draw_keys(sample_key, draws))
        buffer, filled = fill_groups(buffer, filled, s, signal)
        return draws + 1, filled, dropped + jnp.sum(~signal, dtype=jnp.int32), buffer

    if cfg.max_extra_draws:
        carry = jax.lax.while_loop(more, one_more, carry)
    draws, filled, dropped, buffer = carry
    rows = jax.tree.map(lambda x: x.reshape((n * g,) + x.shape[2:]), buffer)
    keep = jnp.repeat(jnp.arange(n) < filled, g)
    metrics = dict(
        groups_kept=filled.astype(jnp.float32) / n,
        extra_draws=(draws - 1).astype(jnp.float32),
        groups_dropped=dropped.astype(jnp.float32),
        first_draw_score=jnp.mean(first.scores.astype(jnp.float32)),
    )
    return device_rows.mine(rows, devices.axis_name, devices.num_devices), keep, metrics
