"""PPO composed ONCE: ``make_ppo(config)`` -> pure ``init``, ``step``, ``run`` and ``train``.

One training iteration (the compiled step, ``runner_state -> (runner_state, metrics)``):

1. rollout: the agent acts in ``E`` envs for ``H`` steps, carrying its memory
   (``lax.scan``; :func:`~purejaxppo.stages.rollout.collect`);
2. targets: rewards scaled (optional), the agent's values of every state and true next
   state, GAE;
3. update: K epochs x M shuffled minibatches of the loss, Adam + global-norm clip.

The step is generic over the :class:`~purejaxppo.agents.agent.Agent` (feed-forward, GRU, ...)
and over devices: with ``axis_name`` it is the per-device program of data-parallel PPO
(``parallel.split_envs``): each device steps its slice of the envs, the batch is
gathered so every device holds the global one, advantages are normalised over the
global minibatch, gradients averaged (``pmean``) and running statistics merged.

Config: structural fields are bound when the step is built; ``cfg`` (an argument, not a
closure) supplies the numeric ones, traced, so ``jax.vmap(train)(keys, configs)`` trains
a population in one compile. A ``cfg`` whose structural fields differ is refused.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo import envs as envs_lib
from purejaxppo.stages import losses, normalize
from purejaxppo.agents.agent import Agent, feed_forward
from purejaxppo.config import ConfigError, PPOConfig, check_structure, validate
from purejaxppo.stages.gae import gae
from purejaxppo.agents.networks import Network, make_network
from purejaxppo.agents.recurrent import gru_agent
from purejaxppo.stages.rollout import Batch, collect
from purejaxppo.stages.update import TrainState, make_optimizer, update_epochs


class RunnerState(NamedTuple):
    train: TrainState  # params, optimizer state
    env_state: Any  # [E] env states (incl. wrapper statistics)
    obs: jax.Array  # [E, *obs_shape] current observations
    rng: jax.Array
    update: jax.Array  # int32 number of updates done
    carry: Any = ()  # [E, ...] agent memory after the last step (before any reset); () if none
    done: Any = None  # [E] bool: the last step ended an episode -> reset before acting on ``obs``
    reward_scale: Any = ()  # normalize.RewardScaleState with normalize_reward, else ()


class PPO(NamedTuple):
    config: PPOConfig
    venv: envs_lib.VecEnv
    agent: Agent
    init: Callable[..., RunnerState]
    step: Callable[..., tuple[RunnerState, dict]]
    run: Callable[..., tuple[RunnerState, dict]]
    train: Callable[..., tuple[RunnerState, dict]]


LossFn = Callable[[Agent, Any, Batch, PPOConfig], tuple[jax.Array, dict]]


def ppo_loss_fn(agent: Agent, params, mb: Batch, config: PPOConfig) -> tuple[jax.Array, dict]:
    """Default minibatch loss: clipped actor + (clipped) critic - entropy bonus.

    ``mb`` is in the agent's unit layout; its advantages are already normalised as
    ``config.adv_norm`` asks (the step does it, over the global minibatch)."""
    dist_params, values = agent.evaluate(params, mb)
    logp = agent.dist.log_prob(dist_params, mb.action)
    entropy = agent.dist.entropy(dist_params)
    return losses.ppo_loss(
        logp, entropy, values, mb.log_prob, mb.value, mb.advantage, mb.ret,
        clip_eps=config.clip_eps, vf_coef=config.vf_coef, ent_coef=config.ent_coef,
        vf_clip_eps=config.vf_clip_eps if config.clip_value else None,
    )


def learning_rate(config: PPOConfig, update: jax.Array) -> jax.Array:
    """Learning rate for update number ``update`` (0-based).

    * ``lr_end`` None: constant ``lr``, or (``anneal_lr``) linearly annealed towards 0,
      ``lr * (1 - update / num_updates)``;
    * ``lr_end`` a number: ``lr + (lr_end - lr) * min(1, s / lr_ramp_steps)`` with
      ``s = update * update_epochs * num_minibatches`` the optimizer steps taken before
      this update: a linear ramp (warm-up or decay) counted in optimizer steps like
      ``optax.linear_schedule``, then constant at ``lr_end``. It is evaluated once per
      update, so within one update the rate does not move.

    It is a function of the update index, not of the optimizer's step count, so
    minibatches skipped by target-KL early stopping do not shift the schedule."""
    if config.lr_end is not None:
        steps = update * (config.update_epochs * config.num_minibatches)
        frac = jnp.clip(steps / config.lr_ramp_steps, 0.0, 1.0)
        return jnp.asarray(config.lr + (config.lr_end - config.lr) * frac, jnp.float32)
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


def gae_terminated(terminated: jax.Array, truncated: jax.Array, bootstrap_truncated: bool) -> jax.Array:
    """The ``terminated`` flags GAE sees. With ``bootstrap_truncated`` (the default) a
    time-limit end bootstraps from the value of the true final state; without it, it is
    treated as terminal (value 0 after it), as code written for gymnax 0.x did, whose
    single ``done`` flag did not tell the two apart (gymnax-blines)."""
    return terminated if bootstrap_truncated else jnp.logical_or(terminated, truncated)


def rollout_key(key: jax.Array, impl: str) -> jax.Array:
    """The rollout's key in PRNG ``impl``. Threefry (JAX's default) costs about as much
    as CartPole's physics per env step on CPU; ``unsafe_rbg`` (XLA's RngBitGenerator) is
    ~4x cheaper, with weaker guarantees for split/fold_in, which env noise and action
    sampling do not need. Shuffling and initialisation always use threefry."""
    if impl == "threefry":
        return key
    return jax.random.key(jax.random.bits(key, (), jnp.uint32), impl=impl)


def per_env_impl(key: jax.Array) -> jax.Array:
    """``key`` as a threefry key (its first two words when it is another impl).

    Env noise is drawn per env from per-env keys inside ``vmap``. Under ``vmap``,
    ``unsafe_rbg``/``rbg`` draw a whole batch from the batch's FIRST key, so each env's
    noise would depend on how the envs are batched (split over devices or not); threefry
    keys are per-key exact, so a data-parallel rollout equals the single-device one."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and "threefry" not in str(jax.random.key_impl(key)):
        return jax.random.wrap_key_data(jax.random.key_data(key)[..., :2], impl="threefry2x32")
    return key


def make_env(config: PPOConfig, axis_name: Optional[str] = None, num_devices: int = 1) -> envs_lib.VecEnv:
    """The config's environment, vectorised, with its wrappers (innermost first).

    With ``axis_name`` (inside ``shard_map`` over ``num_devices``), this device's
    ``E/D`` envs: the per-env keys of a reset/step are the global split's slice
    ``[d*E/D, (d+1)*E/D)``, so sharded rollouts equal the single-device one."""
    e_glob, e_loc = config.num_envs, config.num_envs // num_devices

    def env_keys(key):
        keys = jax.random.split(per_env_impl(key), e_glob)
        if axis_name is None:
            return keys
        return jax.lax.dynamic_slice_in_dim(keys, jax.lax.axis_index(axis_name) * e_loc, e_loc)

    venv = envs_lib.make_vec_env(config.env_name, e_loc, config.max_episode_steps, env_keys=env_keys,
                                 reset_ratio=config.reset_ratio)
    if config.obs_keep is not None:
        venv = envs_lib.keep_observation(venv, config.obs_keep)
    venv = envs_lib.episode_statistics(venv)  # inside the normaliser: it records raw returns
    if config.normalize_obs:
        venv = normalize.normalize_observation(venv, frozen=config.freeze_obs_norm, axis_name=axis_name)
    return venv


def make_agent(config: PPOConfig, spec: envs_lib.EnvSpec, network: Optional[Network] = None) -> Agent:
    """The agent ``config.network`` names (``network=`` swaps in a feed-forward one)."""
    if network is not None:
        return feed_forward(network)
    if config.network == "gru":
        if spec.action_mask or spec.obs_structure is not None or spec.action_nvec:
            raise ConfigError(f"network='gru' takes plain array observations and Discrete/Box actions; "
                              f"{config.env_name} has action masks, a structured observation or MultiDiscrete "
                              "actions; use network='mlp' (or 'cnn')")
        return gru_agent(spec, config.gru_size, config.hidden_sizes, config.activation)
    if config.network == "cnn" and len(spec.obs_shape) != 3:
        raise ConfigError(f"network='cnn' needs image observations [H, W, C]; {config.env_name} has shape "
                          f"{spec.obs_shape}; use network='mlp'")
    return feed_forward(make_network(spec, config.hidden_sizes, config.activation,
                                     torso="cnn" if config.network == "cnn" else "mlp",
                                     shared_torso=config.shared_torso, action_std=config.action_std))


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
    :func:`purejaxppo.scale.parallel.split_envs`, which wraps it in ``shard_map``."""
    validate(config)
    static = config  # structural fields are read from here; numbers from the traced cfg
    venv = venv if venv is not None else make_env(config, axis_name, num_devices)
    agent = agent if agent is not None else make_agent(config, venv.spec, network)
    e_loc, e_glob = venv.num_envs, static.num_envs

    def optimizer_for(cfg, lr=0.0):  # the rate is stateless: init does not need it
        return make_optimizer(cfg.max_grad_norm, cfg.adam_eps, lr)

    def device_offset():
        return jax.lax.axis_index(axis_name) * e_loc

    def sample(key, dist_params):
        if axis_name is None:
            return agent.dist.sample(key, dist_params)
        # Sample over the GLOBAL batch with the shared key and keep our rows: rows are
        # independent, so they are the ones one device would draw for these envs.
        pad = lambda x: jax.lax.dynamic_update_slice_in_dim(jnp.zeros((e_glob,) + x.shape[1:], x.dtype), x,
                                                            device_offset(), 0)
        action = agent.dist.sample(key, jax.tree.map(pad, dist_params))
        return jax.lax.dynamic_slice_in_dim(action, device_offset(), e_loc, 0)

    def gather(tree, axis):  # every device gets the global arrays, in single-device env order
        if axis_name is None:
            return tree
        return jax.tree.map(lambda x: jax.lax.all_gather(x, axis_name, axis=axis, tiled=True), tree)

    def my_share(mb):  # this device's equal share of a (global) minibatch
        if axis_name is None:
            return mb
        share = jax.tree.leaves(mb)[0].shape[0] // num_devices
        start = jax.lax.axis_index(axis_name) * share
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, share, 0), mb)

    def init(rng: jax.Array, cfg: PPOConfig = config) -> RunnerState:
        check_structure(static, cfg)
        rng, k_net, k_env = jax.random.split(rng, 3)
        params = agent.init(k_net)
        obs, env_state = venv.reset(k_env)
        scale = normalize.init_reward_scale(e_loc) if static.normalize_reward else ()
        return strong_types(RunnerState(TrainState(params, optimizer_for(cfg).init(params)), env_state, obs, rng,
                                        jnp.asarray(0, jnp.int32), agent.initial_carry(e_loc),
                                        jnp.ones((e_loc,), bool), scale))

    def step(runner: RunnerState, cfg: PPOConfig = config) -> tuple[RunnerState, dict]:
        check_structure(static, cfg)
        rng, k_roll, k_upd = jax.random.split(runner.rng, 3)
        params = runner.train.params

        def policy(key, carry, obs, reset):
            carry, dist_params, record = agent.act(params, carry, obs, reset)
            action = sample(key, dist_params)
            return carry, action, agent.dist.log_prob(dist_params, action), record

        # 1. rollout
        (env_state, obs, carry, done), traj = collect(
            rollout_key(k_roll, static.rollout_rng), policy, venv.step, runner.env_state, runner.obs,
            static.num_steps, runner.carry, runner.done, static.rollout_unroll)
        # 2. targets
        reward, reward_scale = traj.reward, runner.reward_scale
        if static.normalize_reward:
            reward_scale, reward = normalize.scale_rewards(
                reward_scale, reward, jnp.logical_or(traj.terminated, traj.truncated), cfg.gamma,
                axis_name=axis_name)
        values, next_values = agent.values(params, traj)
        terminated = gae_terminated(traj.terminated, traj.truncated, static.bootstrap_truncated)
        adv, ret = gae(reward, values, next_values, terminated, traj.truncated, cfg.gamma, cfg.gae_lambda)
        batch, resets, info = gather((Batch(traj.obs, traj.action, traj.log_prob, values, adv, ret), traj.reset,
                                      traj.info), axis=1)
        if static.adv_norm == "batch":
            batch = batch._replace(advantage=losses.normalize(batch.advantage))

        # 3. update
        def minibatch_loss(p, mb):
            if static.adv_norm == "minibatch":  # over the whole (global) minibatch
                mb = mb._replace(advantage=losses.normalize(mb.advantage))
            return loss_fn(agent, p, my_share(mb), cfg)

        train_state, metrics = update_epochs(
            k_upd, runner.train, agent.units(batch, gather(runner.carry, axis=0), resets),
            loss_fn=minibatch_loss, optimizer=optimizer_for(cfg, learning_rates(cfg, params, runner.update)),
            num_epochs=static.update_epochs, num_minibatches=static.num_minibatches,
            target_kl=cfg.target_kl, axis_name=axis_name,
        )
        metrics.update(episode_metrics(info))
        metrics["explained_variance"] = losses.explained_variance(batch.value, batch.ret)
        metrics["lr"] = learning_rate(cfg, runner.update)
        if cfg.critic_lr is not None:
            metrics["critic_lr"] = metrics["lr"] * (cfg.critic_lr / cfg.lr)
        metrics["env_steps"] = (runner.update + 1) * static.batch_size
        return RunnerState(train_state, env_state, obs, rng, runner.update + 1, carry, done, reward_scale), metrics

    def run(runner: RunnerState, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        """``num_updates`` (static; default all) steps as one ``lax.scan``; metrics are ``[num_updates]``."""
        n = static.num_updates if num_updates is None else num_updates
        return jax.lax.scan(lambda r, _: step(r, cfg), runner, None, length=n)

    def train(rng: jax.Array, cfg: PPOConfig = config):
        """Whole training from ``rng``: ``(final RunnerState, metrics {name: [num_updates]})``."""
        return run(init(rng, cfg), cfg)

    return PPO(config, venv, agent, init, step, run, train)


def make_train(config: PPOConfig, **kwargs) -> Callable[..., tuple[RunnerState, dict]]:
    """Pure ``train(rng, config=config)``; wrap in ``jax.jit`` / ``jax.vmap`` as needed."""
    return make_ppo(config, **kwargs).train
