"""Running statistics as explicit state, and the normalisation wrappers built on them.

``RunningStats`` is a pytree (count, mean, var); :func:`update_stats` merges a batch
with the parallel (Chan et al.) form of Welford's algorithm, so statistics of a stream
of batches equal those of the concatenated stream. Wrappers keep their statistics in
the env state: they are part of the runner state, so they survive ``vmap`` (one set per
seed) and checkpointing, and the observation an action was chosen from is exactly the
normalised observation stored for the update.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .envs import VecEnv


class RunningStats(NamedTuple):
    count: jax.Array  # scalar float: number of samples merged so far
    mean: jax.Array  # [*shape]
    var: jax.Array  # [*shape] population variance (1 before any data)


def init_stats(shape) -> RunningStats:
    return RunningStats(jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32))


def update_stats(stats: RunningStats, batch: jax.Array) -> RunningStats:
    """Merge ``batch [N, *shape]`` into ``stats`` (exact for any split of the stream)."""
    n = jnp.asarray(batch.shape[0], jnp.float32)
    b_mean = jnp.mean(batch, axis=0)
    b_var = jnp.var(batch, axis=0)
    total = stats.count + n
    delta = b_mean - stats.mean
    mean = stats.mean + delta * (n / total)
    # with count == 0 the old (placeholder) variance gets weight 0: the first batch is exact
    m2 = stats.var * stats.count + b_var * n + jnp.square(delta) * (stats.count * n / total)
    return RunningStats(total, mean, m2 / total)


def apply_stats(stats: RunningStats, x: jax.Array, clip: float = 10.0, eps: float = 1e-8) -> jax.Array:
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)``."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + eps), -clip, clip)


# --- wrappers ------------------------------------------------------------------------
class ObsNormState(NamedTuple):
    env_state: Any
    obs_stats: RunningStats


def normalize_observation(venv: VecEnv, frozen: bool = False, clip: float = 10.0) -> VecEnv:
    """Normalise observations with running mean/var over all envs' observations.

    Each step merges the batch of new observations ``[E, ...]`` (post-reset, as the
    policy sees them), then normalises both ``obs`` and ``info["final_observation"]``
    with the SAME updated statistics. ``frozen=True`` keeps the statistics as they are
    (evaluation, or fine-tuning with fixed statistics).
    """
    shape = venv.spec.obs_shape

    def reset(key):
        obs, state = venv.reset(key)
        stats = init_stats(shape) if frozen else update_stats(init_stats(shape), obs)
        return apply_stats(stats, obs, clip), ObsNormState(state, stats)

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        stats = state.obs_stats if frozen else update_stats(state.obs_stats, obs)
        info = {**info, "final_observation": apply_stats(stats, info["final_observation"], clip)}
        return apply_stats(stats, obs, clip), ObsNormState(env_state, stats), reward, term, trunc, info

    return venv._replace(reset=reset, step=step)


class RewardScaleState(NamedTuple):
    env_state: Any
    discounted_return: jax.Array  # [E] running discounted return, reset at episode ends
    return_stats: RunningStats  # scalar statistics of the discounted return


def scale_reward(venv: VecEnv, gamma: float, frozen: bool = False, clip: float = 10.0, eps: float = 1e-8) -> VecEnv:
    """Divide rewards by the running std of the discounted return (no mean shift), as
    used for MuJoCo-style tasks. The return is reset per env where an episode ended.
    ``gamma`` is a Python float fixed at construction (the base config's discount); populations
    that vary gamma are refused when reward scaling is on (``config.check_population_gammas``)."""

    def reset(key):
        obs, state = venv.reset(key)
        e = venv.num_envs
        return obs, RewardScaleState(state, jnp.zeros((e,), jnp.float32), init_stats(()))

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        ret = state.discounted_return * gamma + reward
        stats = state.return_stats if frozen else update_stats(state.return_stats, ret)
        scaled = jnp.clip(reward / jnp.sqrt(stats.var + eps), -clip, clip)
        done = jnp.logical_or(term, trunc)
        new_state = RewardScaleState(env_state, jnp.where(done, 0.0, ret), stats)
        return obs, new_state, scaled, term, trunc, info

    return venv._replace(reset=reset, step=step)
