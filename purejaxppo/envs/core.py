"""The VecEnv contract every suite is mapped onto, and wrappers as pure state transformers.

A :class:`VecEnv` is two pure functions over a batch of ``E`` environments:

* ``reset(key) -> (obs [E, *obs_shape], state)``
* ``step(key, state, action [E, ...]) -> (obs, state, reward [E], terminated [E],
  truncated [E], info)``, with ``info["final_observation"]`` ``[E, *obs_shape]``:
  the pre-reset observation (equal to ``obs`` where the episode did not end).

``obs`` may be a pytree (:mod:`purejaxppo.envs.observation`): a
:class:`~purejaxppo.envs.observation.MaskedObs` when the env has legal-action masks, or a
dict / named tuple of arrays (``EnvSpec.obs_structure``). Wrappers take a VecEnv and
return one; whatever statistics they keep live in the env state, so they survive
``vmap`` and checkpointing.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError


class EnvSpec(NamedTuple):
    name: str
    obs_shape: tuple
    discrete: bool
    num_actions: int  # categorical: number of actions; Gaussian: action dimension
    action_shape: tuple  # () for discrete, (D,) for continuous
    action_low: Optional[np.ndarray]
    action_high: Optional[np.ndarray]
    max_episode_steps: Optional[int]
    # per-env pytree of jax.ShapeDtypeStruct for a structured observation (then obs_shape
    # is the default flattening's (size,)); None for one array of obs_shape
    obs_structure: Any = None
    action_mask: bool = False  # observations are MaskedObs(obs, action_mask [E, num_actions])
    action_nvec: tuple = ()  # MultiDiscrete sizes (then num_actions = sum, action_shape = (K,))
    # multi-agent envs (jaxmarl): each env is num_agents consecutive rows, one per agent
    num_agents: int = 1
    # observations are CriticObs(obs, global_state [E, *global_state_shape]) for a centralised critic; () if not
    global_state_shape: tuple = ()


class VecEnv(NamedTuple):
    spec: EnvSpec
    num_envs: int
    reset: Callable[[jax.Array], tuple[jax.Array, Any]]
    step: Callable[[jax.Array, Any, jax.Array], tuple]


def box_action_fields(shape, low, high) -> dict:
    """EnvSpec fields of a continuous action space; a scalar Box becomes ``(1,)``."""
    shape = tuple(shape) if len(shape) else (1,)
    low = np.broadcast_to(np.asarray(low, np.float32), shape).copy()
    high = np.broadcast_to(np.asarray(high, np.float32), shape).copy()
    return dict(discrete=False, num_actions=int(np.prod(shape)), action_shape=shape, action_low=low, action_high=high)


def discrete_action_fields(n: int) -> dict:
    return dict(discrete=True, num_actions=int(n), action_shape=(), action_low=None, action_high=None)


def raw_key(key: jax.Array) -> jax.Array:
    """``uint32[2]`` key data of a (possibly typed) key: what most suites expect."""
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def as_float(obs):
    """Every leaf of an observation pytree as float32, except action masks (kept bool)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), obs)


def default_env_keys(num_envs: int) -> Callable[[jax.Array], jax.Array]:
    return lambda key: jax.random.split(key, num_envs)


def auto_reset_vec_env(
    spec: EnvSpec,
    num_envs: int,
    reset1: Callable,
    step1: Callable,
    env_keys: Optional[Callable[[jax.Array], jax.Array]] = None,
    reset_ratio: int = 1,
) -> VecEnv:
    """A VecEnv from ONE env's pure functions that do NOT reset by themselves.

    ``reset1(key) -> (obs, state)``; ``step1(key, state, action) -> (obs, state, reward,
    terminated, truncated)`` with the suite's episode end already classified (keys are
    ``uint32[2]``). Each env's step key is split into (step, reset) keys; where the
    episode ended, the env is reset and its observation and state replaced, and the
    PRE-reset observation is kept in ``info["final_observation"]``. (Suites' own
    auto-reset wrappers, e.g. Brax's, overwrite that observation; this one cannot.)

    A reset can cost far more than a step (Craftax generates a world) and most steps end
    no episode, so resets are computed only on steps where some env's episode ended
    (:func:`cond_any` on ``done``: under an outer ``vmap`` over seeds or sweeps, where some
    env of any member ended; a plain ``lax.cond`` would become a select computing the reset
    on every step). When most steps end some episode, ``reset_ratio`` is what saves work:

    * ``reset_ratio=1`` (default): every env that finished starts from its own fresh reset.
    * ``reset_ratio=R > 1`` ("optimistic" resets): ONE fresh start is computed per group of
      ``R`` consecutive envs, with the reset key of the group's first finished env: ``R`` times
      fewer resets. Numbers equal ``reset_ratio=1`` on every step where at most one episode
      per group ends; where more do, the group's other finished envs start from a copy of
      that start (same state; their own step keys from then on). Groups never straddle
      devices (``num_envs`` per device must be a multiple of ``R``), so sharding does not
      change the numbers.
    """
    if isinstance(reset_ratio, bool) or not isinstance(reset_ratio, int) or reset_ratio < 1 or num_envs % reset_ratio:
        raise ConfigError(
            f"reset_ratio={reset_ratio!r} must be a positive int dividing the {num_envs} envs of "
            f"{spec.name} per device (1: a fresh reset for every finished env)"
        )
    env_keys = env_keys if env_keys is not None else default_env_keys(num_envs)
    reset_all = jax.vmap(lambda k: reset1(raw_key(k)))
    groups = num_envs // reset_ratio

    def reset(key):
        return _strong(reset_all(env_keys(key)))

    def fresh_starts(done, k_reset):
        """(obs, state) ``[E, ...]``: a fresh start for every env (used where done)."""
        if reset_ratio == 1:
            return reset_all(k_reset)
        first = jnp.argmax(done.reshape(groups, reset_ratio), axis=1)  # 0 where none finished (start unused)
        keys = k_reset.reshape((groups, reset_ratio) + k_reset.shape[1:])[jnp.arange(groups), first]
        return jax.tree.map(lambda x: jnp.repeat(x, reset_ratio, axis=0), reset_all(keys))

    def step(key, state, action):
        k_step, k_reset = jnp.moveaxis(jax.vmap(jax.random.split)(env_keys(key)), 1, 0)
        obs, new, reward, term, trunc = jax.vmap(lambda k, s, a: step1(raw_key(k), s, a))(k_step, state, action)
        done = jnp.logical_or(term, trunc)

        def with_resets(operand):
            obs, new, done, k_reset = operand
            obs0, state0 = fresh_starts(done, k_reset)
            pick = lambda fresh, old: jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), fresh, old).astype(
                old.dtype
            )
            return jax.tree.map(pick, obs0, obs), jax.tree.map(pick, state0, new)

        next_obs, next_state = cond_any(done, with_resets, lambda x: x[:2], (obs, new, done, k_reset))
        next_obs, next_state = _strong((next_obs, next_state))
        return next_obs, next_state, reward.astype(jnp.float32), term, trunc, {"final_observation": obs}

    return VecEnv(spec, num_envs, reset, step)


def cond_any(flags: jax.Array, if_any: Callable, if_none: Callable, operand):
    """``lax.cond(any(flags), if_any, if_none, operand)`` that stays a branch under ``vmap``.

    ``jax.vmap`` turns a ``lax.cond`` on a batched predicate into a ``select`` of both
    branches, so a reset computed only on the steps where an episode ended (most steps end
    none) would be computed on every step under the seeds' ``vmap``. Here, under ``vmap``,
    the predicate is ``any`` over the batch too and the branches are vmapped: the costly
    branch runs for the whole batch when some member needs it and is skipped otherwise.

    Contract that makes this equal to the plain cond: for a member whose ``flags`` are all
    False, ``if_any(operand) == if_none(operand)`` exactly (``if_any`` only changes what the
    flags select). Nested ``vmap`` (sweeps x seeds) is handled level by level.
    """
    cond = jax.custom_batching.custom_vmap(lambda f, x: jax.lax.cond(jnp.any(f), if_any, if_none, x))

    @cond.def_vmap
    def rule(axis_size, in_batched, f, x):
        batched = lambda leaf, b: leaf if b else jnp.broadcast_to(leaf, (axis_size,) + leaf.shape)
        f, x = jax.tree.map(batched, (f, x), tuple(in_batched))
        out = cond_any(f, jax.vmap(if_any), jax.vmap(if_none), x)
        return out, jax.tree.map(lambda _: True, out)

    return cond(flags, operand)


def _strong(tree):
    """``tree`` with weak types made strong (values and dtypes unchanged). Suites mix them
    (Craftax's reset leaves ``player_direction`` weak, Brax's step makes ``done`` weak), and a
    state whose types differ between reset and step recompiles ``jit(step)`` at its second call."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), tree)


# --- wrappers ---------------------------------------------------------------------------
class EpisodeStatsState(NamedTuple):
    env_state: Any
    episode_return: jax.Array  # [E] running undiscounted return of the current episode
    episode_length: jax.Array  # [E]


def episode_statistics(venv: VecEnv) -> VecEnv:
    """Track per-env episode return/length; ``info["episode_return"]`` and
    ``info["episode_length"]`` hold the finished episode's totals where it ended
    (``info["episode_done"]``), 0 elsewhere. Uses the raw environment reward.

    A multi-agent env (``spec.num_agents = N`` consecutive rows per env) reports the TEAM
    return on each of its rows: the sum over its agents' returns (so the mean over rows is
    the mean team return, each episode counted once per agent)."""
    n = venv.spec.num_agents
    team = (lambda r: r) if n == 1 else (lambda r: jnp.repeat(r.reshape(-1, n).sum(axis=1), n))

    def reset(key):
        obs, state = venv.reset(key)
        zeros = jnp.zeros((venv.num_envs,), jnp.float32)
        return obs, EpisodeStatsState(state, zeros, jnp.zeros((venv.num_envs,), jnp.int32))

    def step(key, state, action):
        obs, env_state, reward, term, trunc, info = venv.step(key, state.env_state, action)
        ret = state.episode_return + reward
        length = state.episode_length + 1
        done = jnp.logical_or(term, trunc)
        info = {
            **info,
            "episode_done": done,
            "episode_return": jnp.where(done, team(ret), 0.0),
            "episode_length": jnp.where(done, length, 0),
        }
        new_state = EpisodeStatsState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return obs, new_state, reward, term, trunc, info

    return venv._replace(reset=reset, step=step)


def keep_observation(venv: VecEnv, indices) -> VecEnv:
    """Partial observability: keep only the flat observation components ``indices``
    (``(0, 2)`` turns CartPole into position-only CartPole: velocities hidden).

    A structured observation's components are those of its flattening, the array the
    default network sees (:func:`purejaxppo.envs.observation.flatten`: leaves in pytree order,
    as float32); what is kept is one array. An action mask is kept whole, beside it."""
    from purejaxppo.envs.observation import MaskedObs, flatten

    structure, masked = venv.spec.obs_structure, venv.spec.action_mask
    idx = np.asarray(indices, np.int32)
    size = int(np.prod(venv.spec.obs_shape))
    if idx.max() >= size:
        raise ConfigError(f"obs_keep={tuple(indices)} has an index >= the observation size {size} of {venv.spec.name}")
    flat = (lambda o: o.reshape(o.shape[:1] + (-1,))) if structure is None else (lambda o: flatten(o, structure))

    def select(o):
        return MaskedObs(flat(o.obs)[:, idx], o.action_mask) if masked else flat(o)[:, idx]

    def reset(key):
        obs, state = venv.reset(key)
        return select(obs), state

    def step(key, state, action):
        obs, state, reward, term, trunc, info = venv.step(key, state, action)
        info = {**info, "final_observation": select(info["final_observation"])}
        return select(obs), state, reward, term, trunc, info

    return venv._replace(spec=venv.spec._replace(obs_shape=(len(idx),), obs_structure=None), reset=reset, step=step)


def check_name(name: str, names, suite: str) -> None:
    """A clear error for an unknown env name of ``suite``, with the closest names."""
    import difflib

    names = list(names)
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
    hint = (
        f"did you mean {', '.join(f'{suite}:{n}' for n in close)}?"
        if close
        else (f"see `python -m purejaxppo envs --suite {suite}`")
    )
    raise ConfigError(f"unknown {suite} environment {name!r}; {hint}")


def spec_fields_of_obs(obs_one_env) -> dict:
    """``obs_shape`` / ``obs_structure`` / ``action_mask`` EnvSpec fields of one env's
    observation (array, structure, or MaskedObs of either)."""
    from purejaxppo.envs.observation import MaskedObs, flat_size, structure_of

    masked = isinstance(obs_one_env, MaskedObs)
    inner = obs_one_env.obs if masked else obs_one_env
    if isinstance(inner, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
        return dict(obs_shape=tuple(inner.shape), obs_structure=None, action_mask=masked)
    structure = structure_of(inner)
    return dict(obs_shape=(flat_size(structure),), obs_structure=structure, action_mask=masked)
