"""The PBT program: the training step and :func:`~purejaxppo.algorithms.pbt.exploit_explore`, one ``jit``.

A chunk of ``n`` updates is one ``lax.scan``; each iteration is the training step of every
member (``vmap`` over the runs axis, members' searched hyperparameters applied as traced
config leaves), then the score window is accumulated and, after every ``interval``-th update
(never the last one, so the final state is the one that was scored), ``lax.cond`` runs the
exploit/explore stage. The exploit point depends only on the update counter, so chunk sizes,
checkpoints and resumes do not change the numbers. One compile covers the whole run.

On several devices the members are split over a 1-D mesh (``shard_map``, as
``sharding.shard_runs``); the exploit ``all_gather``s the population, every device computes
the same decisions from the same key, and keeps its own slice. :class:`PBTProgram` has the
the run protocol (:class:`~purejaxppo.run.protocol.RunProgram`), so the chunk loop drives it
(checkpoints, resume, progress, sinks); its folders are the ``pbt`` kind's
(:mod:`purejaxppo.programs.pbt_kind`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.parallel.sharding import place_runs
from purejaxppo.programs.program import NAN_HINT
from purejaxppo.run import processes
from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.guards import tree_finite
from purejaxppo.algorithms.pbt import SearchSpace, exploit_explore, window_score
from purejaxppo.stages import device_rows
from purejaxppo.step.train import PPO, RunnerState, env_steps_after, make_ppo, strong_types

#: the name a PBT run's record gives its kind (registered by :mod:`purejaxppo.programs.pbt_kind`)
KIND = "pbt"
PBT_SALT = 0x9B7  # folded into seed key 0: the exploit/explore key, apart from every member's own keys


class PBTState(NamedTuple):
    runner: RunnerState  # [N, ...] every member's training state
    hparams: jax.Array  # [N, K] float32 searched values in effect (column k: space.names[k])
    ret_sum: jax.Array  # [N] sum of episode returns completed in this interval's score window
    ret_count: jax.Array  # [N] number of those episodes
    key: jax.Array  # [N, 2] identical rows: the exploit key, folded with the update number


@dataclass(frozen=True)
class PBTSettings:
    """``interval``: updates between exploits (0: the population trains without exploitation);
    ``window``: the last updates of each interval whose completed episodes give the score
    (default ``ceil(interval / 2)``)."""

    space: SearchSpace
    interval: int
    quantile: float = 0.25
    resample_prob: float = 0.1
    window: Optional[int] = None

    def __post_init__(self):
        if self.interval < 0:
            raise ConfigError(f"--pbt-interval={self.interval} must be >= 0 (0: no exploitation)")
        if not 0.0 < self.quantile <= 0.5:
            raise ConfigError(f"--pbt-quantile={self.quantile} must be in (0, 0.5]")
        if not 0.0 <= self.resample_prob <= 1.0:
            raise ConfigError(f"resample_prob={self.resample_prob} must be in [0, 1]")
        if self.window is not None and self.interval and not 1 <= self.window <= self.interval:
            raise ConfigError(f"window={self.window} must be in [1, interval={self.interval}]")

    @property
    def score_window(self) -> int:
        return self.window or max(1, math.ceil(self.interval / 2))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["space"] = self.space.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PBTSettings":
        return cls(**dict(d, space=SearchSpace.from_dict(d["space"])))


class PBTProgram(ChunkedProgram):
    """Compiled PBT over ``N`` members (``keys [N]``, ``configs [N]`` stacked, their searched
    fields the initial hyperparameters). Interface of :class:`~purejaxppo.programs.program.Program`;
    ``traces`` counts how often the chunk was traced (one per chunk length)."""

    split = "seeds"
    nan_by_design = ("pbt_score",)  # NaN between exploits

    def __init__(
        self,
        config: PPOConfig,
        settings: PBTSettings,
        *,
        num_devices: int = 1,
        ppo: Optional[PPO] = None,
        axis: str = "runs",
        num_seeds: int = 1,
    ):
        self.config, self.settings, self.num_devices, self.axis = config, settings, num_devices, axis
        self.num_seeds = num_seeds  # independent populations: run m*S + s is member m of population s
        self.shard = num_devices  # members are split over the devices
        self.ppo = ppo if ppo is not None else make_ppo(config)
        self.mesh = device_rows.device_mesh(num_devices, axis) if num_devices > 1 else None
        self.headline = ("episode_return", "return")
        self.nan_hint = NAN_HINT
        self.traces = 0
        self._init = jax.jit(self.init_state)
        super().__init__()

    def kind_for(self, members) -> str:
        return KIND

    # --- layout -------------------------------------------------------------------------
    def place(self, *args):
        sharding = None if self.mesh is None else NamedSharding(self.mesh, P(self.axis))
        return place_runs(args, self.num_devices, sharding, what="members")

    def init_state(self, keys: jax.Array, configs: PPOConfig) -> PBTState:
        """Pure: every member gets its own key (seed key folded with its index, so members
        start from different networks and envs), the population one exploit key."""
        n = keys.shape[0]
        member_keys = jax.vmap(jax.random.fold_in)(keys, jnp.arange(n))
        runner = jax.vmap(self.ppo.init)(member_keys, configs)
        hparams = jnp.stack(
            [jnp.asarray(getattr(configs, name), jnp.float32) for name in self.settings.space.names], axis=1
        )
        key = jnp.broadcast_to(jax.random.fold_in(keys[0], PBT_SALT), (n,) + keys.shape[1:])
        zeros = jnp.zeros((n,), jnp.float32)
        # strong dtypes, as ppo.init's (a checkpoint restores none as weak; a weak leaf would retrace)
        return strong_types(PBTState(runner, hparams, zeros, zeros, key))

    def init(self, keys, configs=None) -> PBTState:
        if configs is None:
            raise ConfigError("a PBT population needs its members' stacked configs")
        # whole on one device (every process computes the same population), then placed
        keys, configs = processes.current().gather((keys, configs))
        return self.place(self._init(keys, configs))[0]

    # --- the chunk ------------------------------------------------------------------------
    def _local_chunk(self, n: int, sharded: bool):
        ppo, s, num_updates = self.ppo, self.settings, self.config.num_updates
        space, interval, window, seeds = s.space, s.interval, s.score_window, self.num_seeds
        axis = self.axis if sharded else None

        def record(st, parents, score, non_finite, exploited):
            out = {
                "pbt_exploit": jnp.full(parents.shape, exploited, jnp.float32),
                "pbt_parent": parents.astype(jnp.float32),
                "pbt_score": score,
                "pbt_non_finite": non_finite.astype(jnp.float32),
            }
            out.update({f"pbt_{name}": st.hparams[:, k] for k, name in enumerate(space.names)})
            return out

        def own_index(n_loc):
            base = 0 if axis is None else device_rows.first_row(axis, n_loc)
            return (base + jnp.arange(n_loc)) // seeds  # the member each run is, in its population

        def exploit(st: PBTState, upd):
            finite = jax.vmap(lambda r: tree_finite((r.train, r.obs)))(st.runner)
            score = window_score(st.ret_sum, st.ret_count)
            runner, hparams, full_score, full_finite = device_rows.gather((st.runner, st.hparams, score, finite), axis)
            key = jax.random.fold_in(st.key[0], upd)
            if seeds == 1:
                runner, hparams, parents = exploit_explore(
                    key,
                    runner,
                    hparams,
                    full_score,
                    space,
                    quantile=s.quantile,
                    resample_prob=s.resample_prob,
                    finite=full_finite,
                )
            else:
                runner, hparams, parents = exploit_populations(
                    key, runner, hparams, full_score, full_finite, space, seeds, s.quantile, s.resample_prob
                )
            runner, hparams, parents = device_rows.mine((runner, hparams, parents), axis, self.num_devices)
            zeros = jnp.zeros_like(st.ret_sum)
            new = PBTState(runner, hparams, zeros, zeros, st.key)
            return new, record(new, parents, score, ~finite, 1.0)

        def skip(st: PBTState, upd):
            n_loc = st.hparams.shape[0]
            nan = jnp.full((n_loc,), jnp.nan, jnp.float32)
            return st, record(st, own_index(n_loc), nan, jnp.zeros((n_loc,), bool), 0.0)

        def chunk(state: PBTState, configs: PPOConfig):
            self.traces += 1  # runs once per trace

            def body(st: PBTState, _):
                runner, metrics = jax.vmap(ppo.step)(st.runner, space.apply(configs, st.hparams))
                upd = runner.update[0]  # the same for every member
                count = metrics["episodes"].astype(jnp.float32)
                in_window = (interval > 0) & (((upd - 1) % max(interval, 1)) >= max(interval, 1) - window)
                scored = in_window & (count > 0)
                st = st._replace(
                    runner=runner,
                    ret_sum=st.ret_sum + jnp.where(scored, metrics["episode_return"] * count, 0.0),
                    ret_count=st.ret_count + jnp.where(scored, count, 0.0),
                )
                if interval > 0:
                    st, info = jax.lax.cond((upd % interval == 0) & (upd < num_updates), exploit, skip, st, upd)
                else:
                    st, info = skip(st, upd)
                metrics.update(info)
                return st, metrics

            state, metrics = jax.lax.scan(body, state, None, length=n)
            metrics = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics)  # [N, n] as Program's
            return (state, metrics), jax.vmap(lambda r: tree_finite((r.train, r.obs)))(state.runner)

        return chunk

    def build_chunk(self, n: int):
        """``n`` updates of every member (with the exploits that fall in them): ``(state, configs)``
        -> ``((state, metrics {name: [N, n]}), finite [N])``."""
        if self.mesh is None:
            return jax.jit(self._local_chunk(n, False))
        spec = P(self.axis)
        return jax.jit(
            jax.shard_map(
                self._local_chunk(n, True),
                mesh=self.mesh,
                in_specs=(spec, spec),
                out_specs=((spec, spec), spec),
                check_vma=False,
            )
        )

    def check_finite(self, metrics: dict, finite, first_update: int, describe):
        """The loop's NaN stop. With exploitation a non-finite member is replaced at the next
        exploit (the lineage records it), so only a population with no finite member stops."""
        if self.settings.interval > 0 and np.asarray(finite).any():
            return None
        return super().check_finite(metrics, finite, first_update, describe)

    def counters(self, first_update: int, n: int) -> dict:
        return {"env_steps": env_steps_after(first_update, n, self.config.batch_size)}

    def training_state(self, state: PBTState) -> RunnerState:
        return state.runner

    def with_training_state(self, state: PBTState, runner: RunnerState) -> PBTState:
        return state._replace(runner=runner)


def exploit_populations(
    key, runners, hparams, scores, finite, space, num_seeds: int, quantile: float, resample_prob: float
):
    """:func:`~purejaxppo.algorithms.pbt.exploit_explore` in each of ``S = num_seeds`` independent
    populations at once: ``[R = N*S, ...]`` arrays, run ``m*S + s`` being member ``m`` of
    population ``s``; population ``s`` draws with ``fold_in(key, s)`` and its losers copy only its
    own winners. Returns ``(runners, hparams, parents [R])``, ``parents`` as member indices."""

    def by_population(x):  # [N*S, ...] -> [S, N, ...]
        return jnp.swapaxes(x.reshape((-1, num_seeds) + x.shape[1:]), 0, 1)

    def back(x):  # [S, N, ...] -> [N*S, ...]
        return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])

    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(num_seeds))
    one = lambda k, r, h, sc, f: exploit_explore(
        k,
        r,
        h,
        sc,
        space,
        quantile=quantile,  # noqa: E731
        resample_prob=resample_prob,
        finite=f,
    )
    out = jax.vmap(one)(
        keys, jax.tree.map(by_population, runners), by_population(hparams), by_population(scores), by_population(finite)
    )
    return jax.tree.map(back, out)
