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
from purejaxppo.programs.kinds import RESUMERS, program_for_folder
from purejaxppo.programs.program import Program
from purejaxppo.run import processes
from purejaxppo.run import run_folder as rf
from purejaxppo.run import warm_start
from purejaxppo.run.loop import RunResult, chunk_size, run_chunks
from purejaxppo.run.protocol import RunProgram
from purejaxppo.step.train import PPO


def train_chunked(
    config: PPOConfig,
    *,
    seed: int = 0,
    num_seeds: int = 1,
    members: Optional[Sequence[dict]] = None,
    run_dir: Optional[str] = None,
    chunk_updates: int = 25,
    num_devices: int = 1,
    split: str = "seeds",
    on_chunk: Optional[Callable[[dict], None]] = None,
    ppo: Optional[PPO] = None,
    program: Optional[RunProgram] = None,
    checkpoint_every: int = 10,
    keep_checkpoints: int = 2,
    resume: bool = False,
    stop_after: Optional[int] = None,
    loggers: Sequence = (),
    on_note: Optional[Callable[[str], None]] = None,
    run_info: Optional[dict] = None,
    init_from=None,
    init_member: Optional[int] = None,
    eval_every: Optional[int] = None,
    eval_episodes: int = 10,
) -> RunResult:
    """Train ``R`` runs in chunks of ``chunk_updates`` updates; returns a :class:`RunResult`.

    Runs: ``num_seeds`` seeds of ``config``, or of each of ``members`` (``{field: value}``
    overrides of numeric fields, a sweep: ``R = M*S``, see ``population.runs``). ``program``
    (any :class:`~purejaxppo.run.protocol.RunProgram` of this config) reuses its compiled
    functions; else a :class:`Program` is built from ``ppo``/``num_devices``/``split``. The
    loop's behaviour (sinks, checkpoints, signals, the NaN stop, resume, the lock) is
    :func:`~purejaxppo.run.loop.run_chunks`'s; ``loggers`` are its sinks. ``run_info`` adds
    entries to ``config.json`` (e.g. ``{"reference": "gymnax-blines"}``).

    ``init_from`` (a run folder or an ``update_*`` checkpoint folder; ``init_member``: the
    member of a sweep/PBT source) starts the runs from that run's params, optimizer and
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
    evaluator = None if eval_every is None else EvalProgram(config, prog.ppo.agent, eval_every, eval_episodes,
                                                            prog.shard)
    chunk_updates = chunk_size(eval_every if evaluator else config.num_updates, chunk_updates)
    info = {"kind": "run" if members is None else "sweep", "config": config.to_dict(), "seed": seed,
            "num_seeds": num_seeds, "members": members, "chunk_updates": chunk_updates,
            "num_devices": prog.num_devices, "split": prog.split, "checkpoint_every": checkpoint_every,
            **prog.run_info, **(run_info or {}),  # e.g. PBT: its kind and settings
            **({"eval_every": eval_every, "eval_episodes": eval_episodes} if evaluator else {})}
    start_from = None
    if init_from is not None:  # checked (JSON only) before any folder is made
        record = (init_from if isinstance(init_from, dict) else
                  warm_start.describe(init_from, init_member, config, num_seeds))
        info["init_from"] = record
        def start_from(state):
            return prog.with_training_state(state, warm_start.apply(record, prog.training_state(state), num_seeds))
    if resume and run_dir:
        processes.current().share(lambda: _check_same_evaluation(run_dir, info))  # the folder is process 0's
    inputs = rf.run_inputs(config, seed, num_seeds, members)
    return run_chunks(prog, info, inputs, run_dir=run_dir, resume=resume, stop_after=stop_after, on_chunk=on_chunk,
                      keep_checkpoints=keep_checkpoints, sinks=loggers, on_note=on_note, evaluator=evaluator,
                      start_from=start_from)


def _check_same_evaluation(run_dir: str, info: dict) -> None:
    """metrics.csv's columns depend on the evaluation settings: a resume keeps them."""
    rf.check_resumable(run_dir, info)  # the wrong kind or setup first, with its own message
    saved = rf.load_run_info(run_dir)
    if any(saved.get(k) != info.get(k) for k in ("eval_every", "eval_episodes")):
        raise ConfigError(f"{run_dir!r} was trained with eval_every={saved.get('eval_every')}, eval_episodes="
                          f"{saved.get('eval_episodes')}; resume it with the same (resume_run does by default)")


def resume_run(run_dir: str, info: Optional[dict] = None, **kwargs) -> RunResult:
    """Continue the run, sweep or other kind in ``run_dir`` from its latest checkpoint with its
    saved config, seed, seeds, members, chunk size, devices and split (keyword args override
    the others, e.g. ``on_chunk``, ``stop_after``, ``loggers``, ``program``). The program is
    rebuilt from the folder's kind (:mod:`purejaxppo.programs.kinds`). ``info``: the folder's
    ``config.json`` when the caller has read it already (several processes: process 0 reads it)."""
    info = info if info is not None else rf.load_run_info(run_dir)
    if rf.folder_kind(info) in RESUMERS:  # a kind with its own front door (e.g. token-level PPO)
        return RESUMERS[rf.folder_kind(info)](run_dir, **kwargs)
    opts = dict(seed=info["seed"], num_seeds=info["num_seeds"], members=info.get("members"),
                chunk_updates=info.get("chunk_updates", 25), num_devices=info.get("num_devices", 1),
                split=info.get("split", "seeds"), checkpoint_every=info.get("checkpoint_every", 10),
                init_from=info.get("init_from"), eval_every=info.get("eval_every"),
                eval_episodes=info.get("eval_episodes", 10))
    opts.update(kwargs)
    if "program" not in opts:
        opts["program"] = program_for_folder(info, num_devices=opts["num_devices"], split=opts["split"])
    return train_chunked(info["config"], run_dir=run_dir, resume=True, **opts)
