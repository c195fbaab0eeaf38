"""NAVIX grid worlds (``navix:Navix-Empty-5x5-v0``, ...): MiniGrid in JAX.

A NAVIX ``Timestep`` carries ``step_type``: 0 transition, 1 truncation (``t >=
max_steps``), 2 termination. NAVIX's own ``step`` resets LAZILY (the step AFTER an end
returns the reset state, ignoring the action), which does not fit our contract; we call
its ``_step`` (one transition, no reset) and reset ourselves, keeping the pre-reset
observation. ``max_episode_steps`` is NAVIX's ``max_steps`` (its default: 100).
"""

from __future__ import annotations

from typing import Callable, Optional

import jax

from purejaxppo.envs.core import EnvSpec, VecEnv, as_float, auto_reset_vec_env, check_name, discrete_action_fields


def env_names() -> list[str]:
    import navix

    return sorted(navix.registry())


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    import navix

    check_name(name, env_names(), "navix")
    if max_episode_steps is not None:
        env_kwargs["max_steps"] = int(max_episode_steps)
    env = navix.make(name, **env_kwargs)
    obs0 = jax.eval_shape(lambda k: env.reset(k).observation, jax.random.PRNGKey(0))
    spec = EnvSpec(
        name=f"navix:{name}",
        obs_shape=tuple(obs0.shape),
        max_episode_steps=int(env.max_steps),
        **discrete_action_fields(len(env.action_set)),
    )

    def reset1(key):
        ts = env.reset(key)
        return as_float(ts.observation), ts

    def step1(key, ts, action):
        ts = env._step(ts, action)
        return as_float(ts.observation), ts, ts.reward, ts.step_type == 2, ts.step_type == 1

    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)
