"""Craftax (``craftax:Craftax-Classic-Symbolic-v1``, ``craftax:Craftax-Symbolic-v1``, and
the ``-Pixels-`` variants: image observations for the CNN torso).

Craftax reports ONE ``done`` (died, or the step counter reached
``params.max_timesteps``). We split it by that counter: ``truncated = done & timestep >=
max_timesteps``, ``terminated = done & ~truncated`` (dying on the very last step counts
as truncated: the two cannot be told apart from Craftax's outputs). The env is made with
``auto_reset=False``; our auto-reset keeps the pre-reset observation.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax.numpy as jnp

from purejaxppo.envs.core import EnvSpec, VecEnv, as_float, auto_reset_vec_env, check_name, discrete_action_fields

NAMES = ["Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1"]


def env_names() -> list[str]:
    return list(NAMES)


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    from craftax.craftax_env import make_craftax_env_from_name

    check_name(name, NAMES, "craftax")
    env = make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params
    if max_episode_steps is not None:
        params = params.replace(max_timesteps=int(max_episode_steps))
    if env_kwargs:
        params = params.replace(**env_kwargs)
    limit = int(params.max_timesteps)
    spec = EnvSpec(
        name=f"craftax:{name}",
        obs_shape=tuple(env.observation_space(params).shape),
        max_episode_steps=limit,
        **discrete_action_fields(env.action_space(params).n),
    )

    def reset1(key):
        obs, state = env.reset(key, params)
        return as_float(obs), state

    def step1(key, state, action):
        obs, state, reward, done, _ = env.step(key, state, action, params)
        trunc = jnp.logical_and(done, state.timestep >= limit)
        return as_float(obs), state, reward, jnp.logical_and(done, jnp.logical_not(trunc)), trunc

    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)
