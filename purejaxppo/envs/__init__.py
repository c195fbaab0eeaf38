"""Environments: every suite mapped onto ONE VecEnv contract (:mod:`.core`).

``make_vec_env("CartPole-v1", ...)`` (gymnax) or ``make_vec_env("SUITE:NAME", ...)``
for the optional suites in :data:`.registry.SUITES` (Brax, MuJoCo Playground, Jumanji,
Craftax, NAVIX, XLand-MiniGrid, pgx), one adapter module each.
"""

from purejaxppo.envs.core import (
    EnvSpec,
    VecEnv,
    as_float,
    auto_reset_vec_env,
    box_action_fields,
    discrete_action_fields,
    episode_statistics,
    keep_observation,
)
from purejaxppo.envs.gymnax_suite import make_gymnax, make_gymnax_vec_env, registered_envs
from purejaxppo.envs.registry import SUITES, env_names, installed, make_vec_env, pip_command, split_name, suite_options

__all__ = [
    "EnvSpec",
    "VecEnv",
    "SUITES",
    "as_float",
    "auto_reset_vec_env",
    "box_action_fields",
    "discrete_action_fields",
    "env_names",
    "episode_statistics",
    "installed",
    "keep_observation",
    "make_gymnax",
    "make_gymnax_vec_env",
    "make_vec_env",
    "pip_command",
    "registered_envs",
    "split_name",
    "suite_options",
]
