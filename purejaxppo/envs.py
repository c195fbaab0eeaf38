"""gymnax 1.x environments, vectorised, and wrappers as pure state transformers.

A :class:`VecEnv` is two pure functions over a batch of ``E`` environments:

* ``reset(key) -> (obs [E, *obs_shape], state)``
* ``step(key, state, action [E, ...]) -> (obs, state, reward [E], terminated [E],
  truncated [E], info)``, with ``info["final_observation"]`` ``[E, *obs_shape]``:
  the pre-reset observation (equal to ``obs`` where the episode did not end).

gymnax 1.x already auto-resets and keeps ``terminated`` and ``truncated`` apart; we
only vectorise it, cast observations to float32 and clip continuous actions to the
bounds (the policy's UNclipped sample is what PPO stores and scores). Wrappers take a
VecEnv and return one; whatever statistics they keep live in the env state, so they
survive ``vmap`` and checkpointing.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError


class EnvSpec(NamedTuple):
    name: str
    obs_shape: tuple
    discrete: bool
    num_actions: int  # categorical: number of actions; Gaussian: action dimension
    action_shape: tuple  # () for discrete, (D,) for continuous
    action_low: Optional[np.ndarray]
    action_high: Optional[np.ndarray]
    max_episode_steps: Optional[int]


class VecEnv(NamedTuple):
    spec: EnvSpec
    num_envs: int
    reset: Callable[[jax.Array], tuple[jax.Array, Any]]
    step: Callable[[jax.Array, Any, jax.Array], tuple]


def registered_envs() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def box_action_fields(shape, low, high) -> dict:
    """EnvSpec fields of a continuous action space; a scalar Box becomes ``(1,)``."""
    shape = tuple(shape) if len(shape) else (1,)
    low = np.broadcast_to(np.asarray(low, np.float32), shape).copy()
    high = np.broadcast_to(np.asarray(high, np.float32), shape).copy()
    return dict(discrete=False, num_actions=int(np.prod(shape)), action_shape=shape, action_low=low, action_high=high)


def make_gymnax(name: str, max_episode_steps: Optional[int] = None, **env_kwargs):
    """``(env, env_params, spec)`` for a registered gymnax name; clear errors otherwise."""
    import gymnax
    from gymnax.environments import spaces

    names = registered_envs()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
        if not close:  # fall back on case-insensitive substring matches
            close = [n for n in names if name.lower().split("-")[0] in n.lower()][:5]
        hint = f"did you mean {', '.join(close)}?" if close else f"valid names: {', '.join(names)}"
        raise ConfigError(f"unknown environment {name!r}; {hint}")
    env, params = gymnax.make(name, **env_kwargs)
    if max_episode_steps is not None:
        params = params.replace(max_steps_in_episode=int(max_episode_steps))
    space = env.action_space(params)
    if isinstance(space, spaces.Discrete):
        spec_kw = dict(discrete=True, num_actions=int(space.n), action_shape=(), action_low=None, action_high=None)
    elif isinstance(space, spaces.Box):
        spec_kw = box_action_fields(space.shape, space.low, space.high)
    else:
        raise ConfigError(
            f"environment {name!r} has action space {type(space).__name__}; purejaxppo supports Discrete and Box"
        )
    obs_shape = tuple(env.observation_space(params).shape)
    spec = EnvSpec(name=name, obs_shape=obs_shape, max_episode_steps=int(params.max_steps_in_episode), **spec_kw)
    return env, params, spec


def make_vec_env(name: str, num_envs: int, max_episode_steps: Optional[int] = None,
                 env_keys: Optional[Callable[[jax.Array], jax.Array]] = None, **env_kwargs) -> VecEnv:
    """Vectorise gymnax env ``name`` over ``num_envs`` copies (auto-reset, final obs).

    ``env_keys(key) -> [num_envs]`` keys derives the per-env keys of a reset/step
    (default: ``split(key, num_envs)``); data-parallel training passes one device's
    slice of the global split so that sharded rollouts equal the single-device one."""
    env, params, spec = make_gymnax(name, max_episode_steps, **env_kwargs)
    scalar_box = not spec.discrete and len(env.action_space(params).shape) == 0
    env_keys = env_keys if env_keys is not None else (lambda key: jax.random.split(key, num_envs))

    def reset(key):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(env_keys(key), params)
        return obs.astype(jnp.float32), state

    def step(key, state, action):
        if not spec.discrete:
            action = jnp.clip(action, spec.action_low, spec.action_high)
            if scalar_box:
                action = action[..., 0]
        obs, state, reward, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            env_keys(key), state, action, params
        )
        info = {"final_observation": info["final_observation"].astype(jnp.float32)}
        return obs.astype(jnp.float32), state, reward.astype(jnp.float32), term, trunc, info

    return VecEnv(spec, num_envs, reset, step)


# --- wrappers ---------------------------------------------------------------------------
class EpisodeStatsState(NamedTuple):
    env_state: Any
    episode_return: jax.Array  # [E] running undiscounted return of the current episode
    episode_length: jax.Array  # [E]


def episode_statistics(venv: VecEnv) -> VecEnv:
    """Track per-env episode return/length; ``info["episode_return"]`` and
    ``info["episode_length"]`` hold the finished episode's totals where it ended
    (``info["episode_done"]``), 0 elsewhere. Uses the raw environment reward."""

    def reset(key):
        obs, state = venv.reset(key)
        zeros = jnp.zeros((venv.num_envs,), jnp.float32)
        return obs, EpisodeStatsState(state, zeros, jnp.zeros((venv.num_envs,), jnp.int32))

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        ret = state.episode_return + reward
        length = state.episode_length + 1
        done = jnp.logical_or(term, trunc)
        info = {
            **info,
            "episode_done": done,
            "episode_return": jnp.where(done, ret, 0.0),
            "episode_length": jnp.where(done, length, 0),
        }
        new_state = EpisodeStatsState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return obs, new_state, reward, term, trunc, info

    return venv._replace(reset=reset, step=step)


def keep_observation(venv: VecEnv, indices) -> VecEnv:
    """Partial observability: keep only the flat observation components ``indices``
    (``(0, 2)`` turns CartPole into position-only CartPole: velocities hidden)."""
    idx = np.asarray(indices, np.int32)
    size = int(np.prod(venv.spec.obs_shape))
    if idx.max() >= size:
        raise ConfigError(f"obs_keep={tuple(indices)} has an index >= the observation size {size} of {venv.spec.name}")
    select = lambda o: o.reshape(o.shape[:1] + (-1,))[:, idx]

    def reset(key):
        obs, state = venv.reset(key)
        return select(obs), state

    def step(key, state, action):
        obs, state, reward, term, trunc, info = venv.step(key, state, action)
        info = {**info, "final_observation": select(info["final_observation"])}
        return select(obs), state, reward, term, trunc, info

    return venv._replace(spec=venv.spec._replace(obs_shape=(len(idx),)), reset=reset, step=step)
