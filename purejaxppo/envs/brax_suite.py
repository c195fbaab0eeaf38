"""Brax environments (``brax:inverted_pendulum``, ``brax:ant``, ...), and any env with
Brax's ``reset(rng) -> State`` / ``step(State, action) -> State`` interface
(MuJoCo Playground reuses :func:`from_brax_env`).

Episode ends: Brax's ``EpisodeWrapper`` counts steps and sets ``done`` at the time
limit with ``info["truncation"] = 1`` (only where the state is not terminal itself), so
``truncated = truncation`` and ``terminated = done & ~truncation``. Brax's own
``AutoResetWrapper`` is NOT used: it overwrites the observation of the last step with
the reset one, losing the pre-reset observation the truncation bootstrap needs; our
:func:`~purejaxppo.envs.core.auto_reset_vec_env` keeps it. Actions are clipped to
Brax's ``[-1, 1]``.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from purejaxppo.envs.core import (
    EnvSpec,
    VecEnv,
    as_float,
    auto_reset_vec_env,
    box_action_fields,
    check_name,
    spec_fields_of_obs,
)

DEFAULT_EPISODE_LENGTH = 1000


def env_names() -> list[str]:
    from brax import envs

    return sorted(envs._envs)


def from_brax_env(
    env,
    name: str,
    num_envs: int,
    episode_length: int,
    env_keys: Optional[Callable] = None,
    action_repeat: int = 1,
    reset_ratio: int = 1,
) -> VecEnv:
    """Wrap a Brax-interface ``env`` (unwrapped) with Brax's ``EpisodeWrapper`` and our auto-reset."""
    from brax.envs.wrappers.training import EpisodeWrapper

    env = EpisodeWrapper(env, int(episode_length), int(action_repeat))
    obs0 = jax.eval_shape(lambda k: env.reset(k).obs, jax.random.PRNGKey(0))
    dim = int(env.action_size)

    def reset1(key):
        state = env.reset(key)
        return as_float(state.obs), state

    def step1(key, state, action):
        state = env.step(state, jnp.clip(action, -1.0, 1.0))
        trunc = state.info["truncation"].astype(bool)
        done = state.done.astype(bool)
        return as_float(state.obs), state, state.reward, jnp.logical_and(done, jnp.logical_not(trunc)), trunc

    spec = EnvSpec(
        name=name,
        max_episode_steps=int(episode_length),
        **box_action_fields((dim,), -1.0, 1.0),
        **spec_fields_of_obs(obs0),
    )
    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    from brax import envs

    check_name(name, env_names(), "brax")
    env = envs.get_environment(name, **env_kwargs)
    return from_brax_env(
        env, f"brax:{name}", num_envs, max_episode_steps or DEFAULT_EPISODE_LENGTH, env_keys, reset_ratio=reset_ratio
    )
