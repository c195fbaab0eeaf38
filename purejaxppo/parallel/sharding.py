"""Spreading PPO over devices. This module holds no training step: it shards the one
step of :mod:`purejaxppo.step.train` in two ways.

* **Runs** (:func:`shard_runs`): independent runs (seeds, hyperparameter members: one
  leading "runs" axis) are split over devices with ``shard_map`` over a 1-D mesh. Runs
  never interact, so there is no communication and every device gives exactly the
  numbers it would give alone.
* **Envs** (:func:`split_envs`): ONE agent, its ``E`` environments split over ``D``
  devices (``E/D`` each). It is ``make_ppo(config, axis_name=...)`` wrapped in
  ``shard_map``: the step gathers the batch, normalises advantages over the global
  minibatch, averages gradients and merges running statistics over the axis, so the
  numbers equal one device with the same global batch (to float summation order).

On a CPU host, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set before JAX is
imported) exposes ``N`` devices that run in parallel threads. Across hosts, call
``jax.distributed.initialize()`` first: the mesh then spans every host's devices.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from purejaxppo.agents.registry import minibatch_units, validate_config
from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.stages.normalize import RunningStats
from purejaxppo.step.train import PPO, RunnerState, make_ppo
from purejaxppo.stages.device_rows import device_mesh


# --- runs over devices ----------------------------------------------------------------------
def over_runs(fn: Callable) -> Callable:
    """``fn`` over a leading runs axis: ``jax.vmap(fn)``, except that ONE run (a leading axis
    of 1, known at trace time) calls ``fn`` unbatched and adds the axis back. The numbers are
    the same as vmap's (to float summation order); the program is the plain single-run one,
    which XLA:CPU runs about 5-7% faster than its batched-by-1 form (benchmarks/cli_overhead.py)."""
    batched = jax.vmap(fn)

    def run(*args):
        sizes = {x.shape[0] for x in jax.tree.leaves(args) if getattr(x, "ndim", 0)}
        if sizes != {1}:
            return batched(*args)
        out = fn(*jax.tree.map(lambda x: x[0] if getattr(x, "ndim", 0) else x, args))
        return jax.tree.map(lambda x: jnp.expand_dims(x, 0), out)

    return run


def place_runs(args: tuple, num_devices: int, sharding: Optional[NamedSharding] = None, what: str = "runs") -> tuple:
    """``args`` laid out by ``sharding`` (None: one device, returned as they are), after checking
    that every array among them has the same leading axis (``what`` it counts: runs, PBT
    members) and that it splits evenly over ``num_devices``; else :class:`ConfigError` saying
    what to change."""
    sizes = {x.shape[0] for x in jax.tree.leaves(args) if hasattr(x, "shape") and x.ndim}
    if len(sizes) > 1:
        raise ConfigError(f"every argument needs the same leading ({what}) axis; got sizes {sorted(sizes)}")
    if sizes and next(iter(sizes)) % num_devices:
        n = next(iter(sizes))
        raise ConfigError(
            f"{n} {what} cannot be split evenly over {num_devices} devices; use a multiple of {num_devices} "
            f"{what} (e.g. {((n + num_devices - 1) // num_devices) * num_devices}) or a device count dividing {n}"
        )
    return args if sharding is None else jax.device_put(args, sharding)


class ShardedRuns:
    """``fn`` vmapped over a leading runs axis ``R`` of every argument and jitted; with
    ``num_devices > 1`` the runs are split over a mesh (``R`` a multiple of it).

    ``place(*args)`` lays inputs out over the mesh; ``lower(*args)`` is jit's (for
    ahead-of-time compilation and timing: ``compiled = runs.lower(*a).compile();
    compiled(*runs.place(*a))``); calling it does both. Outputs stay sharded."""

    def __init__(self, fn: Callable, num_devices: int = 1, axis: str = "runs"):
        self.num_devices = num_devices
        if num_devices == 1:  # jit(vmap(fn)) (see over_runs): no mesh, nothing to place
            self.mesh, self.sharding = None, None
            self.jitted = jax.jit(over_runs(fn))
        else:
            self.mesh = device_mesh(num_devices, axis)
            self.sharding = NamedSharding(self.mesh, P(axis))
            # explicit per-device programs with no communication (letting the partitioner shard a
            # plain jit(vmap(fn)) inserted collectives for the shuffles and hung on host devices)
            self.jitted = jax.jit(
                jax.shard_map(over_runs(fn), mesh=self.mesh, in_specs=P(axis), out_specs=P(axis), check_vma=False)
            )

    def place(self, *args):
        return place_runs(args, self.num_devices, self.sharding)

    def lower(self, *args):
        return self.jitted.lower(*self.place(*args))

    def __call__(self, *args):
        return self.jitted(*self.place(*args))


def shard_runs(fn: Callable, num_devices: int = 1, axis: str = "runs") -> ShardedRuns:
    """``f(*args [R, ...]) -> outputs [R, ...]``: ``R`` independent runs of ``fn`` (e.g.
    ``ppo.train(key, cfg)`` over keys ``[R]`` and a config stacked to ``[R]``), split over
    ``num_devices``; the same numbers as ``jax.jit(jax.vmap(fn))``. See :class:`ShardedRuns`."""
    return ShardedRuns(fn, num_devices, axis)


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
    return jax.tree.map(lambda *xs: jnp.asarray(np.asarray(xs, np.float32)), *configs)


# --- one agent, envs over devices -------------------------------------------------------------
def _check_split_envs(config: PPOConfig, num_devices: int):
    validate_config(config)
    if num_devices < 1:
        raise ConfigError(f"num_devices={num_devices} must be >= 1")
    if config.num_envs % num_devices:
        raise ConfigError(
            f"num_envs={config.num_envs} cannot be split over {num_devices} devices; use a multiple of "
            f"{num_devices} envs or a device count dividing {config.num_envs}"
        )
    units, what = minibatch_units(config)  # env sequences for a recurrent agent, transitions otherwise
    if units % num_devices:
        raise ConfigError(
            f"a minibatch of {units} {what} cannot be split over {num_devices} devices; choose num_envs and "
            f"num_minibatches so that it is a multiple of {num_devices}"
        )


def runner_specs(runner: RunnerState, axis: str) -> RunnerState:
    """Partition specs of a data-parallel runner: per-env leaves (env states, observations,
    carries, done flags, discounted returns) split over ``axis``; params, optimizer state,
    PRNG key, update counter and running statistics (merged over devices, so equal on
    every device) replicated."""
    per_env = lambda tree: jax.tree.map(lambda _: P(axis), tree)
    replicate_stats = lambda tree: jax.tree.map(
        lambda x: jax.tree.map(lambda _: P(), x) if isinstance(x, RunningStats) else P(axis),
        tree,
        is_leaf=lambda x: isinstance(x, RunningStats),
    )
    return RunnerState(
        jax.tree.map(lambda _: P(), runner.train),
        replicate_stats(runner.env_state),
        P(axis),
        P(),
        P(),
        per_env(runner.carry),
        P(axis),
        replicate_stats(runner.reward_scale),
    )


def split_envs(config: PPOConfig, num_devices: Optional[int] = None, *, axis: str = "envs", **make_ppo_kwargs) -> PPO:
    """Data-parallel PPO of ONE agent whose ``num_envs`` are split over ``num_devices``.

    Returns the :class:`~purejaxppo.step.train.PPO` interface (``init``, ``step``, ``run``,
    ``train``; jit them as usual, and ``jax.vmap`` them over seeds or configs). Host-side
    runner state is GLOBAL: per-env leaves are sharded over the env axis, the rest
    replicated (:func:`runner_specs`). Works with every agent and option (GRU, observation
    normalisation, reward scaling, ``critic_lr``, target KL, any ``rollout_rng``).
    ``loss_fn`` must be a mean over its minibatch (as :func:`~purejaxppo.step.train.ppo_loss_fn`).
    ``ppo.venv`` is one device's env (``num_envs = E/D``)."""
    n_dev = len(jax.devices()) if num_devices is None else num_devices
    _check_split_envs(config, n_dev)
    mesh = device_mesh(n_dev, axis)
    local = make_ppo(config, axis_name=axis, num_devices=n_dev, **make_ppo_kwargs)
    smap = lambda f, i, o: jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False)
    # partition specs follow the runner's pytree structure: found once, abstractly
    shape = jax.eval_shape(smap(local.init, (P(), P()), P()), jax.random.PRNGKey(0), config)
    spec = runner_specs(shape, axis)

    def init(rng, cfg: PPOConfig = config) -> RunnerState:
        return smap(local.init, (P(), P()), spec)(rng, cfg)

    def step(runner, cfg: PPOConfig = config):
        return smap(local.step, (spec, P()), (spec, P()))(runner, cfg)

    def run(runner, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        return smap(lambda r, c: local.run(r, c, num_updates), (spec, P()), (spec, P()))(runner, cfg)

    def train(rng, cfg: PPOConfig = config):
        return smap(local.train, (P(), P()), (spec, P()))(rng, cfg)

    return PPO(config, local.venv, local.agent, init, step, run, train)
