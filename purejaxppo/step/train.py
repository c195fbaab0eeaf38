"""PPO composed ONCE: ``make_ppo(config)`` -> pure ``init``, ``step``, ``run`` and ``train``.

One training iteration (the compiled step, ``runner_state -> (runner_state, metrics)``;
:func:`purejaxppo.step.phases.ppo_step`):

1. rollout: the agent acts in ``E`` envs for ``H`` steps, carrying its memory
   (``lax.scan``; :func:`~purejaxppo.stages.rollout.collect`);
2. targets: rewards scaled (optional), the agent's values of every state and true next
   state, GAE;
3. update: K epochs x M shuffled minibatches of the loss, Adam + global-norm clip.

The step is generic over the :class:`~purejaxppo.agents.agent.Agent` (``config.network``
names a registered one, :mod:`purejaxppo.agents.registry`) and over devices: with
``axis_name`` it is the per-device program of data-parallel PPO (``parallel.split_envs``):
each device steps its slice of the envs, the batch is gathered so every device holds the
global one, advantages are normalised over the global minibatch, gradients averaged
(``pmean``) and running statistics merged (:mod:`purejaxppo.step.device_split`).

Config: structural fields are bound when the step is built; ``cfg`` (an argument, not a
closure) supplies the numeric ones, traced, so ``jax.vmap(train)(keys, configs)`` trains
a population in one compile. A ``cfg`` whose structural fields differ is refused.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

from purejaxppo import envs as envs_lib
from purejaxppo.agents.agent import Agent, feed_forward
from purejaxppo.agents.networks import Network
from purejaxppo.agents.registry import build_agent, validate_config
from purejaxppo.config import PPOConfig
from purejaxppo.stages.rollout import Batch
from purejaxppo.step.device_split import DeviceSplit
from purejaxppo.step.environment import make_env, per_env_impl, rollout_key
from purejaxppo.step.phases import (
    LossFn,
    RunnerState,
    StepParts,
    episode_metrics,
    gae_terminated,
    init_runner,
    ppo_loss_fn,
    ppo_step,
    strong_types,
)
from purejaxppo.step.schedule import learning_rate, learning_rates

__all__ = [
    "PPO",
    "Batch",
    "RunnerState",
    "LossFn",
    "make_ppo",
    "make_train",
    "make_agent",
    "make_env",
    "ppo_loss_fn",
    "learning_rate",
    "learning_rates",
    "gae_terminated",
    "rollout_key",
    "per_env_impl",
    "strong_types",
    "episode_metrics",
]


def env_steps_after(first_update: int, n: int, batch_size: int) -> np.ndarray:
    """``int64 [n]``: env steps per run after updates ``first_update .. first_update+n-1``
    (``(u + 1) * batch_size``), counted on the host: it passes 2**31 on long runs, where the
    device's int32 (JAX's x64 off) would wrap, so the step's metrics do not carry it."""
    return (np.arange(first_update, first_update + n, dtype=np.int64) + 1) * np.int64(batch_size)


class PPO(NamedTuple):
    config: PPOConfig
    venv: envs_lib.VecEnv
    agent: Agent
    init: Callable[..., RunnerState]
    step: Callable[..., tuple[RunnerState, dict]]
    run: Callable[..., tuple[RunnerState, dict]]
    train: Callable[..., tuple[RunnerState, dict]]


def make_agent(config: PPOConfig, spec: envs_lib.EnvSpec, network: Optional[Network] = None) -> Agent:
    """The agent ``config.network`` names in the registry (``network=`` swaps in a feed-forward one)."""
    if network is not None:
        return feed_forward(network)
    return build_agent(config, spec)


def make_ppo(
    config: PPOConfig,
    venv: Optional[envs_lib.VecEnv] = None,
    network: Optional[Network] = None,
    loss_fn: LossFn = ppo_loss_fn,
    *,
    agent: Optional[Agent] = None,
    axis_name: Optional[str] = None,
    num_devices: int = 1,
) -> PPO:
    """Build PPO for ``config``; ``venv``, ``network`` / ``agent`` and ``loss_fn`` can be swapped.

    ``loss_fn(agent, params, mb, cfg) -> (loss, metrics)`` is a mean over the minibatch
    ``mb`` (:class:`~purejaxppo.stages.rollout.Batch` in the agent's unit layout). ``axis_name``
    and ``num_devices`` build the per-device program of data-parallel PPO; use
    :func:`purejaxppo.parallel.sharding.split_envs`, which wraps it in ``shard_map``.

    An agent given as ``agent=`` trains, but a run folder records only ``config.network``:
    to evaluate, resume or warm-start from it, register the agent under a name
    (:func:`purejaxppo.agents.registry.register_agent`) and set ``network`` to it."""
    validate_config(config)
    venv = venv if venv is not None else make_env(config, axis_name, num_devices)
    agent = agent if agent is not None else make_agent(config, venv.spec, network)
    split = DeviceSplit(axis_name, num_devices, venv.num_envs, config.num_envs)
    parts = StepParts(config, venv, agent, loss_fn, split)

    def init(rng: jax.Array, cfg: PPOConfig = config) -> RunnerState:
        return init_runner(parts, rng, cfg)

    def step(runner: RunnerState, cfg: PPOConfig = config) -> tuple[RunnerState, dict]:
        return ppo_step(parts, runner, cfg)

    def run(runner: RunnerState, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        """``num_updates`` (static; default all) steps as one ``lax.scan``; metrics are ``[num_updates]``."""
        n = config.num_updates if num_updates is None else num_updates
        return jax.lax.scan(lambda r, _: step(r, cfg), runner, None, length=n)

    def train(rng: jax.Array, cfg: PPOConfig = config):
        """Whole training from ``rng``: ``(final RunnerState, metrics {name: [num_updates]})``."""
        return run(init(rng, cfg), cfg)

    return PPO(config, venv, agent, init, step, run, train)


def make_train(config: PPOConfig, **kwargs) -> Callable[..., tuple[RunnerState, dict]]:
    """Pure ``train(rng, config=config)``; wrap in ``jax.jit`` / ``jax.vmap`` as needed."""
    return make_ppo(config, **kwargs).train
