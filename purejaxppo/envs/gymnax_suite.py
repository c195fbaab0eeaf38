"""gymnax 1.x environments (the unprefixed names: ``CartPole-v1``, ``Breakout-MinAtar``, ...).

gymnax 1.x already auto-resets and keeps ``terminated`` and ``truncated`` apart; we
only vectorise it, cast observations to float32 and clip continuous actions to the
bounds (the policy's UNclipped sample is what PPO stores and scores).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
import types
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.envs.core import EnvSpec, VecEnv, box_action_fields, default_env_keys


# gymnax's package import loads every env module, and a few of them import plotting libraries
# for their render functions only (pong: seaborn -> scipy, pandas; catch, rooms: pyplot): about
# 3 of the CLI's seconds before any work. While gymnax imports, those names are bound to
# placeholder modules that import the real one on first attribute use (rendering a GIF); the
# placeholders leave sys.modules right after, so any other `import seaborn` gets the real module.
_RENDER_ONLY_MODULES = ("matplotlib.pyplot", "seaborn")


class _ImportOnFirstUse(types.ModuleType):
    """Stands in for module ``__name__``; the first missing attribute imports the real module."""

    def __getattr__(self, attr):
        if attr.startswith("__"):  # import machinery probing (__path__, __file__, ...): not a use
            raise AttributeError(attr)
        real = importlib.import_module(self.__name__)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def import_gymnax():
    """``import gymnax``, with its render-only plotting imports deferred to first use."""
    if "gymnax" in sys.modules:
        return sys.modules["gymnax"]
    placed = [n for n in _RENDER_ONLY_MODULES if n not in sys.modules and importlib.util.find_spec(n) is not None]
    for name in placed:
        sys.modules[name] = _ImportOnFirstUse(name)
    try:
        import gymnax
    finally:
        for name in placed:
            if isinstance(sys.modules.get(name), _ImportOnFirstUse):
                del sys.modules[name]
    return gymnax


def registered_envs() -> list[str]:
    return list(import_gymnax().registered_envs)


def _is_gymnasium_id(name: str) -> Optional[bool]:
    """Whether Gymnasium registers ``name`` (None: Gymnasium is not installed)."""
    try:
        import gymnasium
    except ImportError:
        return None
    return name in gymnasium.envs.registry


def _bridge_howto(name: str) -> str:
    """Training a Gymnasium env that gymnax lacks: the gymnasium bridge, from Python (every env
    step is a host callback, one seed per process); the CLI trains JAX envs only."""
    return (
        f"train it from Python through the gymnasium bridge (slow: a host callback per env step, one seed per "
        f"process): make_ppo(config, venv=purejaxppo.envs.episode_statistics(purejaxppo.envs.gymnasium_bridge."
        f"gymnasium_vec_env({name!r}, num_envs=config.num_envs))); see the README's 'Gymnasium environments'"
    )


def make_gymnax(name: str, max_episode_steps: Optional[int] = None, **env_kwargs):
    """``(env, env_params, spec)`` for a registered gymnax name; clear errors otherwise."""
    gymnax = import_gymnax()
    from gymnax.environments import spaces

    names = registered_envs()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
        if not close:  # fall back on case-insensitive substring matches
            close = [n for n in names if name.lower().split("-")[0] in n.lower()][:5]
        gymnasium_id = _is_gymnasium_id(name)
        if gymnasium_id:
            raise ConfigError(f"environment {name!r} is a Gymnasium env, not a gymnax (JAX) one: {_bridge_howto(name)}")
        hint = f"did you mean {', '.join(close)}?" if close else f"valid names: {', '.join(names)}"
        if gymnasium_id is None and "-v" in name:  # cannot tell without gymnasium: say both
            hint += f"; if it is a Gymnasium env, {_bridge_howto(name)} (pip install \"purejaxppo[gymnasium]\")"
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


def make_gymnax_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable[[jax.Array], jax.Array]] = None,
    **env_kwargs,
) -> VecEnv:
    """Vectorise gymnax env ``name`` over ``num_envs`` copies (auto-reset, final obs).

    ``env_keys(key) -> [num_envs]`` keys derives the per-env keys of a reset/step
    (default: ``split(key, num_envs)``); data-parallel training passes one device's
    slice of the global split so that sharded rollouts equal the single-device one."""
    env, params, spec = make_gymnax(name, max_episode_steps, **env_kwargs)
    scalar_box = not spec.discrete and len(env.action_space(params).shape) == 0
    env_keys = env_keys if env_keys is not None else default_env_keys(num_envs)

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
