"""PPO composed: ``make_ppo(config)`` -> pure ``init``, ``step`` and ``train``.

One training iteration (the compiled step, ``runner_state -> (runner_state, metrics)``):

1. rollout: the actor alone steps ``E`` envs for ``H`` steps (``lax.scan``);
2. targets: one batched critic pass over all observations and true next states, GAE;
3. update: K epochs x M shuffled minibatches of the PPO loss, Adam + global-norm clip.

``train(rng, config)`` is ``init`` followed by a ``lax.scan`` of ``step`` over all
updates. ``config`` is an argument (not a closure) so its numeric fields are traced:
``jax.vmap(train)(keys, configs)`` trains a population in one compile.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import envs as envs_lib
from . import losses, normalize
from .config import ConfigError, PPOConfig, validate
from .gae import gae
from .networks import Network, make_network
from .rollout import Transition, collect, critic_values
from .update import TrainState, make_optimizer, update_epochs


class Batch(NamedTuple):
    """Training data for one update, leading axis = units (``[N, ...]`` once flattened)."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array  # old log-prob (fixed)
    value: jax.Array  # old value (fixed; used by value clipping)
    advantage: jax.Array
    ret: jax.Array  # return target A + V_old


class RunnerState(NamedTuple):
    train: TrainState  # params, optimizer state
    env_state: Any  # [E] env states (incl. wrapper statistics)
    obs: jax.Array  # [E, *obs_shape] current observations
    rng: jax.Array
    update: jax.Array  # int32 number of updates done


class PPO(NamedTuple):
    config: PPOConfig
    venv: envs_lib.VecEnv
    network: Network
    init: Callable[[jax.Array, PPOConfig], RunnerState]
    step: Callable[[RunnerState, PPOConfig], tuple[RunnerState, dict]]
    run: Callable[..., tuple[RunnerState, dict]]
    train: Callable[..., tuple[RunnerState, dict]]


LossFn = Callable[[Network, Any, Batch, PPOConfig], tuple[jax.Array, dict]]


def ppo_loss_fn(network: Network, params, mb: Batch, config: PPOConfig) -> tuple[jax.Array, dict]:
    """Default minibatch loss: clipped actor + (clipped) critic - entropy bonus."""
    dist_params, values = network.apply(params, mb.obs)
    logp = network.dist.log_prob(dist_params, mb.action)
    entropy = network.dist.entropy(dist_params)
    adv = losses.normalize(mb.advantage) if config.adv_norm == "minibatch" else mb.advantage
    return losses.ppo_loss(
        logp, entropy, values, mb.log_prob, mb.value, adv, mb.ret,
        clip_eps=config.clip_eps, vf_coef=config.vf_coef, ent_coef=config.ent_coef,
        vf_clip_eps=config.vf_clip_eps if config.clip_value else None,
    )


def learning_rate(config: PPOConfig, update: jax.Array) -> jax.Array:
    """Learning rate for update number ``update`` (0-based): constant, or linearly
    annealed from ``lr`` towards 0 (``lr * (1 - update / num_updates)``). It is a
    function of the update index, not of the optimizer's step count, so minibatches
    skipped by target-KL early stopping do not shift the schedule."""
    frac = 1.0 if not config.anneal_lr else 1.0 - update / config.num_updates
    return jnp.asarray(config.lr * frac, jnp.float32)


def learning_rates(config: PPOConfig, params, update: jax.Array):
    """The scalar rate, or (with ``critic_lr``) a params-shaped tree: critic leaves
    (``critic_torso``, ``value_head``) get ``critic_lr`` on the same schedule."""
    lr = learning_rate(config, update)
    if config.critic_lr is None:
        return lr
    critic = lr * (config.critic_lr / config.lr)
    is_critic = lambda path: any(getattr(k, "key", None) in ("critic_torso", "value_head") for k in path)
    return jax.tree_util.tree_map_with_path(lambda path, _: critic if is_critic(path) else lr, params)


def rollout_key(key: jax.Array, impl: str) -> jax.Array:
    """The rollout's key in PRNG ``impl``. Threefry (JAX's default) costs about as much
    as CartPole's physics per env step on CPU; ``unsafe_rbg`` (XLA's RngBitGenerator) is
    ~4x cheaper, with weaker guarantees for split/fold_in, which env noise and action
    sampling do not need. Shuffling and initialisation always use threefry."""
    if impl == "threefry":
        return key
    return jax.random.key(jax.random.bits(key, (), jnp.uint32), impl=impl)


def make_env(config: PPOConfig) -> envs_lib.VecEnv:
    """The config's environment, vectorised, with its wrappers (innermost first)."""
    venv = envs_lib.make_vec_env(config.env_name, config.num_envs, config.max_episode_steps)
    if config.obs_keep is not None:
        venv = envs_lib.keep_observation(venv, config.obs_keep)
    venv = envs_lib.episode_statistics(venv)  # inside the scalers: it records raw returns
    if config.normalize_reward:
        venv = normalize.scale_reward(venv, float(config.gamma))
    if config.normalize_obs:
        venv = normalize.normalize_observation(venv, frozen=config.freeze_obs_norm)
    return venv


def make_ppo(
    config: PPOConfig,
    venv: Optional[envs_lib.VecEnv] = None,
    network: Optional[Network] = None,
    loss_fn: LossFn = ppo_loss_fn,
) -> PPO:
    """Build PPO for ``config``; ``venv``, ``network`` and ``loss_fn`` can be swapped."""
    validate(config)
    if config.network == "gru":
        from .recurrent import make_recurrent_ppo

        if loss_fn is not ppo_loss_fn:
            return make_recurrent_ppo(config, venv=venv, network=network, loss_fn=loss_fn)
        return make_recurrent_ppo(config, venv=venv, network=network)
    venv = venv if venv is not None else make_env(config)
    if network is None:
        if config.network == "cnn" and len(venv.spec.obs_shape) != 3:
            raise ConfigError(
                f"network='cnn' needs image observations [H, W, C]; {config.env_name} has shape "
                f"{venv.spec.obs_shape}; use network='mlp'"
            )
        network = make_network(venv.spec, config.hidden_sizes, config.activation,
                               torso="cnn" if config.network == "cnn" else "mlp",
                               shared_torso=config.shared_torso)
    static = config  # structural fields are read from here; numbers from the traced cfg

    def optimizer_for(cfg, lr=0.0):  # the rate is stateless: init does not need it
        return make_optimizer(cfg.max_grad_norm, cfg.adam_eps, lr)

    def init(rng: jax.Array, cfg: PPOConfig = config) -> RunnerState:
        rng, k_net, k_env = jax.random.split(rng, 3)
        params = network.init(k_net)
        opt_state = optimizer_for(cfg).init(params)
        obs, env_state = venv.reset(k_env)
        return RunnerState(TrainState(params, opt_state), env_state, obs, rng, jnp.asarray(0, jnp.int32))

    def step(runner: RunnerState, cfg: PPOConfig = config) -> tuple[RunnerState, dict]:
        rng, k_roll, k_upd = jax.random.split(runner.rng, 3)
        k_roll = rollout_key(k_roll, static.rollout_rng)
        params = runner.train.params

        def policy(key, obs):
            dist_params = network.actor(params, obs)
            action = network.dist.sample(key, dist_params)
            return action, network.dist.log_prob(dist_params, action)

        (env_state, obs), traj = collect(k_roll, policy, venv.step, runner.env_state, runner.obs,
                                         static.num_steps, static.rollout_unroll)
        values, next_values = critic_values(lambda o: network.critic(params, o), traj)
        adv, ret = gae(traj.reward, values, next_values, traj.terminated, traj.truncated,
                       cfg.gamma, cfg.gae_lambda)
        if static.adv_norm == "batch":
            adv = losses.normalize(adv)
        lr = learning_rates(cfg, params, runner.update)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])
        batch = jax.tree.map(flat, Batch(traj.obs, traj.action, traj.log_prob, values, adv, ret))

        train_state, metrics = update_epochs(
            k_upd, runner.train, batch,
            loss_fn=lambda p, mb: loss_fn(network, p, mb, cfg),
            optimizer=optimizer_for(cfg, lr),
            num_epochs=static.update_epochs, num_minibatches=static.num_minibatches,
            target_kl=cfg.target_kl,
        )
        metrics.update(episode_metrics(traj.info))
        metrics["explained_variance"] = losses.explained_variance(values, ret)
        metrics["lr"] = learning_rate(cfg, runner.update)
        if cfg.critic_lr is not None:
            metrics["critic_lr"] = learning_rate(cfg, runner.update) * (cfg.critic_lr / cfg.lr)
        metrics["env_steps"] = (runner.update + 1) * static.batch_size
        return RunnerState(train_state, env_state, obs, rng, runner.update + 1), metrics

    def run(runner: RunnerState, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        """``num_updates`` (static) steps as one ``lax.scan``; metrics are ``[num_updates]``."""
        n = static.num_updates if num_updates is None else num_updates
        return jax.lax.scan(lambda r, _: step(r, cfg), runner, None, length=n)

    def train(rng: jax.Array, cfg: PPOConfig = config):
        """Whole training from ``rng``: ``(final RunnerState, metrics {name: [num_updates]})``."""
        return run(init(rng, cfg), cfg)

    return PPO(config, venv, network, init, step, run, train)


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


def make_train(config: PPOConfig, **kwargs) -> Callable[..., tuple[RunnerState, dict]]:
    """Pure ``train(rng, config=config)``; wrap in ``jax.jit`` / ``jax.vmap`` as needed."""
    return make_ppo(config, **kwargs).train
