"""JaxMARL multi-agent environments (``jaxmarl:MPE_simple_spread_v3``, ``jaxmarl:3m``), agents folded into rows.

One JaxMARL env with ``N`` agents becomes ``N`` consecutive ROWS of the VecEnv: row
``e*N + i`` is agent ``i`` of env ``e``, so the VecEnv's ``num_envs`` (and ``PPOConfig.num_envs``)
counts rows, ``envs x agents``, and must be a multiple of ``N``. PPO on the rows is IPPO with
parameter sharing: the one training step, unchanged. Agents must be homogeneous (the same
observation and action space); an env whose agents differ is refused, naming them.

What JaxMARL's own ``step`` does and this adapter does not:

* ``step`` resets inside itself when ``dones["__all__"]`` and returns the NEW episode's
  observation; the final one is lost. We call ``step_env`` (no reset) and reset ourselves
  (:func:`~purejaxppo.envs.core.auto_reset_vec_env`), keeping ``info["final_observation"]``.
* ``dones`` mixes time limits and true ends. MPE and SMAX test their time limit on the step
  counter BEFORE incrementing it (``done = step >= max_steps``), so an episode lasts
  ``max_steps + 1`` steps (MPE: 26, SMAX: 101), and the post-step counter is ``max_steps + 1``
  exactly at the limit. ``truncated = done & counter > max_steps & ~terminal``, where
  ``terminal`` is the env's ``is_terminal`` of the state with its counter set to 0 (SMAX: one
  team dead); an env without ``is_terminal`` ends only by time (MPE). ``EnvSpec.max_episode_steps``
  is the real length, and ``--max-episode-steps K`` asks for episodes of ``K`` steps
  (``max_steps = K - 1``).
* Action masks: ``get_avail_actions`` of the state the agent acts in (after the reset where
  an episode ended), as :class:`~purejaxppo.envs.observation.MaskedObs`; envs without it
  (MPE) have no mask (every action legal).

Options (``PPOConfig`` fields, passed by :func:`purejaxppo.envs.registry.suite_options`):
``agent_ids`` appends each agent's one-hot id to its observation; ``global_state`` wraps the
observation in :class:`~purejaxppo.envs.observation.CriticObs` with the state a centralised
critic sees (MAPPO): SMAX's ``world_state``, otherwise the concatenation of every agent's
observation, each with the agent's one-hot id appended. The final observation carries the
final global state, so a truncation bootstraps from it.

Rewards are per agent (row). SMAX names (``3m``, ``2s3z``, ...) are ``HeuristicEnemySMAX`` on
that scenario with JaxMARL's defaults (the ones its baselines use).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.envs.core import (
    EnvSpec,
    VecEnv,
    as_float,
    auto_reset_vec_env,
    box_action_fields,
    check_name,
    default_env_keys,
    discrete_action_fields,
)
from purejaxppo.envs.observation import CriticObs, MaskedObs


def _jaxmarl():
    """``import jaxmarl`` with the lines it prints on import kept off stdout (they would break a
    command's JSON output). At the file-descriptor level: a module it imports rebinds
    ``sys.stdout``, so ``contextlib.redirect_stdout`` does not hold them."""
    if "jaxmarl" not in sys.modules:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                import jaxmarl

                sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    import jaxmarl
    from jaxmarl.environments.smax import smax_env

    return jaxmarl, smax_env


def env_names() -> list[str]:
    jaxmarl, smax_env = _jaxmarl()
    return sorted(jaxmarl.registered_envs) + sorted(smax_env.MAP_NAME_TO_SCENARIO)


def _make(name: str, env_kwargs: dict):
    jaxmarl, smax_env = _jaxmarl()
    check_name(name, env_names(), "jaxmarl")
    if name in smax_env.MAP_NAME_TO_SCENARIO:
        return jaxmarl.make("HeuristicEnemySMAX", scenario=smax_env.map_name_to_scenario(name), **env_kwargs)
    try:
        return jaxmarl.make(name, **env_kwargs)
    except (ImportError, ValueError, TypeError) as e:
        raise ConfigError(f"jaxmarl:{name} cannot be built here ({e})") from None


def step_counter(state) -> jax.Array:
    """The env's step counter (``state.step``; a wrapping state's ``state.state.step``)."""
    while not hasattr(state, "step") and hasattr(state, "state"):
        state = state.state
    return state.step


def _with_counter(state, value):
    if hasattr(state, "step"):
        return state.replace(step=jnp.zeros_like(state.step) + value)
    return state.replace(state=_with_counter(state.state, value))


def _has_avail_actions(env, state) -> bool:
    try:
        jax.eval_shape(env.get_avail_actions, state)
        return True
    except NotImplementedError:
        return False


def _action_fields(env, name: str) -> dict:
    spaces = [env.action_space(a) for a in env.agents]
    kinds = {(type(s).__name__, getattr(s, "n", None), tuple(getattr(s, "shape", ()) or ())) for s in spaces}
    if len(kinds) > 1:
        raise ConfigError(
            f"jaxmarl:{name} has agents with different action spaces ({sorted(map(str, kinds))}); "
            "purejaxppo shares one policy over homogeneous agents (padding is not built)"
        )
    space = spaces[0]
    if hasattr(space, "n"):
        return discrete_action_fields(int(space.n))
    if hasattr(space, "low") and hasattr(space, "high"):
        return box_action_fields(tuple(space.shape), space.low, space.high)
    raise ConfigError(f"jaxmarl:{name} has action space {type(space).__name__}; purejaxppo supports Discrete and Box")


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable] = None,
    reset_ratio: int = 1,
    global_state: bool = False,
    agent_ids: bool = False,
    **env_kwargs,
) -> VecEnv:
    """``num_envs`` ROWS (``num_envs / N`` JaxMARL envs of ``N`` agents each); see the module docstring.

    ``env_keys(key) -> [num_envs]`` per-row keys: each env uses its first agent row's key, so
    a device split of whole envs equals the single-device rollout."""
    if max_episode_steps is not None:
        env_kwargs.setdefault("max_steps", int(max_episode_steps) - 1)
    env = _make(name, env_kwargs)
    agents = list(env.agents)
    n = len(agents)
    if num_envs % n:
        k = max(1, num_envs // n)
        raise ConfigError(
            f"num_envs={num_envs} must be a multiple of the {n} agents of jaxmarl:{name}: rows are envs x "
            f"agents (each device's share under --split envs too); pass "
            f"--num-envs {k * n} ({k} envs)"
        )
    if reset_ratio != 1 and (num_envs // n) % reset_ratio:
        raise ConfigError(f"reset_ratio={reset_ratio} must divide the {num_envs // n} envs of jaxmarl:{name}")
    limit = int(env.max_steps)
    shapes = {tuple(env.observation_space(a).shape) for a in agents}
    if len(shapes) > 1:
        raise ConfigError(
            f"jaxmarl:{name} has agents with different observation shapes {sorted(shapes)}; "
            "purejaxppo shares one policy over homogeneous agents (padding is not built)"
        )
    act = _action_fields(env, name)
    _, state0 = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    masked = _has_avail_actions(env, state0)
    terminal = getattr(env, "is_terminal", None)
    ids = jnp.eye(n, dtype=jnp.float32)

    def observe(obs_d, state):
        """``[N, ...]`` rows of one env's observation dict (plus mask / global state)."""
        rows = as_float(jnp.stack([obs_d[a] for a in agents]))
        if agent_ids:
            rows = jnp.concatenate([rows, ids], axis=-1)
        out = rows
        if masked:
            avail = env.get_avail_actions(state)
            out = MaskedObs(rows, jnp.stack([avail[a] for a in agents]).astype(bool))
        if global_state:
            if "world_state" in obs_d:
                g = jnp.broadcast_to(as_float(obs_d["world_state"]), (n,) + obs_d["world_state"].shape)
            else:
                plain = as_float(jnp.stack([obs_d[a] for a in agents]))
                g = jnp.broadcast_to(plain.reshape(-1), (n, plain.size))
            out = CriticObs(out, jnp.concatenate([g, ids], axis=-1))
        return out

    def reset1(key):
        obs_d, state = env.reset(key)
        return observe(obs_d, state), state

    def step1(key, state, action):
        if not act["discrete"]:
            action = jnp.clip(action, act["action_low"], act["action_high"])
        obs_d, new, reward, dones, _ = env.step_env(key, state, {a: action[i] for i, a in enumerate(agents)})
        done = dones["__all__"]
        true_end = terminal(_with_counter(new, 0)) if terminal is not None else jnp.zeros((), bool)
        trunc = done & (step_counter(new) > limit) & ~true_end
        return (observe(obs_d, new), new, jnp.stack([reward[a] for a in agents]), done & ~trunc, trunc)

    obs0 = jax.eval_shape(lambda k: reset1(k)[0], jax.random.PRNGKey(0))
    inner = obs0.obs if global_state else obs0
    inner = inner.obs if masked else inner
    if masked and (act["num_actions"] != (obs0.obs if global_state else obs0).action_mask.shape[-1]):
        raise ConfigError(f"jaxmarl:{name}'s action masks do not cover its {act['num_actions']} actions")
    spec = EnvSpec(
        name=f"jaxmarl:{name}",
        obs_shape=tuple(inner.shape[1:]),
        max_episode_steps=limit + 1,
        action_mask=masked,
        num_agents=n,
        global_state_shape=tuple(obs0.global_state.shape[1:]) if global_state else (),
        **act,
    )
    e = num_envs // n
    row_keys = env_keys if env_keys is not None else default_env_keys(num_envs)
    first_rows = lambda key: row_keys(key)[::n]
    inner_venv = auto_reset_vec_env(spec, e, reset1, step1, first_rows, reset_ratio)
    return fold_agents(inner_venv, n)


def fold_agents(venv: VecEnv, n: int) -> VecEnv:
    """A VecEnv over ``E`` envs whose observations are ``[E, N, ...]``, rewards ``[E, N]`` and
    episode flags ``[E]`` as one over ``E*N`` rows (row ``e*N + i``: agent ``i`` of env ``e``);
    actions ``[E*N, ...]`` are unfolded to ``[E, N, ...]``. Flags are repeated per agent."""
    rows = venv.num_envs * n
    fold = lambda tree: jax.tree.map(lambda x: x.reshape((rows,) + x.shape[2:]), tree)
    per_row = lambda flag: jnp.repeat(flag, n, axis=0)

    def reset(key):
        obs, state = venv.reset(key)
        return fold(obs), state

    def step(key, state, action):
        action = action.reshape((venv.num_envs, n) + action.shape[1:])
        obs, state, reward, term, trunc, info = venv.step(key, state, action)
        info = {**info, "final_observation": fold(info["final_observation"])}
        return fold(obs), state, reward.reshape(rows), per_row(term), per_row(trunc), info

    return VecEnv(venv.spec, rows, reset, step)
