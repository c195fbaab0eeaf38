"""XLand-MiniGrid (``xminigrid:MiniGrid-Empty-6x6``, ``xminigrid:XLand-MiniGrid-R1-9x9``, ...).

Its ``TimeStep`` is dm_env-style: ``step_type`` LAST ends an episode and ``discount``
tells which end: ``0`` terminated (goal reached), ``1`` truncated (``params.max_steps``,
which ``max_episode_steps`` replaces). It does not reset by itself. XLand benchmarks
need rulesets loaded from disk and are not wired here (``env_kwargs`` reach
``params.replace``).
"""

from __future__ import annotations

from typing import Callable, Optional


from purejaxppo.envs.core import EnvSpec, VecEnv, as_float, auto_reset_vec_env, check_name, discrete_action_fields


def env_names() -> list[str]:
    import xminigrid

    return sorted(xminigrid.registered_environments())


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    import xminigrid
    from xminigrid.types import StepType

    check_name(name, env_names(), "xminigrid")
    env, params = xminigrid.make(name)
    if max_episode_steps is not None:
        env_kwargs["max_steps"] = int(max_episode_steps)
    if env_kwargs:
        params = params.replace(**env_kwargs)
    spec = EnvSpec(
        name=f"xminigrid:{name}",
        obs_shape=tuple(env.observation_shape(params)),
        max_episode_steps=int(params.max_steps),
        **discrete_action_fields(env.num_actions(params)),
    )

    def reset1(key):
        ts = env.reset(params, key)
        return as_float(ts.observation), ts

    def step1(key, ts, action):
        ts = env.step(params, ts, action)
        last = ts.step_type == StepType.LAST
        return (as_float(ts.observation), ts, ts.reward, last & (ts.discount == 0), last & (ts.discount != 0))

    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)
