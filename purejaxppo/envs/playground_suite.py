"""MuJoCo Playground (``playground:CartpoleBalance``, the DM Control suite and the rest
of its registry), on MJX: ``impl="jax"``, pure JAX, so it runs under ``vmap``/``jit``
on any JAX backend (Playground's default, MuJoCo Warp, needs a GPU).

Playground envs have Brax's interface; the time limit is the task config's
``episode_length`` (or ``max_episode_steps``) counted by Brax's ``EpisodeWrapper``
with the config's ``action_repeat``, exactly as Playground's own training wrapper
does, and episode ends are classified as for Brax (:mod:`.brax_suite`).
"""

from __future__ import annotations

from typing import Callable, Optional

from purejaxppo.envs.brax_suite import from_brax_env
from purejaxppo.envs.core import VecEnv, check_name


def env_names() -> list[str]:
    from mujoco_playground import registry

    return sorted(registry.ALL_ENVS)


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **config_overrides,
) -> VecEnv:
    from mujoco_playground import registry

    check_name(name, env_names(), "playground")
    config = registry.get_default_config(name)
    overrides = {"impl": "jax", **config_overrides} if "impl" in config else dict(config_overrides)
    env = registry.load(name, config_overrides=overrides)
    length = max_episode_steps or int(config.episode_length)
    return from_brax_env(
        env,
        f"playground:{name}",
        num_envs,
        length,
        env_keys,
        action_repeat=int(config.get("action_repeat", 1)),
        reset_ratio=reset_ratio,
    )
