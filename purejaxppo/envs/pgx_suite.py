"""pgx single-player games (``pgx:2048``), with the legal-action mask.

pgx states carry ``terminated`` and ``truncated`` and the ``legal_action_mask``; the
observation becomes :class:`~purejaxppo.envs.observation.MaskedObs` (``[4, 4, 31]`` for 2048:
an image for the CNN torso). pgx has no time limit of its own for 2048, so we count
steps: ``truncated = (pgx truncated | t >= max_episode_steps) & ~terminated`` (default
limit :data:`DEFAULT_LIMIT`). Rewards are the single player's. Two-player games need
self-play, which PPO here does not do, and are refused.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.envs.observation import MaskedObs
from purejaxppo.envs.core import EnvSpec, VecEnv, as_float, auto_reset_vec_env, check_name, discrete_action_fields

DEFAULT_LIMIT = 10_000


def env_names() -> list[str]:
    import pgx

    return sorted(pgx.available_envs())


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    import pgx

    check_name(name, env_names(), "pgx")
    env = pgx.make(name, **env_kwargs)
    if env.num_players != 1:
        raise ConfigError(
            f"pgx:{name} is a {env.num_players}-player game; purejaxppo trains single-agent envs (pgx:2048)"
        )
    limit = int(max_episode_steps or DEFAULT_LIMIT)
    spec = EnvSpec(
        name=f"pgx:{name}",
        obs_shape=tuple(env.observation_shape),
        max_episode_steps=limit,
        action_mask=True,
        **discrete_action_fields(env.num_actions),
    )

    def observe(state):
        return MaskedObs(as_float(state.observation), state.legal_action_mask)

    def reset1(key):
        state = env.init(key)
        return observe(state), (state, jnp.zeros((), jnp.int32))

    def step1(key, carry, action):
        state, t = carry
        state = env.step(state, action, key)
        t = t + 1
        term = state.terminated
        trunc = jnp.logical_and(jnp.logical_or(state.truncated, t >= limit), jnp.logical_not(term))
        return observe(state), (state, t), state.rewards[0], term, trunc

    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)
