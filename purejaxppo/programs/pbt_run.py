"""PBT runs on the host: start, resume, summarise and load them (the chunk loop does the rest).

:func:`train_pbt` samples ``num_members`` members from the search space (seeded), builds the
:class:`~purejaxppo.programs.pbt_program.PBTProgram` and hands it to
:func:`~purejaxppo.programs.runs.train_chunked` with a :class:`~purejaxppo.run.lineage.LineageSink`, so a
PBT run has the run folder, checkpoints, exact resume, progress bar and NaN handling of any
run, plus ``lineage.csv``. Its ``summary.json`` adds ``best_member`` (the member with the best
final return), ``best_final_return``, ``best_schedule`` (the hyperparameters its weights were
trained with, following its ancestry) and ``exploits`` (member copies made).
"""

from __future__ import annotations

import json
import os
from typing import Optional

import jax
import numpy as np

from purejaxppo.run import kinds, processes
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import CheckpointError, restore_checkpoint
from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.run.lineage import LINEAGE, LineageSink, ancestry, exploit_count, read_lineage
from purejaxppo.programs.runs import RunResult, continue_chunked, train_chunked
from purejaxppo.algorithms.pbt import SearchSpace, sample_members
from purejaxppo.programs.pbt_program import KIND, PBT_SALT, PBTProgram, PBTSettings  # noqa: F401


def initial_members(space: SearchSpace, num_members: int, seed: int) -> list:
    """``[{name: value}]``: the seeded draw of the initial population (float32 values)."""
    if num_members < 2:
        raise ConfigError(f"--pbt={num_members}: a PBT population needs at least 2 members")
    key = jax.random.fold_in(jax.random.PRNGKey(seed), PBT_SALT + 1)
    return space.members(sample_members(key, space, num_members))


def train_pbt(
    config: PPOConfig,
    settings: PBTSettings,
    num_members: int,
    *,
    seed: int = 0,
    num_seeds: int = 1,
    run_dir: Optional[str] = None,
    num_devices: int = 1,
    program: Optional[PBTProgram] = None,
    loggers=(),
    **kwargs,
) -> RunResult:
    """Train a PBT population of ``num_members`` (``kwargs``: ``train_chunked``'s, e.g.
    ``chunk_updates``, ``on_chunk``, ``stop_after``, ``eval_every``, ``init_from``); see the
    module docstring. ``num_seeds = S > 1`` trains ``S`` independent populations with the same
    initial members (seed key ``s`` each; run ``m*S + s`` is member ``m`` of population ``s``),
    each exploiting only within itself: repetitions of one PBT experiment in one compile."""
    members = initial_members(settings.space, num_members, seed)
    prog = (
        program if program is not None else PBTProgram(config, settings, num_devices=num_devices, num_seeds=num_seeds)
    )
    if prog.num_seeds != num_seeds:
        raise ConfigError(f"program= was built for {prog.num_seeds} populations, not num_seeds={num_seeds}")
    sinks = list(loggers)
    if run_dir and processes.current().writer:  # several processes: process 0 writes the folder
        os.makedirs(run_dir, exist_ok=True)
        sinks.append(LineageSink(os.path.join(run_dir, LINEAGE), settings.space.names, members, num_seeds=num_seeds))
    res = train_chunked(
        config, seed=seed, num_seeds=num_seeds, members=members, run_dir=run_dir, program=prog, loggers=sinks, **kwargs
    )
    return _finish(res, run_dir)


def resume_pbt(run_dir: str, record=None, loggers=(), **kwargs) -> RunResult:
    """Continue the PBT run in ``run_dir`` from its latest checkpoint (as :func:`resume_run`);
    ``record``: its run record when read already."""
    group = processes.current()
    record = record if record is not None else group.share(lambda: rf.load_record(run_dir))
    kind, pbt = kinds.kind_named(record.kind), kinds.kind_named(KIND)  # the registry knows every name of a kind
    if kind is not pbt:
        raise CheckpointError(
            f"{run_dir!r} is not a {pbt.what} run but a {kind.what} run; continue it with "
            f"{kinds.resume_hint({'kind': record.kind}, run_dir)}"
        )
    sinks = (
        [
            LineageSink(
                os.path.join(run_dir, LINEAGE),
                record.settings.space.names,
                record.members,
                append=True,
                num_seeds=record.num_seeds,
            )
        ]
        if group.writer
        else []
    )
    return _finish(continue_chunked(run_dir, record, loggers=list(loggers) + sinks, **kwargs), run_dir)


def best_member(final_return) -> int:
    """Index of the best finite final return (``[N]``)."""
    fr = np.asarray(final_return, np.float64)
    if not np.isfinite(fr).any():
        raise ConfigError("no member has a finite final return")
    return int(np.nanargmax(np.where(np.isfinite(fr), fr, np.nan)))


def _finish(res: RunResult, run_dir: Optional[str]) -> RunResult:
    """Add the best member, its schedule and the exploit count to the result (and summary.json)."""
    if not np.isfinite(np.asarray(res.final_return, np.float64)).any():
        return res
    seeds = len(res.final_return) // len(res.members or res.final_return)
    best_run = best_member(res.final_return)  # run m*S + s: member m of population s
    best, seed = best_run // seeds, best_run % seeds
    res.extra.update(best_member=best, best_final_return=float(res.final_return[best_run]))
    if seeds > 1:
        res.extra["best_seed"] = seed
    if not processes.current().writer:  # the folder is process 0's
        return res
    if run_dir and os.path.exists(os.path.join(run_dir, LINEAGE)):
        names, table = read_lineage(run_dir, seed)
        copies = sum(exploit_count(read_lineage(run_dir, s)[1]) for s in range(seeds))
        res.extra.update(best_schedule=ancestry(names, table, best, res.updates_done), exploits=copies)
    path = os.path.join(run_dir, rf.SUMMARY) if run_dir else None
    if path and res.finished and os.path.exists(path):
        with open(path) as f:
            summary = json.load(f)
        rf.write_summary(run_dir, dict(summary, **res.extra))
    return res


def load_pbt_run(run_dir: str, record, checkpoint: Optional[str] = None):
    """``(runner [N, ...], ppo, checkpoint, update)`` of a PBT run folder (as ``run_folder.load_run``)."""
    path = rf.checkpoint_to_load(run_dir, record, checkpoint)
    prog = PBTProgram(record.config, record.settings, num_seeds=record.num_seeds)
    keys, configs = rf.run_inputs(record.config, record.seed, record.num_seeds, record.members)
    state, meta = restore_checkpoint(path, jax.eval_shape(prog.init_state, keys, configs))
    return state.runner, prog.ppo, path, int(meta["update"])


def read_summary(run_dir: str) -> dict:
    path = os.path.join(run_dir, rf.SUMMARY)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)
