"""Evaluation of trained policies under ``jit``, and episode GIFs.

:func:`make_evaluator` builds a pure, jitted ``evaluate(key, params, obs_stats)`` that
plays ``num_episodes`` episodes in parallel (one per env copy) with the deterministic
(mode) or a sampled policy, vmapped over seeds, and returns each copy's FIRST episode
return and length. The env is the training env without the normalisation wrappers:
returns are raw environment returns, and if the run normalised observations the policy
sees them normalised with the run's final statistics, frozen (``obs_stats``).
:func:`make_episodes` is the same evaluation for ONE run (no seed axis), pure: the
evaluation during training (:mod:`purejaxppo.programs.eval_program`) vmaps it over the runs axis.
Recurrent (``network="gru"``) policies carry their hidden state from step to step and
reset it after each episode's end, as in training (:func:`policy_step`); the GIF
rollout (:func:`episode_states`) does the same.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError, PPOConfig


def find_obs_stats(env_state) -> Optional[Any]:
    """The observation-normalisation statistics inside a (wrapped) env state, or None.

    Found by type (``normalize.ObsNormState``) so it works whatever the wrapper order."""
    from purejaxppo.stages.normalize import ObsNormState

    found = []

    def visit(node):
        if isinstance(node, ObsNormState):
            found.append(node.obs_stats)
            return
        if isinstance(node, (tuple, list)):
            for child in node:
                visit(child)

    visit(env_state)
    return found[0] if found else None


def _eval_env(config: PPOConfig, num_envs: int):
    from purejaxppo.step.train import make_env

    changes = dict(num_envs=num_envs, normalize_obs=False, normalize_reward=False)
    return make_env(config.replace(**changes))


def _obs_transform(config: PPOConfig, obs_stats):
    if not config.normalize_obs or obs_stats is None:
        return lambda obs: obs
    from purejaxppo.stages.normalize import apply_obs_stats

    return lambda obs: apply_obs_stats(obs_stats, obs)


def policy_step(agent) -> tuple[Callable, Callable]:
    """``(init_memory(n), act(params, memory, obs [n, ...], reset [n]) -> (dist_params, memory))``
    for an :class:`~purejaxppo.agents.agent.Agent`: its carry (``()`` for feed-forward agents, the
    GRU state for recurrent ones), reset where the previous step ended that copy's episode
    (``True`` before the first step), exactly as in training."""

    def act(params, memory, obs, reset):
        memory, dist_params, _ = agent.act(params, memory, obs, reset)
        return dist_params, memory

    return agent.initial_carry, act


def make_episodes(
    config: PPOConfig, agent, num_episodes: int, deterministic: bool = True, max_steps: Optional[int] = None
) -> Callable:
    """Pure ``play(key, params, obs_stats | None) -> (returns [N], lengths [N])`` for ONE run
    (no seed axis; wrap it in ``vmap``/``jit``): ``N = num_episodes`` env copies each play one
    episode from a reset of their own; a copy whose episode is still running after
    ``max_steps`` (default: the env's time limit, so every episode ends) reports NaN.
    A multi-agent env's copy is ``A`` rows (its agents) and reports its team return once."""
    if num_episodes < 1:
        raise ConfigError(f"--episodes={num_episodes} must be >= 1")
    from purejaxppo.step.train import make_env

    multi_agent = config.env_name.startswith("jaxmarl:")  # the training config's rows are valid; eval's K may not be
    agents = make_env(config.replace(normalize_obs=False, normalize_reward=False)).spec.num_agents if multi_agent else 1
    team = slice(None, None, agents)  # every row of a multi-agent copy holds its team return
    num_episodes = num_episodes * agents
    venv = _eval_env(config, num_episodes)
    horizon = int(max_steps or venv.spec.max_episode_steps)
    init_memory, act = policy_step(agent)

    def play(key, params, obs_stats=None):
        k_reset, k_run = jax.random.split(key)
        prep = _obs_transform(config, obs_stats)
        obs, state = venv.reset(k_reset)

        def body(carry, k):
            state, obs, memory, reset, finished, ret, length = carry
            k_act, k_env = jax.random.split(k)
            dist_params, memory = act(params, memory, prep(obs), reset)
            action = agent.dist.mode(dist_params) if deterministic else agent.dist.sample(k_act, dist_params)
            obs, state, _, _, _, info = venv.step(k_env, state, action)
            new = jnp.logical_and(info["episode_done"], jnp.logical_not(finished))
            ret = jnp.where(new, info["episode_return"], ret)
            length = jnp.where(new, info["episode_length"], length)
            return (state, obs, memory, info["episode_done"], jnp.logical_or(finished, new), ret, length), None

        init = (
            state,
            obs,
            init_memory(num_episodes),
            jnp.ones(num_episodes, bool),
            jnp.zeros(num_episodes, bool),
            jnp.full(num_episodes, jnp.nan, jnp.float32),
            jnp.zeros(num_episodes, jnp.int32),
        )
        (*_, finished, ret, length), _ = jax.lax.scan(body, init, jax.random.split(k_run, horizon))
        return jnp.where(finished, ret, jnp.nan)[team], length[team]

    return play


def make_evaluator(
    config: PPOConfig, agent, num_episodes: int, deterministic: bool = True, max_steps: Optional[int] = None
) -> Callable:
    """Jitted ``evaluate(key, params [S, ...], obs_stats [S, ...] | None) -> (returns [S, N], lengths [S, N])``.

    :func:`make_episodes` vmapped over seeds, with ``key`` split per seed."""
    one_seed = make_episodes(config, agent, num_episodes, deterministic, max_steps)

    @jax.jit
    def evaluate(key, params, obs_stats=None):
        n_seeds = jax.tree.leaves(params)[0].shape[0]
        keys = jax.random.split(key, n_seeds)
        return jax.vmap(one_seed, in_axes=(0, 0, 0 if obs_stats is not None else None))(keys, params, obs_stats)

    return evaluate


def evaluate_runner(
    config: PPOConfig, agent, runner_state, key: jax.Array, num_episodes: int = 100, deterministic: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Evaluate every seed of a driver runner state (leading seed axis): ``(returns, lengths)`` ``[S, N]``."""
    evaluate = make_evaluator(config, agent, num_episodes, deterministic)
    stats = find_obs_stats(runner_state.env_state) if config.normalize_obs else None
    ret, length = evaluate(key, runner_state.train.params, stats)
    return np.asarray(ret), np.asarray(length)


def summarize(returns: np.ndarray) -> dict:
    """mean/std/min/max over all finite episode returns (and per seed means)."""
    r = np.asarray(returns, np.float64)
    flat = r[np.isfinite(r)]
    if flat.size == 0:
        return {
            "episodes": 0,
            "mean": float("nan"),
            "std": float("nan"),
            "min": float("nan"),
            "max": float("nan"),
            "per_seed_mean": [float("nan")] * r.shape[0],
        }
    per_seed = [float(np.mean(x[np.isfinite(x)])) if np.isfinite(x).any() else float("nan") for x in r]
    return {
        "episodes": int(flat.size),
        "mean": float(flat.mean()),
        "std": float(flat.std()),
        "min": float(flat.min()),
        "max": float(flat.max()),
        "per_seed_mean": per_seed,
    }


def episode_states(config: PPOConfig, agent, params, key: jax.Array, obs_stats=None, deterministic: bool = True):
    """One episode in a single raw gymnax env: ``(env, env_params, [states], [cumulative rewards])``
    for gymnax's visualizer. ``params`` (and ``obs_stats``) are one seed's (no seed axis)."""
    from purejaxppo.envs import make_gymnax

    env, env_params, spec = make_gymnax(config.env_name, config.max_episode_steps)
    keep = None if config.obs_keep is None else np.asarray(config.obs_keep, np.int32)
    prep_norm = _obs_transform(config, obs_stats)

    def prep(obs):
        obs = obs.astype(jnp.float32)[None]
        if keep is not None:
            obs = obs.reshape(1, -1)[:, keep]
        return prep_norm(obs)

    scalar_box = not spec.discrete and len(env.action_space(env_params).shape) == 0
    init_memory, act = policy_step(agent)

    @jax.jit
    def rollout(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset, env_params)

        def body(carry, k):
            state, obs, memory, reset, done_before = carry
            k_act, k_env = jax.random.split(k)
            dist_params, memory = act(params, memory, prep(obs), reset[None])
            action = agent.dist.mode(dist_params) if deterministic else agent.dist.sample(k_act, dist_params)
            action = action[0]
            if not spec.discrete:
                action = jnp.clip(action, spec.action_low, spec.action_high)
                if scalar_box:
                    action = action[..., 0]
            obs2, state2, reward, term, trunc, _ = env.step(k_env, state, action, env_params)
            done = jnp.logical_or(term, trunc)
            return (state2, obs2, memory, done, jnp.logical_or(done_before, done)), (state, reward, done_before)

        init = (state, obs, init_memory(1), jnp.asarray(True), jnp.asarray(False))
        _, (states, rewards, done_before) = jax.lax.scan(body, init, jax.random.split(k_run, spec.max_episode_steps))
        return states, rewards, done_before

    states, rewards, done_before = jax.device_get(rollout(key))
    n = int(np.sum(~np.asarray(done_before)))  # steps up to and including the episode's last
    seq = [jax.tree.map(lambda x: x[i], states) for i in range(n)]
    return env, env_params, seq, np.cumsum(np.asarray(rewards)[:n]).tolist()


def gif_renderer(config: PPOConfig):
    """gymnax's ``Visualizer`` class if ``config.env_name`` can be rendered here, else a
    ConfigError naming what is missing (checked before any evaluation work is done)."""
    import matplotlib

    matplotlib.use("Agg")
    try:
        from gymnax.visualize import Visualizer
    except ImportError as e:
        raise ConfigError(
            f"--gif needs gymnax's visualizer dependencies ({e}); install matplotlib and "
            "gymnasium[classic-control] (pygame), or drop --gif"
        ) from None
    supported = (
        "Acrobot-v1",
        "CartPole-v1",
        "Pendulum-v1",
        "MountainCar-v0",
        "MountainCarContinuous-v0",
        "Catch-bsuite",
        "Asterix-MinAtar",
        "Breakout-MinAtar",
        "Freeway-MinAtar",
        "Seaquest-MinAtar",
        "SpaceInvaders-MinAtar",
        "Pong-misc",
        "PointRobot-misc",
        "MetaMaze-misc",
        "FourRooms-misc",
    )
    if config.env_name not in supported:
        raise ConfigError(
            f"gymnax's visualizer cannot render {config.env_name}; --gif works for {', '.join(supported)}"
        )
    if config.env_name.endswith(("-v0", "-v1")):
        try:  # gymnax draws classic control through gymnasium's pygame renderer
            import pygame  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"--gif for {config.env_name} needs pygame: pip install 'purejaxppo[render]' (or pygame), or drop --gif"
            ) from None
    return Visualizer


def save_gif(
    path: str, config: PPOConfig, agent, params, key: jax.Array, obs_stats=None, deterministic: bool = True
) -> int:
    """Render one episode to ``path`` with gymnax's visualizer; returns the number of frames."""
    Visualizer = gif_renderer(config)
    env, env_params, seq, cum = episode_states(config, agent, params, key, obs_stats, deterministic)
    Visualizer(env, env_params, seq, cum).animate(path)
    return len(seq)
