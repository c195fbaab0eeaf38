"""Generalised advantage estimation as a reverse ``lax.scan`` (docs/conventions.md, "GAE").

Time is the leading axis: every array is ``[T, ...]`` (``[T, B]`` for a rollout of
``B`` envs, ``[L, B]`` after :func:`jnp.swapaxes` for token sequences).

``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)``
``A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``,  ``done = terminated | truncated``

``next_values[t]`` is ``V`` of the TRUE next state of transition ``t``: the next
observation on an ordinary step, the pre-reset ``final_observation`` when the episode
was truncated, and (for the last step of the horizon) the last observation. A
terminated step multiplies it by 0, so its value there does not matter. The recursion
is cut at every episode end, and starts from ``A_T = 0`` because the bootstrap of the
horizon is already in ``next_values[T-1]``.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo.stages.shapes import check_bool, check_mask, same_shape


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma,
    gae_lambda,
    mask: Optional[jax.Array] = None,
    unroll: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """Advantages and return targets ``(A [T, ...], R = A + V [T, ...])``.

    Args:
      rewards, values, next_values: ``[T, ...]`` floats.
      terminated, truncated: ``[T, ...]`` bools (or integer 0/1; floats are refused). Termination wins if both set.
      gamma, gae_lambda: scalars (may be traced, e.g. in a hyperparameter population).
      mask: optional ``[T, ...]`` bool (or integer) validity mask (token PPO: response tokens only).
        Invalid steps get ``A = 0`` and pass the running advantage through untouched,
        so masked prompt/padding slots neither receive nor block credit. Their inputs
        are cleaned (``where``) before any arithmetic, so NaN there cannot leak.
      unroll: ``lax.scan`` unroll factor (speed only).

    Raises ``ValueError`` (while tracing) if any input's shape differs from ``rewards``'s,
    or ``terminated``/``truncated``/``mask`` is a float array.
    """
    shape = same_shape(
        "gae",
        "rewards",
        {
            "rewards": rewards,
            "values": values,
            "next_values": next_values,
            "terminated": terminated,
            "truncated": truncated,
        },
    )
    if len(shape) < 1:
        raise ValueError(f"gae: rewards has shape {shape}, expected [T, ...] with time leading")
    check_bool("gae", terminated, "terminated")
    check_bool("gae", truncated, "truncated")
    check_mask("gae", mask, shape)
    terminated = terminated.astype(bool)
    done = jnp.logical_or(terminated, truncated.astype(bool))
    if mask is not None:
        mask = mask.astype(bool)
        rewards = jnp.where(mask, rewards, 0.0)
        values = jnp.where(mask, values, 0.0)
        next_values = jnp.where(mask, next_values, 0.0)
    not_term = 1.0 - terminated.astype(values.dtype)
    not_done = 1.0 - done.astype(values.dtype)
    deltas = rewards + gamma * not_term * next_values - values

    def step(carry, x):
        if mask is None:
            delta, nd = x
            adv = delta + gamma * gae_lambda * nd * carry
            return adv, adv
        delta, nd, m = x
        adv = delta + gamma * gae_lambda * nd * carry
        return jnp.where(m, adv, carry), jnp.where(m, adv, 0.0)

    xs = (deltas, not_done) if mask is None else (deltas, not_done, mask)
    _, advantages = jax.lax.scan(step, jnp.zeros_like(values[0]), xs, reverse=True, unroll=unroll)
    returns = advantages + values
    if mask is not None:
        returns = jnp.where(mask, returns, 0.0)
    return advantages, returns
