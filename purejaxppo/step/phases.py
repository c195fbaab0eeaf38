"""The parts of one training iteration, as pure functions of a :class:`StepParts`.

:func:`ppo_step` is ``runner_state -> (runner_state, metrics)``; it runs, in order,
:func:`collect_rollout` (the agent acts ``H`` steps in ``E`` envs), :func:`compute_targets`
(reward scaling, the agent's values, GAE, the gathered batch), :func:`update_params` (``K``
epochs x ``M`` minibatches of the loss) and :func:`step_metrics`. :func:`init_runner` is the
first runner state. ``parts.static`` holds the structural fields the step was built with;
``cfg`` (an argument, traced) the numeric ones.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from purejaxppo import envs as envs_lib
from purejaxppo.agents.agent import Agent
from purejaxppo.config import PPOConfig, check_structure
from purejaxppo.stages import losses, normalize
from purejaxppo.stages.gae import gae
from purejaxppo.stages.rollout import Batch, Transition, collect
from purejaxppo.stages.update import TrainState, make_optimizer, update_epochs
from purejaxppo.step import device_split as ds
from purejaxppo.step.environment import rollout_key
from purejaxppo.step.schedule import learning_rate, learning_rates


class RunnerState(NamedTuple):
    train: TrainState  # params, optimizer state
    env_state: Any  # [E] env states (incl. wrapper statistics)
    obs: jax.Array  # [E, *obs_shape] current observations
    rng: jax.Array
    update: jax.Array  # int32 number of updates done
    carry: Any = ()  # [E, ...] agent memory after the last step (before any reset); () if none
    done: Any = None  # [E] bool: the last step ended an episode -> reset before acting on ``obs``
    reward_scale: Any = ()  # normalize.RewardScaleState with normalize_reward, else ()


LossFn = Callable[[Agent, Any, Batch, PPOConfig], tuple[jax.Array, dict]]


class StepParts(NamedTuple):
    """What a step is built from, fixed when ``make_ppo`` builds it: the config whose
    structural fields it binds (``static``), the env, the agent, the minibatch loss and the
    device split (:class:`~purejaxppo.step.device_split.DeviceSplit`)."""

    static: PPOConfig
    venv: envs_lib.VecEnv
    agent: Agent
    loss_fn: LossFn
    split: ds.DeviceSplit


def ppo_loss_fn(agent: Agent, params, mb: Batch, config: PPOConfig) -> tuple[jax.Array, dict]:
    """Default minibatch loss: clipped actor + (clipped) critic - entropy bonus.

    ``mb`` is in the agent's unit layout; its advantages are already normalised as
    ``config.adv_norm`` asks (the step does it, over the global minibatch)."""
    dist_params, values = agent.evaluate(params, mb)
    logp = agent.dist.log_prob(dist_params, mb.action)
    entropy = agent.dist.entropy(dist_params)
    return losses.ppo_loss(
        logp,
        entropy,
        values,
        mb.log_prob,
        mb.value,
        mb.advantage,
        mb.ret,
        clip_eps=config.clip_eps,
        vf_coef=config.vf_coef,
        ent_coef=config.ent_coef,
        vf_clip_eps=config.vf_clip_eps if config.clip_value else None,
    )


def gae_terminated(terminated: jax.Array, truncated: jax.Array, bootstrap_truncated: bool) -> jax.Array:
    """The ``terminated`` flags GAE sees. With ``bootstrap_truncated`` (the default) a
    time-limit end bootstraps from the value of the true final state; without it, it is
    treated as terminal (value 0 after it), as code written for gymnax 0.x did, whose
    single ``done`` flag did not tell the two apart (gymnax-blines)."""
    return terminated if bootstrap_truncated else jnp.logical_or(terminated, truncated)


def strong_types(tree):
    """``tree`` with every weak-typed leaf made strong (same dtype, same values).

    Envs start some leaves from Python scalars (gymnax's ``time``: a weak-typed int32) and
    weak types survive the step; a checkpoint restores strong arrays. Types are part of a
    compiled function's signature, so a weak fresh state and a strong restored one would
    compile the same chunk twice; a strong state from the start compiles it once."""

    def strong(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x  # typed keys are never weak
        return jax.lax.convert_element_type(x, x.dtype)  # drops weak_type; a no-op for strong leaves

    return jax.tree.map(strong, tree)


def episode_metrics(info: dict) -> dict:
    """Mean return/length over episodes COMPLETED in this rollout (NaN if none) and their count."""
    done = info["episode_done"]
    count = jnp.sum(done)
    safe = jnp.maximum(count, 1)
    nan_if_none = lambda x: jnp.where(count > 0, x, jnp.nan)
    return {
        "episode_return": nan_if_none(jnp.sum(info["episode_return"]) / safe),
        "episode_length": nan_if_none(jnp.sum(info["episode_length"]) / safe),
        "episodes": count,
    }


def optimizer_for(cfg: PPOConfig, lr=0.0):
    """Adam + global-norm clip at rate ``lr`` (stateless in the rate: ``init`` does not need it)."""
    return make_optimizer(cfg.max_grad_norm, cfg.adam_eps, lr)


def init_runner(parts: StepParts, rng: jax.Array, cfg: PPOConfig) -> RunnerState:
    """The first runner state: fresh params and optimizer state, reset envs, the agent's
    initial carry, every env marked done (so the first act resets)."""
    check_structure(parts.static, cfg)
    e_loc = parts.venv.num_envs
    rng, k_net, k_env = jax.random.split(rng, 3)
    params = parts.agent.init(k_net)
    obs, env_state = parts.venv.reset(k_env)
    scale = normalize.init_reward_scale(e_loc) if parts.static.normalize_reward else ()
    return strong_types(
        RunnerState(
            TrainState(params, optimizer_for(cfg).init(params)),
            env_state,
            obs,
            rng,
            jnp.asarray(0, jnp.int32),
            parts.agent.initial_carry(e_loc),
            jnp.ones((e_loc,), bool),
            scale,
        )
    )


def collect_rollout(parts: StepParts, params, runner: RunnerState, key: jax.Array):
    """1. ``((env_state, obs, carry, done), traj [H, E])``: the agent acts ``num_steps`` steps."""
    agent, static = parts.agent, parts.static

    def policy(k, carry, obs, reset):
        carry, dist_params, record = agent.act(params, carry, obs, reset)
        action = ds.sample(parts.split, agent.dist, k, dist_params)
        return carry, action, agent.dist.log_prob(dist_params, action), record

    return collect(
        rollout_key(key, static.rollout_rng),
        policy,
        parts.venv.step,
        runner.env_state,
        runner.obs,
        static.num_steps,
        runner.carry,
        runner.done,
        static.rollout_unroll,
    )


def compute_targets(parts: StepParts, params, traj: Transition, reward_scale, cfg: PPOConfig):
    """2. ``(batch [H, E_glob], resets [H, E_glob], info, reward_scale)``: rewards scaled
    (optional), the agent's values of every state and true next state, GAE; gathered over
    devices, advantages normalised over the batch if ``adv_norm == "batch"``."""
    static, reward = parts.static, traj.reward
    if static.normalize_reward:
        reward_scale, reward = normalize.scale_rewards(
            reward_scale,
            reward,
            jnp.logical_or(traj.terminated, traj.truncated),
            cfg.gamma,
            axis_name=parts.split.axis_name,
        )
    # without a truncation bootstrap every end is terminal, and no final state's value is read
    values, next_values = parts.agent.values(params, traj, final_states=static.bootstrap_truncated)
    terminated = gae_terminated(traj.terminated, traj.truncated, static.bootstrap_truncated)
    adv, ret = gae(reward, values, next_values, terminated, traj.truncated, cfg.gamma, cfg.gae_lambda)
    batch, resets, info = ds.gather(
        parts.split, (Batch(traj.obs, traj.action, traj.log_prob, values, adv, ret), traj.reset, traj.info), axis=1
    )
    if static.adv_norm == "batch":
        batch = batch._replace(advantage=losses.normalize(batch.advantage))
    return batch, resets, info, reward_scale


def update_params(parts: StepParts, runner: RunnerState, batch: Batch, resets, key: jax.Array, cfg: PPOConfig):
    """3. ``(train_state, metrics)``: ``update_epochs`` x ``num_minibatches`` steps of the loss
    over the agent's units of ``batch``, at this update's learning rate(s)."""
    static, split = parts.static, parts.split

    def minibatch_loss(p, mb):
        if static.adv_norm == "minibatch":  # over the whole (global) minibatch
            mb = mb._replace(advantage=losses.normalize(mb.advantage))
        return parts.loss_fn(parts.agent, p, ds.my_share(split, mb), cfg)

    units = parts.agent.units(batch, ds.gather(split, runner.carry, axis=0), resets)
    rates = learning_rates(cfg, runner.train.params, runner.update)
    return update_epochs(
        key,
        runner.train,
        units,
        loss_fn=minibatch_loss,
        optimizer=optimizer_for(cfg, rates),
        num_epochs=static.update_epochs,
        num_minibatches=static.num_minibatches,
        target_kl=cfg.target_kl,
        axis_name=split.axis_name,
    )


def step_metrics(static: PPOConfig, cfg: PPOConfig, update: jax.Array, metrics: dict, info: dict, batch: Batch) -> dict:
    """The update's metrics plus the rollout's episodes, explained variance and rate(s)."""
    metrics.update(episode_metrics(info))
    metrics["explained_variance"] = losses.explained_variance(batch.value, batch.ret)
    metrics["lr"] = learning_rate(cfg, update)
    if cfg.critic_lr is not None:
        metrics["critic_lr"] = metrics["lr"] * (cfg.critic_lr / cfg.lr)
    # no env-step count here: it passes 2**31 on long runs and the device's int32 would wrap
    # (JAX's x64 is off); the host counts it exactly from the update (train.env_steps_after)
    return metrics


def ppo_step(parts: StepParts, runner: RunnerState, cfg: PPOConfig) -> tuple[RunnerState, dict]:
    """One training iteration: rollout, targets, update; ``(runner_state, metrics)``."""
    check_structure(parts.static, cfg)
    rng, k_roll, k_upd = jax.random.split(runner.rng, 3)
    params = runner.train.params
    (env_state, obs, carry, done), traj = collect_rollout(parts, params, runner, k_roll)
    batch, resets, info, reward_scale = compute_targets(parts, params, traj, runner.reward_scale, cfg)
    train_state, metrics = update_params(parts, runner, batch, resets, k_upd, cfg)
    metrics = step_metrics(parts.static, cfg, runner.update, metrics, info, batch)
    return RunnerState(train_state, env_state, obs, rng, runner.update + 1, carry, done, reward_scale), metrics
