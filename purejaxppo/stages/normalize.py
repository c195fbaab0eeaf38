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

from purejaxppo.envs import VecEnv
from purejaxppo.envs.observation import CriticObs, MaskedObs


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
    obs_stats: Any  # RunningStats, or a pytree of them shaped like a structured observation


def _normalised_part(obs):
    """The part of an observation that is normalised, and how to put it back: an action mask
    (``MaskedObs``) travels unchanged; a centralised critic's global state (``CriticObs``) is
    normalised with statistics of its own."""
    if isinstance(obs, CriticObs):
        inner, put_back = _normalised_part(obs.obs)
        return (inner, obs.global_state), lambda x: CriticObs(put_back(x[0]), x[1])
    if isinstance(obs, MaskedObs):
        return obs.obs, lambda x: obs._replace(obs=x)
    return obs, lambda x: x


def init_obs_stats(obs) -> Any:
    """Placeholder statistics for a batch of observations ``[E, ...]`` (array or pytree): one
    :class:`RunningStats` per leaf, shaped like one env's leaf."""
    return jax.tree.map(lambda x: init_stats(x.shape[1:]), _normalised_part(obs)[0])


def update_obs_stats(stats, obs, axis_name: Optional[str] = None) -> Any:
    """Merge a batch of observations ``[E, ...]`` into ``stats``, leaf by leaf."""
    return jax.tree.map(lambda x, st: update_stats(st, x, axis_name), _normalised_part(obs)[0], stats)


def apply_obs_stats(stats, obs, clip: float = 10.0) -> Any:
    """Normalise every leaf of ``obs`` with its statistics (:func:`apply_stats`); an action
    mask is kept as it is."""
    part, put_back = _normalised_part(obs)
    return put_back(jax.tree.map(lambda x, st: apply_stats(st, x, clip), part, stats))


def normalize_observation(
    venv: VecEnv, frozen: bool = False, clip: float = 10.0, axis_name: Optional[str] = None
) -> VecEnv:
    """Normalise observations with running mean/var over all envs' observations.

    Each step merges the batch of new observations ``[E, ...]`` (post-reset, as the
    policy sees them), then normalises both ``obs`` and ``info["final_observation"]``
    with the SAME updated statistics. ``frozen=True`` keeps the statistics as they are
    (evaluation, or fine-tuning with fixed statistics). ``axis_name``: the envs are split
    over that device axis and the statistics are merged over all of them.

    Structured observations (dicts, named tuples) get statistics per leaf; an action mask
    is not normalised (Jumanji's Snake: the grid and the raw step counter, up to the
    episode cap, each scaled by their own statistics).
    """

    def reset(key):
        obs, state = venv.reset(key)
        stats = init_obs_stats(obs)
        stats = stats if frozen else update_obs_stats(stats, obs, axis_name)
        return apply_obs_stats(stats, obs, clip), ObsNormState(state, stats)

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        stats = state.obs_stats if frozen else update_obs_stats(state.obs_stats, obs, axis_name)
        info = {**info, "final_observation": apply_obs_stats(stats, info["final_observation"], clip)}
        return apply_obs_stats(stats, obs, clip), ObsNormState(env_state, stats), reward, term, trunc, info

    return venv._replace(reset=reset, step=step)


# --- rewards: a stage of the step ---------------------------------------------------------
class RewardScaleState(NamedTuple):
    discounted_return: jax.Array  # [E] running discounted return, reset at episode ends
    return_stats: RunningStats  # scalar statistics of the discounted return


def init_reward_scale(num_envs: int) -> RewardScaleState:
    return RewardScaleState(jnp.zeros((num_envs,), jnp.float32), init_stats(()))


def scale_rewards(
    state: RewardScaleState,
    reward: jax.Array,
    done: jax.Array,
    gamma,
    frozen: bool = False,
    clip: float = 10.0,
    eps: float = 1e-8,
    axis_name: Optional[str] = None,
):
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
