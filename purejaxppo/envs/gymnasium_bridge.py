"""Gymnasium environments through the same training code: the SLOW path.

:func:`gymnasium_vec_env` wraps a Gymnasium vector env (e.g. ``LunarLander-v3``) as a
:class:`~purejaxppo.envs.VecEnv`, so that ::

    venv = envs.episode_statistics(gymnasium_vec_env("LunarLander-v3", num_envs=4))
    ppo = make_ppo(config, venv=venv)
    runner_state, metrics = jax.jit(ppo.train)(jax.random.PRNGKey(0))

trains it unchanged. Every env step is a host callback (``jax.experimental.io_callback``)
out of the compiled step into Python, which steps the Gymnasium env and returns
``obs, reward, terminated, truncated`` and the final observation exactly like gymnax 1.x:
the vector env runs with ``autoreset_mode=SAME_STEP``, so where an episode ends the
returned ``obs`` is already the reset observation and ``info["final_observation"]`` holds
the true last observation (used for the truncation bootstrap).

What differs from gymnax environments, and why:

* **Speed.** Each step leaves the compiled program, crosses into Python and runs the
  env on the CPU one sub-env at a time; expect the env's own Python speed, not JAX's
  (see ``benchmarks/gymnasium_vs_sb3.py`` for measured figures).
* **State lives on the host.** The JAX-side env state is only a step counter ``[E]``;
  the real state is the Python env object. A stale state (stepping an older runner
  state again, e.g. re-running ``ppo.step`` on the same input) raises an error instead of
  silently continuing from the newer host state.
* **No vmap.** One host env cannot be E x S envs: ``jax.vmap`` over seeds or configs of
  a train that uses this env raises a :class:`ValueError`. Run seeds one after another
  (or in separate processes). ``shard_map``/data-parallel is not supported either.
* **Reproducibility** rests on seeding the Gymnasium env: ``reset(key)`` draws an int
  seed from ``key`` and calls ``env.reset(seed=seed)`` (sub-env ``i`` gets ``seed+i``);
  after that the env's own RNG drives it, the step ``key`` is not used. The same key then
  gives the same run, as long as the env itself is deterministic given its seed.

Supported spaces: ``Box`` observations (any shape; cast to float32) and ``Discrete`` or
``Box`` actions. Anything else raises a :class:`~purejaxppo.config.ConfigError` naming
the space and a fix (e.g. ``gymnasium.wrappers.FlattenObservation`` for Dict
observations).
"""

from __future__ import annotations

from typing import Any, Callable, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from purejaxppo.config import ConfigError
from purejaxppo.envs import EnvSpec, VecEnv, box_action_fields


def _spaces_spec(name: str, obs_space, act_space, max_episode_steps) -> EnvSpec:
    from gymnasium import spaces

    if not isinstance(obs_space, spaces.Box) or not np.issubdtype(obs_space.dtype, np.number):
        raise ConfigError(
            f"gymnasium env {name!r} has observation space {obs_space}; the bridge supports Box observations "
            "only; wrap the env, e.g. gymnasium.wrappers.FlattenObservation (Dict/Tuple/Discrete observations)"
        )
    if isinstance(act_space, spaces.Discrete):
        kw = dict(discrete=True, num_actions=int(act_space.n), action_shape=(), action_low=None, action_high=None)
    elif isinstance(act_space, spaces.Box) and len(act_space.shape) <= 1:
        kw = box_action_fields(act_space.shape, act_space.low, act_space.high)
    else:
        raise ConfigError(
            f"gymnasium env {name!r} has action space {act_space}; the bridge supports Discrete and 1-D Box actions; "
            "wrap the env (e.g. gymnasium.wrappers.FlattenAction or a custom ActionWrapper) to one of those"
        )
    return EnvSpec(name=name, obs_shape=tuple(obs_space.shape), max_episode_steps=max_episode_steps, **kw)


class _Host:
    """The Python side: the Gymnasium vector env and the step counter that guards it."""

    def __init__(self, vec_env, spec: EnvSpec, act_space):
        self.env, self.spec = vec_env, spec
        self.n = vec_env.num_envs
        self.t = None  # host step count since the last reset; None before the first reset
        self.act_start = int(getattr(act_space, "start", 0)) if spec.discrete else 0
        self.scalar_box = not spec.discrete and len(act_space.shape) == 0

    def _obs(self, obs):
        return np.asarray(obs, np.float32).reshape((self.n,) + self.spec.obs_shape)

    def reset(self, seed):
        obs, _ = self.env.reset(seed=int(seed))
        self.t = 0
        return self._obs(obs), np.zeros((self.n,), np.int32)

    def step(self, state, action):
        got = int(np.asarray(state).reshape(-1)[0])
        if self.t is None or got != self.t:
            raise RuntimeError(
                f"gymnasium bridge: step called with env state from host step {got}, but the host env is at step "
                f"{self.t}. The env lives on the host and cannot be rewound; step each runner state once, in order "
                "(reset with a key to start again)"
            )
        action = np.asarray(action)
        if self.spec.discrete:
            action = action.astype(np.int64) + self.act_start
        elif self.scalar_box:
            action = action[..., 0]
        obs, reward, term, trunc, info = self.env.step(action)
        obs = self._obs(obs)
        final = obs.copy()
        if "_final_obs" in info:  # SAME_STEP autoreset: obs is already the reset obs there
            for i in np.flatnonzero(info["_final_obs"]):
                final[i] = np.asarray(info["final_obs"][i], np.float32).reshape(self.spec.obs_shape)
        self.t += 1
        return (
            obs,
            np.full((self.n,), self.t, np.int32),
            np.asarray(reward, np.float32),
            np.asarray(term, bool),
            np.asarray(trunc, bool),
            final,
        )


def _no_vmap(fn: Callable) -> Callable:
    """``fn`` with a vmap rule that raises a clear error (the host env is one batch of E)."""
    wrapped = jax.custom_batching.custom_vmap(fn)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        raise ValueError(
            "the gymnasium bridge cannot be vmapped (over seeds or configs): its env state lives in ONE host "
            f"Gymnasium env of fixed size, not in JAX (batch of {axis_size} asked). Train seeds one after another "
            "(a Python loop over keys) or in separate processes; use gymnax environments for vmapped populations"
        )

    return wrapped


def _vector_env(env, num_envs, vectorization_mode: str, make_kwargs: dict):
    """``(gymnasium VectorEnv with SAME_STEP autoreset, its name)`` from what
    :func:`gymnasium_vec_env` accepts; ConfigError naming the fix for anything else."""
    import gymnasium as gym

    try:
        from gymnasium.vector import AutoresetMode
    except ImportError:  # gymnasium < 1.1 has no selectable autoreset mode
        raise ConfigError(
            f"gymnasium {gym.__version__} is too old for the bridge (it needs autoreset_mode="
            "SAME_STEP); pip install 'gymnasium>=1.1'"
        ) from None
    if isinstance(env, gym.vector.VectorEnv):
        vec = env
        mode = vec.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ConfigError(
                f"the vector env uses autoreset_mode={mode}; the bridge needs SAME_STEP so that final "
                "observations are exact: build it with autoreset_mode=AutoresetMode.SAME_STEP"
            )
        name = getattr(vec.spec, "id", None) or type(vec).__name__
    else:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ConfigError(f"num_envs={num_envs!r} must be a positive int")
        if isinstance(env, str):
            name, factory = env, (lambda: gym.make(env, **make_kwargs))
        elif callable(env):
            name, factory = getattr(env, "__name__", "gymnasium-env"), env
        else:
            raise ConfigError(f"env={env!r}: pass a Gymnasium id, an env factory or a gymnasium VectorEnv")
        cls = {"sync": gym.vector.SyncVectorEnv, "async": gym.vector.AsyncVectorEnv}.get(vectorization_mode)
        if cls is None:
            raise ConfigError(f"vectorization_mode={vectorization_mode!r}; use 'sync' or 'async'")
        vec = cls([factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    return vec, name


def gymnasium_vec_env(
    env: Union[str, Callable[[], Any], Any], num_envs: int = 1, *, vectorization_mode: str = "sync", **make_kwargs
) -> VecEnv:
    """A Gymnasium env as a :class:`~purejaxppo.envs.VecEnv` stepped by host callbacks.

    Args:
      env: a Gymnasium id (``"LunarLander-v3"``), a zero-argument factory returning a
        ``gymnasium.Env``, or a ``gymnasium.vector.VectorEnv`` built with
        ``autoreset_mode=AutoresetMode.SAME_STEP`` (then ``num_envs`` is taken from it).
      num_envs: ``E``, sub-envs in the vector env.
      vectorization_mode: ``"sync"`` (one process) or ``"async"`` (one subprocess per
        sub-env; worth it only when the env step is slow compared with the IPC).
      **make_kwargs: passed to ``gymnasium.make`` for an id (e.g. ``continuous=True``).

    Returns:
      ``VecEnv(spec, E, reset, step)``: ``reset(key) -> (obs [E, *obs], state [E] int32)``;
      ``step(key, state, action [E] | [E, D]) -> (obs [E, *obs] f32, state, reward [E] f32,
      terminated [E] bool, truncated [E] bool, {"final_observation": [E, *obs] f32})``.
      Wrap it with ``envs.episode_statistics`` before ``make_ppo(config, venv=...)``
      (``config.num_envs`` must equal ``E``).
    """
    vec, name = _vector_env(env, num_envs, vectorization_mode, make_kwargs)
    first_spec = getattr(vec, "spec", None) or (getattr(vec.envs[0], "spec", None) if hasattr(vec, "envs") else None)
    max_steps = getattr(first_spec, "max_episode_steps", None)
    spec = _spaces_spec(name, vec.single_observation_space, vec.single_action_space, max_steps)
    host = _Host(vec, spec, vec.single_action_space)
    n = vec.num_envs
    obs_sd = jax.ShapeDtypeStruct((n,) + spec.obs_shape, jnp.float32)
    state_sd = jax.ShapeDtypeStruct((n,), jnp.int32)
    flag_sd = jax.ShapeDtypeStruct((n,), jnp.bool_)
    rew_sd = jax.ShapeDtypeStruct((n,), jnp.float32)

    @_no_vmap
    def _reset(seed):
        # ordered: host calls run in program order (the state counter also chains them)
        return io_callback(host.reset, (obs_sd, state_sd), seed, ordered=True)

    @_no_vmap
    def _step(state, action):
        return io_callback(host.step, (obs_sd, state_sd, rew_sd, flag_sd, flag_sd, obs_sd), state, action, ordered=True)

    def reset(key):
        seed = jax.random.randint(key, (), 0, 2**31 - 1 - n, dtype=jnp.int32)
        return _reset(seed)

    def step(key, state, action):
        del key  # the host env's own (seeded) RNG drives it
        if spec.discrete:
            action = action.astype(jnp.int32)
        else:
            # the policy's unclipped sample is what PPO stores; the env gets it clipped
            action = jnp.clip(action.astype(jnp.float32), spec.action_low, spec.action_high)
        obs, state, reward, term, trunc, final = _step(state, action)
        return obs, state, reward, term, trunc, {"final_observation": final}

    return VecEnv(spec, n, reset, step)
