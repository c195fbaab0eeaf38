"""Running statistics as explicit state, observation normalisation and reward scaling.

``RunningStats`` is a pytree (count, mean, var); :func:`update_stats` merges a batch
with the parallel (Chan et al.) form of Welford's algorithm, so statistics of a stream
of batches equal those of the concatenated stream. With ``axis_name`` (inside
``shard_map``, each device holding an equal share of the batch) the merged batch is the
GLOBAL one: the statistics stay identical on every device and equal one device's.

* Observation normalisation is an env wrapper (:func:`normalize_observation`): the
  policy must act on the normalised observation, and the statistics live in the env
  state so they survive ``vmap``, sharding and checkpoints.
* Reward scaling is a stage of the step (:func:`scale_rewards`), applied to a rollout's
  rewards ``[H, E]`` after it is collected, with the TRACED discount: the policy never
  sees rewards, so scaling after the rollout gives the same numbers as scaling inside
  it, and a population that sweeps ``gamma`` scales each member with its own.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from .config import ConfigError
from .envs import VecEnv


class RunningStats(NamedTuple):
    count: jax.Array  # scalar float: number of samples merged so far
    mean: jax.Array  # [*shape]
    var: jax.Array  # [*shape] population variance (1 before any data)


def init_stats(shape) -> RunningStats:
    return RunningStats(jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32))


def update_stats(stats: RunningStats, batch: jax.Array, axis_name: Optional[str] = None) -> RunningStats:
    """Merge ``batch [N, *shape]`` into ``stats`` (exact for any split of the stream).

    With ``axis_name``, ``batch`` is this device's equal share of a global batch and the
    global batch is merged (moments combined with ``pmean``)."""
    n = jnp.asarray(batch.shape[0], jnp.float32)
    b_mean = jnp.mean(batch, axis=0)
    b_var = jnp.var(batch, axis=0)
    if axis_name is not None:  # equal shares: the global mean/var are means over devices
        local_mean = b_mean
        b_mean = jax.lax.pmean(local_mean, axis_name)
        b_var = jax.lax.pmean(b_var + jnp.square(local_mean - b_mean), axis_name)
        n = jax.lax.psum(n, axis_name)
    total = stats.count + n
    delta = b_mean - stats.mean
    mean = stats.mean + delta * (n / total)
    # with count == 0 the old (placeholder) variance gets weight 0: the first batch is exact
    m2 = stats.var * stats.count + b_var * n + jnp.square(delta) * (stats.count * n / total)
    return RunningStats(total, mean, m2 / total)


def apply_stats(stats: RunningStats, x: jax.Array, clip: float = 10.0, eps: float = 1e-8) -> jax.Array:
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)``."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + eps), -clip, clip)


# --- observations: an env wrapper ----------------------------------------------------------
class ObsNormState(NamedTuple):
    env_state: Any
    obs_stats: RunningStats


def normalize_observation(venv: VecEnv, frozen: bool = False, clip: float = 10.0,
                          axis_name: Optional[str] = None) -> VecEnv:
    """Normalise observations with running mean/var over all envs' observations.

    Each step merges the batch of new observations ``[E, ...]`` (post-reset, as the
    policy sees them), then normalises both ``obs`` and ``info["final_observation"]``
    with the SAME updated statistics. ``frozen=True`` keeps the statistics as they are
    (evaluation, or fine-tuning with fixed statistics). ``axis_name``: the envs are split
    over that device axis and the statistics are merged over all of them.
    """
    if venv.spec.obs_structure is not None or venv.spec.action_mask:
        raise ConfigError(f"normalize_obs works on plain array observations; {venv.spec.name} observes a "
                          "structure or carries an action mask; drop --normalize-obs")
    shape = venv.spec.obs_shape

    def reset(key):
        obs, state = venv.reset(key)
        stats = init_stats(shape) if frozen else update_stats(init_stats(shape), obs, axis_name)
        return apply_stats(stats, obs, clip), ObsNormState(state, stats)

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        stats = state.obs_stats if frozen else update_stats(state.obs_stats, obs, axis_name)
        info = {**info, "final_observation": apply_stats(stats, info["final_observation"], clip)}
        return apply_stats(stats, obs, clip), ObsNormState(env_state, stats), reward, term, trunc, info

    return venv._replace(reset=reset, step=step)


# --- rewards: a stage of the step ---------------------------------------------------------
class RewardScaleState(NamedTuple):
    discounted_return: jax.Array  # [E] running discounted return, reset at episode ends
    return_stats: RunningStats  # scalar statistics of the discounted return


def init_reward_scale(num_envs: int) -> RewardScaleState:
    return RewardScaleState(jnp.zeros((num_envs,), jnp.float32), init_stats(()))


def scale_rewards(state: RewardScaleState, reward: jax.Array, done: jax.Array, gamma, frozen: bool = False,
                  clip: float = 10.0, eps: float = 1e-8, axis_name: Optional[str] = None):
    """Divide rewards ``[H, E]`` by the running std of the discounted return (no mean shift).

    Step by step (a ``lax.scan`` over ``H``): ``G = gamma * G + r``; merge ``G [E]`` into
    the statistics; ``r / sqrt(var + eps)`` clipped to ``±clip``; ``G = 0`` where
    ``done [H, E]`` (terminated or truncated). ``gamma`` may be traced. Returns
    ``(new state, scaled rewards [H, E])``."""

    def one(s, x):
        r, d = x
        ret = s.discounted_return * gamma + r
        stats = s.return_stats if frozen else update_stats(s.return_stats, ret, axis_name)
        scaled = jnp.clip(r / jnp.sqrt(stats.var + eps), -clip, clip)
        return RewardScaleState(jnp.where(d, 0.0, ret), stats), scaled

    return jax.lax.scan(one, state, (reward, done))
