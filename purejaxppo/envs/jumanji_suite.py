"""Jumanji environments (``jumanji:Snake-v1``, ...).

Jumanji steps return a dm_env-style ``TimeStep``: ``step_type`` LAST marks an episode
end and ``discount`` says which kind: ``0`` a true terminal state (``terminated``),
otherwise the time limit (``truncated``). Jumanji does not reset by itself (we do not
use its ``AutoResetWrapper``; :func:`~purejaxppo.envs.core.auto_reset_vec_env` keeps the
pre-reset observation).

Observations: a named tuple with an ``action_mask`` field becomes
:class:`~purejaxppo.envs.observation.MaskedObs` (the mask drives the masked categorical);
the other fields are the observation, one array, or a dict of them (a structured
observation, flattened by the default network). ``max_episode_steps`` is passed as the
env's ``time_limit`` argument.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.envs.observation import MaskedObs
from purejaxppo.envs.core import (
    EnvSpec,
    VecEnv,
    as_float,
    auto_reset_vec_env,
    box_action_fields,
    check_name,
    discrete_action_fields,
    spec_fields_of_obs,
)


def env_names() -> list[str]:
    import jumanji

    return sorted(jumanji.registered_environments())


def observation(obs):
    """A Jumanji observation as ours: ``MaskedObs`` when it carries ``action_mask``."""
    if not hasattr(obs, "_fields"):
        return as_float(obs)
    rest = {f: getattr(obs, f) for f in obs._fields if f != "action_mask"}
    inner = as_float(next(iter(rest.values())) if len(rest) == 1 else rest)
    return MaskedObs(inner, jnp.asarray(obs.action_mask, bool)) if "action_mask" in obs._fields else inner


def _action_fields(spec, name: str) -> dict:
    from jumanji import specs

    if isinstance(spec, specs.DiscreteArray):
        return discrete_action_fields(int(spec.num_values))
    if isinstance(spec, specs.MultiDiscreteArray):
        nvec = tuple(int(n) for n in np.asarray(spec.num_values).reshape(-1))
        return dict(
            discrete=True,
            num_actions=sum(nvec),
            action_shape=(len(nvec),),
            action_low=None,
            action_high=None,
            action_nvec=nvec,
        )
    if isinstance(spec, specs.BoundedArray) and np.issubdtype(spec.dtype, np.floating):
        return box_action_fields(spec.shape, spec.minimum, spec.maximum)
    raise ConfigError(
        f"jumanji env {name!r} has action spec {type(spec).__name__}; purejaxppo supports "
        "DiscreteArray, MultiDiscreteArray and float BoundedArray actions"
    )


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    import jumanji
    from jumanji.types import StepType

    check_name(name, env_names(), "jumanji")
    if max_episode_steps is not None:
        env_kwargs.setdefault("time_limit", int(max_episode_steps))
    try:
        env = jumanji.make(name, **env_kwargs)
    except TypeError as e:
        raise ConfigError(
            f"jumanji env {name!r} does not take these arguments ({e}); drop max_episode_steps for it"
        ) from None
    act = _action_fields(env.action_spec, name)
    obs0 = jax.eval_shape(lambda k: observation(env.reset(k)[1].observation), jax.random.PRNGKey(0))
    fields = spec_fields_of_obs(obs0)
    if fields["action_mask"] and (act.get("action_nvec") or obs0.action_mask.shape != (act["num_actions"],)):
        raise ConfigError(
            f"jumanji env {name!r} has an action mask of shape {obs0.action_mask.shape}; the masked "
            f"categorical needs one flat mask of {act['num_actions']} actions"
        )
    limit = getattr(env, "time_limit", None)
    spec = EnvSpec(name=f"jumanji:{name}", max_episode_steps=None if limit is None else int(limit), **act, **fields)

    def reset1(key):
        state, ts = env.reset(key)
        return observation(ts.observation), state

    def step1(key, state, action):
        if not spec.discrete:
            action = jnp.clip(action, spec.action_low, spec.action_high)
        state, ts = env.step(state, action)
        last = ts.step_type == StepType.LAST
        term = jnp.logical_and(last, ts.discount == 0)
        return observation(ts.observation), state, ts.reward, term, jnp.logical_and(last, ts.discount != 0)

    return auto_reset_vec_env(spec, num_envs, reset1, step1, env_keys, reset_ratio)
