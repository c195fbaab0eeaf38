"""Spreading PPO over devices: populations (seeds x hyperparameters) and data parallelism.

Two independent ways to use several devices:

* **Population parallel** (:func:`seed_parallel_train`, :func:`population_parallel_train`):
  independent runs (seeds, hyperparameter members) are split over devices with
  ``shard_map`` over a 1-D :class:`~jax.sharding.Mesh`. Runs never interact, so there is
  no communication at all and every device gives exactly the numbers it would give alone.
* **Data parallel** (:func:`make_data_parallel_ppo`): ONE agent, its ``E`` environments
  split over ``D`` devices (``E/D`` each), gradients averaged with ``pmean``. It returns
  the same :class:`~purejaxppo.train.PPO` interface as :func:`~purejaxppo.train.make_ppo`
  and, for the built-in gymnax environments, the same numbers (to float tolerance) as one
  device with the same global batch.

On a CPU host, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set before JAX is
imported) exposes ``N`` devices that run in parallel threads. Across hosts, call
``jax.distributed.initialize()`` first: the mesh then spans every host's devices (see
the README, "Multi-device and multi-host").
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import envs as envs_lib
from . import losses
from .config import ConfigError, PPOConfig, check_population_gammas, validate
from .gae import gae
from .networks import make_network
from .rollout import collect, critic_values
from .train import (PPO, Batch, LossFn, RunnerState, episode_metrics, learning_rate, ppo_loss_fn)
from .update import TrainState, make_optimizer, update_epochs


# --- meshes -------------------------------------------------------------------------------
def seed_mesh(num_devices: Optional[int] = None, axis: str = "seeds") -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices (all of them if None)."""
    devices = jax.devices()
    if num_devices is not None:
        if num_devices < 1:
            raise ValueError(f"num_devices={num_devices} must be >= 1")
        if num_devices > len(devices):
            raise ValueError(
                f"asked for {num_devices} devices but JAX sees {len(devices)}; on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before importing jax"
            )
        devices = devices[:num_devices]
    return Mesh(np.array(devices), (axis,))


# --- population parallel ------------------------------------------------------------------
def _check_leading(args, n_dev: int, what: str):
    sizes = {x.shape[0] for x in jax.tree.leaves(args) if hasattr(x, "shape") and x.ndim}
    if len(sizes) > 1:
        raise ValueError(f"all {what} arguments need the same leading (run) axis; got sizes {sorted(sizes)}")
    if sizes and next(iter(sizes)) % n_dev:
        n = next(iter(sizes))
        raise ValueError(
            f"{n} runs cannot be split evenly over {n_dev} devices; use a multiple of {n_dev} runs "
            f"(e.g. {((n + n_dev - 1) // n_dev) * n_dev}) or num_devices dividing {n}"
        )


def seed_parallel_train(train: Callable, num_devices: Optional[int] = None, axis: str = "seeds") -> Callable:
    """``jit(shard_map(vmap(train)))``: the leading axis of every argument (keys, and
    optionally a stacked config) is split over ``num_devices``; it must be a multiple of it.

    Returns ``f(*args)`` with the same outputs as ``jax.jit(jax.vmap(train))(*args)``.
    """
    mesh = seed_mesh(num_devices, axis)
    sharded = jax.jit(jax.shard_map(jax.vmap(train), mesh=mesh, in_specs=P(axis), out_specs=P(axis),
                                    check_vma=False))
    n_dev = mesh.devices.size

    class _Checked:
        # keeps jit's .lower()/.compile() (driver.py and bench.py use them) while giving a
        # clear error for a run count that does not split evenly
        def __call__(self, *args):
            _check_leading(args, n_dev, "sharded")
            return sharded(*args)

        def lower(self, *args):
            _check_leading(args, n_dev, "sharded")
            return sharded.lower(*args)

    return _Checked()


def stack_configs(configs: Sequence[PPOConfig]) -> PPOConfig:
    """Stack a list of configs into ONE config whose numeric leaves are ``[M]`` arrays.

    All members must share their structural (static) fields: those decide shapes and
    code, so a member that differs in one needs its own compile (its own call)."""
    configs = list(configs)
    if not configs:
        raise ValueError("stack_configs needs at least one config")
    ref = jax.tree.structure(configs[0])
    for i, c in enumerate(configs[1:], 1):
        if jax.tree.structure(c) != ref:
            diff = [f for f in PPOConfig.static_fields() if getattr(c, f) != getattr(configs[0], f)]
            raise ConfigError(
                f"config {i} differs from config 0 in structural field(s) {diff}; a population shares "
                "structural fields (they change shapes/code); vary only numeric ones (lr, clip_eps, ...) "
                "or train the variants in separate calls"
            )
    for f in PPOConfig.numeric_fields():
        kinds = {getattr(c, f) is None for c in configs}
        if len(kinds) > 1:
            raise ConfigError(f"{f} is None in some configs and a number in others; set it in all or none")
    check_population_gammas(configs[0], [c.gamma for c in configs])
    return jax.tree.map(lambda *xs: jnp.asarray(np.asarray(xs, np.float32)), *configs)


def population_keys_configs(configs: Sequence[PPOConfig], num_seeds: int, seed: int = 0):
    """The flat population ``members x seeds`` as ``(keys [M*S], stacked config [M*S])``.

    Run ``m*S + s`` is member ``m`` with seed key ``s``; every member sees the SAME ``S``
    seed keys (common random numbers make members comparable). Reshape outputs to
    ``[M, S, ...]``."""
    m = len(configs)
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(seed), num_seeds), (m, 1))
    stacked = stack_configs([c for c in configs for _ in range(num_seeds)])
    return keys, stacked


def population_parallel_train(train: Callable, num_devices: Optional[int] = None, axis: str = "population") -> Callable:
    """``f(keys [R], configs [R]) -> train outputs [R, ...]``: R independent runs (e.g.
    from :func:`population_keys_configs`) sharded over ``num_devices`` devices.

    Inputs are placed with ``NamedSharding(mesh, P(axis))`` (run axis split over the
    mesh) and each device runs ``vmap(train)`` on its ``R/D`` runs inside ``shard_map``:
    explicit per-device programs with no communication at all (letting the partitioner
    shard a plain ``jit(vmap(train))`` instead inserted collectives for the shuffles and
    hung on forced host devices). Outputs stay sharded the same way. Numbers equal
    ``jax.jit(jax.vmap(train))(keys, configs)``. ``R`` must be a multiple of the device count.
    """
    mesh = seed_mesh(num_devices, axis)
    n_dev = mesh.devices.size
    spec = NamedSharding(mesh, P(axis))
    fn = jax.jit(jax.shard_map(jax.vmap(train), mesh=mesh, in_specs=P(axis), out_specs=P(axis), check_vma=False))

    class _Run:
        # ``place``/``lower`` let a caller compile ahead of time and time it (the CLI sweep:
        # ``compiled = run.lower(*inputs).compile(); compiled(*run.place(*inputs))``); a
        # compiled program only accepts inputs already laid out over the mesh
        def place(self, keys, configs):
            _check_leading((keys, configs), n_dev, "population")
            return jax.device_put((keys, configs), spec)

        def lower(self, keys, configs):
            return fn.lower(*self.place(keys, configs))

        def __call__(self, keys, configs):
            return fn(*self.place(keys, configs))

    return _Run()


# --- data parallel ------------------------------------------------------------------------
def sliced_vec_env(config: PPOConfig, num_devices: int, axis: str) -> envs_lib.VecEnv:
    """The config's gymnax envs, ``E/D`` per device, keyed exactly like ONE device's ``E``.

    ``envs.make_vec_env`` splits each step key into ``E`` per-env keys; here device ``d``
    (``lax.axis_index(axis)``, so call it inside ``shard_map``) splits into the same ``E``
    keys and keeps its slice ``[d*E/D, (d+1)*E/D)``. That is what makes a data-parallel
    rollout equal the single-device one. Wrappers as in ``train.make_env``.
    """
    e_glob = config.num_envs
    e_loc = e_glob // num_devices

    def my_keys(key):
        start = jax.lax.axis_index(axis) * e_loc
        return jax.lax.dynamic_slice_in_dim(jax.random.split(key, e_glob), start, e_loc)

    venv = envs_lib.make_vec_env(config.env_name, e_loc, config.max_episode_steps, env_keys=my_keys)
    if config.obs_keep is not None:
        venv = envs_lib.keep_observation(venv, config.obs_keep)
    return envs_lib.episode_statistics(venv)


def _check_data_parallel(config: PPOConfig, num_devices: int):
    validate(config)
    if num_devices < 1:
        raise ConfigError(f"num_devices={num_devices} must be >= 1")
    if config.num_envs % num_devices:
        raise ConfigError(
            f"num_envs={config.num_envs} cannot be split over {num_devices} devices; use a multiple of "
            f"{num_devices} envs or a device count dividing {config.num_envs}")
    if config.minibatch_size % num_devices:
        raise ConfigError(
            f"minibatch size {config.minibatch_size} (num_envs*num_steps/num_minibatches) cannot be split "
            f"over {num_devices} devices; choose num_minibatches so that it is a multiple of {num_devices}")
    if config.network == "gru":
        raise ConfigError("network='gru' is not supported by data-parallel training yet; use network='mlp'/'cnn' "
                          "or population/seed parallelism")
    if config.normalize_obs or config.normalize_reward:
        raise ConfigError("normalize_obs/normalize_reward are not supported by data-parallel training (the running "
                          "statistics would differ per device); set them False or use seed parallelism")


def make_data_parallel_ppo(config: PPOConfig, num_devices: Optional[int] = None, *, network=None,
                           loss_fn: LossFn = ppo_loss_fn, axis: str = "data") -> PPO:
    """Data-parallel PPO of ONE agent over ``num_devices`` devices (all if None).

    Returns the :class:`~purejaxppo.train.PPO` interface (``init``, ``step``, ``run``,
    ``train``; wrap in ``jax.jit`` as usual; vmap over seeds is not supported here: use
    population parallelism for that). Host-visible runner state is GLOBAL: ``obs [E, ...]``
    and the env state are sharded over the env axis, params/optimizer state/RNG replicated.

    Per update, device ``d``:

    1. steps envs ``[d*E/D, (d+1)*E/D)`` for ``H`` steps (same per-env keys as one device:
       :func:`sliced_vec_env`; actions are sampled with the global key over the global
       batch shape and sliced, so they match too), then computes values and GAE for its
       envs (GAE is per env);
    2. ``all_gather``s the batch so every device holds the global ``[H*E]`` batch in the
       single-device order, and draws the same permutation (same key) each epoch;
    3. for every minibatch, normalises advantages over the FULL minibatch, computes the
       loss on its ``1/D`` share, and ``update_epochs(axis_name=...)`` averages gradients
       and metrics with ``pmean`` before the optimizer step.

    Hence the result equals ``make_ppo(config)`` run on one device with the same key, up
    to float summation order. ``loss_fn`` must be a mean over the minibatch (as
    :func:`~purejaxppo.train.ppo_loss_fn`) and is called with ``adv_norm="none"``
    (advantages arrive already normalised over the full minibatch).
    """
    n_dev = len(jax.devices()) if num_devices is None else num_devices
    _check_data_parallel(config, n_dev)
    mesh = seed_mesh(n_dev, axis)
    static = config
    venv = sliced_vec_env(config, n_dev, axis)
    e_loc = venv.num_envs
    if network is None:
        if config.network == "cnn" and len(venv.spec.obs_shape) != 3:
            raise ConfigError(f"network='cnn' needs image observations [H, W, C]; {config.env_name} has shape "
                              f"{venv.spec.obs_shape}; use network='mlp'")
        network = make_network(venv.spec, config.hidden_sizes, config.activation,
                               torso="cnn" if config.network == "cnn" else "mlp",
                               shared_torso=config.shared_torso)
    share = static.minibatch_size // n_dev

    def optimizer_for(cfg, lr=0.0):
        return make_optimizer(cfg.max_grad_norm, cfg.adam_eps, lr)

    def offset():
        return jax.lax.axis_index(axis) * e_loc

    def local_init(rng, cfg):
        # the same three-way split as train.make_ppo's init, so params and env keys match
        rng, k_net, k_env = jax.random.split(rng, 3)
        params = network.init(k_net)
        obs, env_state = venv.reset(k_env)
        return RunnerState(TrainState(params, optimizer_for(cfg).init(params)), env_state, obs, rng,
                           jnp.asarray(0, jnp.int32))

    def gather(x, axis_=1):
        return jax.lax.all_gather(x, axis, axis=axis_, tiled=True)

    def local_step(runner, cfg):
        rng, k_roll, k_upd = jax.random.split(runner.rng, 3)
        params = runner.train.params

        def policy(key, obs):
            dist_params = network.actor(params, obs)
            # Sample over the GLOBAL batch shape with the shared key and keep our rows: rows
            # of categorical/Gaussian samples are independent, so our rows are the ones a
            # single device would draw for these envs (only our rows carry real params).
            pad = lambda x: jax.lax.dynamic_update_slice_in_dim(
                jnp.zeros((static.num_envs,) + x.shape[1:], x.dtype), x, offset(), 0)
            action = network.dist.sample(key, jax.tree.map(pad, dist_params))
            action = jax.lax.dynamic_slice_in_dim(action, offset(), e_loc, 0)
            return action, network.dist.log_prob(dist_params, action)

        (env_state, obs), traj = collect(k_roll, policy, venv.step, runner.env_state, runner.obs,
                                         static.num_steps, static.rollout_unroll)
        values, next_values = critic_values(lambda o: network.critic(params, o), traj)
        adv, ret = gae(traj.reward, values, next_values, traj.terminated, traj.truncated, cfg.gamma, cfg.gae_lambda)
        # global [H, E] arrays, env order = device order = single-device order
        batch = jax.tree.map(gather, Batch(traj.obs, traj.action, traj.log_prob, values, adv, ret))
        info = jax.tree.map(gather, traj.info)
        if static.adv_norm == "batch":
            batch = batch._replace(advantage=losses.normalize(batch.advantage))
        flat = lambda x: x.reshape((-1,) + x.shape[2:])
        batch = jax.tree.map(flat, batch)
        lr = learning_rate(cfg, runner.update)
        cfg_share = cfg.replace(adv_norm="none")

        def share_loss(p, mb):
            # mb is the FULL minibatch (same on every device); normalise over all of it,
            # then this device scores its equal share; pmean of the share gradients is
            # the full-minibatch gradient because the loss is a mean.
            if static.adv_norm == "minibatch":
                mb = mb._replace(advantage=losses.normalize(mb.advantage))
            start = jax.lax.axis_index(axis) * share
            mine = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, share, 0), mb)
            return loss_fn(network, p, mine, cfg_share)

        train_state, metrics = update_epochs(
            k_upd, runner.train, batch, loss_fn=share_loss, optimizer=optimizer_for(cfg, lr),
            num_epochs=static.update_epochs, num_minibatches=static.num_minibatches,
            target_kl=cfg.target_kl, axis_name=axis)
        metrics.update(episode_metrics(info))
        metrics["explained_variance"] = losses.explained_variance(batch.value, batch.ret)
        metrics["lr"] = lr
        metrics["env_steps"] = (runner.update + 1) * static.batch_size
        return RunnerState(train_state, env_state, obs, rng, runner.update + 1), metrics

    runner_spec = RunnerState(P(), P(axis), P(axis), P(), P())
    smap = lambda f, i, o: jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False)

    def init(rng, cfg: PPOConfig = config) -> RunnerState:
        return smap(local_init, (P(), P()), runner_spec)(rng, cfg)

    def step(runner, cfg: PPOConfig = config):
        return smap(local_step, (runner_spec, P()), (runner_spec, P()))(runner, cfg)

    def run(runner, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        n = static.num_updates if num_updates is None else num_updates
        local_run = lambda r, c: jax.lax.scan(lambda r_, _: local_step(r_, c), r, None, length=n)
        return smap(local_run, (runner_spec, P()), (runner_spec, P()))(runner, cfg)

    def train(rng, cfg: PPOConfig = config):
        local_train = lambda k, c: jax.lax.scan(lambda r_, _: local_step(r_, c), local_init(k, c), None,
                                                length=static.num_updates)
        return smap(local_train, (P(), P()), (runner_spec, P()))(rng, cfg)

    # venv in the returned PPO is the per-device env (num_envs = E/D); spec is the same
    return PPO(config, venv, network, init, step, run, train)


def make_parallel_ppo(config: PPOConfig, num_devices: int = 1, mode: str = "data", **kwargs) -> PPO:
    """Choose by argument: ``mode="data"`` -> :func:`make_data_parallel_ppo` (one agent over
    ``num_devices``); ``num_devices == 1`` -> plain ``make_ppo``. For seeds/populations keep
    ``make_ppo`` and wrap its ``train`` with :func:`population_parallel_train`."""
    if mode != "data":
        raise ValueError(f"mode={mode!r}: only 'data' builds a PPO; for populations wrap make_ppo(config).train "
                         "with population_parallel_train(train, num_devices)")
    if num_devices == 1:
        from .train import make_ppo

        return make_ppo(config, network=kwargs.get("network"), loss_fn=kwargs.get("loss_fn", ppo_loss_fn))
    return make_data_parallel_ppo(config, num_devices, **kwargs)
