"""Plain runs and sweeps: the front door of the chunk loop (``train_chunked``, ``resume_run``).

``R = M * S`` runs (members x seeds; one config is ``M = 1``) share one leading axis: the
per-run ``init`` and ``run`` are vmapped over it and sharded over devices
(``parallel.shard_runs``), or each run's envs are split over devices (``split="envs"``,
``parallel.split_envs``). :func:`train_chunked` builds the run's ``config.json`` record, its
inputs, its program (:class:`~purejaxppo.programs.program.Program` unless one is given:
another kind, such as PBT, passes its own) and its evaluator, then hands them to
:func:`purejaxppo.run.loop.run_chunks`. The numbers equal one ``train`` call up to XLA's
rounding of a differently compiled program: the same step, applied the same number of times
to the same state.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.programs.eval_program import EvalProgram
from purejaxppo.programs.program import Program
from purejaxppo.run import processes
from purejaxppo.run import run_folder as rf
from purejaxppo.run import kinds, warm_start
from purejaxppo.run.loop import RunResult, chunk_size, run_chunks
from purejaxppo.run.protocol import RunProgram
from purejaxppo.run.record import CHECKPOINT_EVERY, CHUNK_UPDATES, EVAL_EPISODES, RunRecord
from purejaxppo.step.train import PPO


def train_chunked(
    config: PPOConfig,
    *,
    seed: int = 0,
    num_seeds: int = 1,
    members: Optional[Sequence[dict]] = None,
    run_dir: Optional[str] = None,
    chunk_updates: int = CHUNK_UPDATES,
    num_devices: int = 1,
    split: str = "seeds",
    on_chunk: Optional[Callable[[dict], None]] = None,
    ppo: Optional[PPO] = None,
    program: Optional[RunProgram] = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    keep_checkpoints: int = 2,
    resume: bool = False,
    stop_after: Optional[int] = None,
    loggers: Sequence = (),
    on_note: Optional[Callable[[str], None]] = None,
    notes: Optional[dict] = None,
    init_from=None,
    init_member: Optional[int] = None,
    eval_every: Optional[int] = None,
    eval_episodes: int = EVAL_EPISODES,
) -> RunResult:
    """Train ``R`` runs in chunks of ``chunk_updates`` updates; returns a :class:`RunResult`.

    Runs: ``num_seeds`` seeds of ``config``, or of each of ``members`` (``{field: value}``
    overrides of numeric fields, a sweep: ``R = M*S``, see ``population.runs``). ``program``
    (any :class:`~purejaxppo.run.protocol.RunProgram` of this config) reuses its compiled
    functions; else a :class:`Program` is built from ``ppo``/``num_devices``/``split``. The
    loop's behaviour (sinks, checkpoints, signals, the NaN stop, resume, the lock) is
    :func:`~purejaxppo.run.loop.run_chunks`'s; ``loggers`` are its sinks. ``notes`` adds
    entries for people to ``config.json`` (:data:`purejaxppo.run.record.NOTES`, e.g.
    ``{"reference": "gymnax-blines"}``).

    ``init_from`` (a run folder or an ``update_*`` checkpoint folder; ``init_member``: the
    member of a source with members) starts the runs from that run's params, optimizer and
    normaliser state with this config's own schedule (:mod:`purejaxppo.run.warm_start`); the
    source is recorded in ``config.json`` as ``init_from`` (that record is also accepted here).

    ``eval_every=N``: after every ``N`` updates each run plays ``eval_episodes`` greedy
    episodes (:class:`~purejaxppo.programs.eval_program.EvalProgram`, keys apart from
    training's, so the training numbers do not change); chunks stop at those updates, and
    ``metrics.csv`` gets ``eval_return`` and ``eval_episodes`` columns (NaN at the others).
    """
    prog = program if program is not None else Program(config, ppo=ppo, num_devices=num_devices, split=split)
    if prog.config != config:
        raise ConfigError("program= was built for another config; build Program(config) for this one")
    members = None if members is None else [dict(m) for m in members]
    evaluator = (
        None if eval_every is None else EvalProgram(config, prog.ppo.agent, eval_every, eval_episodes, prog.shard)
    )
    chunk_updates = chunk_size(eval_every if evaluator else config.num_updates, chunk_updates)
    record = RunRecord(
        prog.kind_for(members),
        config,
        prog.settings,
        seed=seed,
        num_seeds=num_seeds,
        members=members,
        chunk_updates=chunk_updates,
        num_devices=prog.num_devices,
        split=prog.split,
        checkpoint_every=checkpoint_every,
        eval_every=eval_every if evaluator else None,
        eval_episodes=eval_episodes,
        notes=dict(notes or {}),
    )
    start_from = None
    if init_from is not None:  # checked (JSON only) before any folder is made
        source = (
            init_from if isinstance(init_from, dict) else warm_start.describe(init_from, init_member, config, num_seeds)
        )
        record = record.replace(init_from=source)

        def start_from(state):
            return prog.with_training_state(state, warm_start.apply(source, prog.training_state(state), num_seeds))

    if resume and run_dir:
        processes.current().share(lambda: _check_same_evaluation(run_dir, record))  # the folder is process 0's
    inputs = rf.run_inputs(config, seed, num_seeds, members)
    return run_chunks(
        prog,
        record,
        inputs,
        run_dir=run_dir,
        resume=resume,
        stop_after=stop_after,
        on_chunk=on_chunk,
        keep_checkpoints=keep_checkpoints,
        sinks=loggers,
        on_note=on_note,
        evaluator=evaluator,
        start_from=start_from,
    )


def _check_same_evaluation(run_dir: str, record: RunRecord) -> None:
    """metrics.csv's columns depend on the evaluation settings: a resume keeps them."""
    rf.check_resumable(run_dir, record)  # the wrong kind or setup first, with its own message
    saved = rf.load_record(run_dir)
    if (saved.eval_every, saved.eval_episodes) != (record.eval_every, record.eval_episodes) and (
        saved.eval_every or record.eval_every
    ):
        raise ConfigError(
            f"{run_dir!r} was trained with eval_every={saved.eval_every}, eval_episodes="
            f"{saved.eval_episodes}; resume it with the same (resume_run does by default)"
        )


def resume_run(run_dir: str, record: Optional[RunRecord] = None, **kwargs) -> RunResult:
    """Continue the run folder ``run_dir`` (any kind: its registered kind resumes it,
    :mod:`purejaxppo.run.kinds`) from its latest checkpoint with its saved config, seed,
    seeds, members, chunk size, devices and split; keyword args override the others, e.g.
    ``on_chunk``, ``stop_after``, ``loggers``, ``program``. ``record``: the folder's record
    when the caller has read it already (several processes: process 0 reads it)."""
    record = record if record is not None else rf.load_record(run_dir)
    return kinds.kind_named(record.kind).resume(run_dir, record, **kwargs)


def continue_chunked(run_dir: str, record: RunRecord, **kwargs) -> RunResult:
    """:func:`train_chunked` continuing ``run_dir`` as ``record`` says (``kwargs`` override):
    the resume of the kinds that run through it (plain runs, sweeps, PBT)."""
    opts = dict(
        seed=record.seed,
        num_seeds=record.num_seeds,
        members=record.members,
        chunk_updates=record.chunk_updates,
        num_devices=record.num_devices,
        split=record.split,
        checkpoint_every=record.checkpoint_every,
        init_from=record.init_from,
        eval_every=record.eval_every,
        eval_episodes=record.eval_episodes,
        notes=record.notes,
    )
    opts.update(kwargs)
    if "program" not in opts:
        opts["program"] = kinds.kind_named(record.kind).program(
            record, num_devices=opts["num_devices"], split=opts["split"]
        )
    return train_chunked(record.config, run_dir=run_dir, resume=True, **opts)
