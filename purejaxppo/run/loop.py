"""The chunk loop: the compiled training step run in chunks of updates, on R runs at once.

``R = M * S`` runs (members x seeds; one config is ``M = 1``) share one leading axis: the
per-run ``init`` and ``run`` are vmapped over it and it is sharded over devices
(``parallel.shard_runs``), or each run's envs are split over devices (``split="envs"``,
``parallel.split_envs``). Each chunk (``lax.scan`` of ``step`` over ``chunk`` updates) is
compiled once; between chunks the host shows progress, hands the metrics to the sinks,
stops on non-finite numbers and saves checkpoints. The numbers equal one ``train`` call:
the same step, applied the same number of times to the same state -- and a resumed run
continues with exactly the state (arrays, PRNG keys, update counter) it stopped with.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from purejaxppo.run import run_folder as rf
from purejaxppo.run import run_lock, warm_start
from purejaxppo.run.checkpoint import SaveError, clean_partial, latest_checkpoint, preload, save_checkpoint
from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.run.guards import (DivergenceWatch, NonFiniteError, RunFolderWriteError, TrainingInterrupted, first_non_finite,
                     sigterm_as_interrupt)
from purejaxppo.programs.program import Program
from purejaxppo.run.sinks import CSVLogger
from purejaxppo.step.train import PPO


@dataclass
class RunResult:
    config: PPOConfig
    run_dir: Optional[str]
    runner_state: object  # [R, ...]
    metrics: dict  # name -> [R, U] over the whole run (earlier sessions re-read from metrics.csv)
    compile_s: float
    run_s: float
    env_steps: int  # total over runs, this session
    final_return: np.ndarray  # [R]
    extra: dict = field(default_factory=dict)
    updates_done: int = 0
    finished: bool = True  # False when stopped early by ``stop_after``
    members: Optional[list] = None  # a sweep's members ({field: value} each); None for one config

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.run_s, 1e-9)


def chunk_size(num_updates: int, target: int) -> int:
    """The largest divisor of ``num_updates`` not above ``target`` when that is at least
    ``target/2`` (one compile), else ``target`` (the remainder then compiles once more)."""
    target = max(1, min(target, num_updates))
    best = max(d for d in range(1, target + 1) if num_updates % d == 0)
    return best if best * 2 >= target else target


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
    program: Optional[Program] = None,
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
    (a :class:`Program` of this config) reuses its compiled functions; else one is built from
    ``ppo``/``num_devices``/``split``. After every chunk: ``on_chunk(info)``; the metrics
    ``{name: [R, n]}`` go to ``run_dir/metrics.csv`` and each of ``loggers`` (sinks); a
    finiteness check; every ``checkpoint_every`` chunks a checkpoint of the whole runner state.
    A checkpoint is also saved at the end, at ``stop_after`` updates (then ``finished=False``),
    on Ctrl-C/SIGTERM (raised as :class:`TrainingInterrupted`) and on any error (which then
    propagates). Non-finite numbers raise :class:`NonFiniteError` after saving the last finite
    state. ``resume=True`` continues ``run_dir`` from its latest checkpoint (same config, seeds
    and members: :func:`resume_run`); the result equals an uninterrupted run.

    The run folder is locked while training (:mod:`purejaxppo.run.run_lock`: a second process
    is refused), a resume refuses a folder of another kind or setup before writing anything,
    and a resume of a finished run computes and rewrites nothing. A folder that cannot be
    written (full disk) raises :class:`RunFolderWriteError` after keeping what it can.
    ``on_note(text)`` receives warnings (a divergence, recomputed rows); default: stderr.
    ``run_info`` adds entries to ``config.json`` (e.g. ``{"reference": "gymnax-blines"}``).

    ``init_from`` (a run folder or an ``update_*`` checkpoint folder; ``init_member``: the
    member of a sweep/PBT source) starts the runs from that run's params, optimizer and
    normaliser state with this config's own schedule (:mod:`purejaxppo.run.warm_start`); the
    source is recorded in ``config.json`` as ``init_from`` (that record is also accepted here).

    ``eval_every=N``: after every ``N`` updates each run plays ``eval_episodes`` greedy
    episodes (:class:`~purejaxppo.programs.eval_program.EvalProgram`, keys apart from training's, so
    the training numbers do not change); chunks stop at those updates, and ``metrics.csv`` gets
    ``eval_return`` and ``eval_episodes`` columns (NaN at the other updates).
    """
    prog = program if program is not None else Program(config, ppo=ppo, num_devices=num_devices, split=split)
    if prog.config != config:
        raise ConfigError("program= was built for another config; build Program(config) for this one")
    members = None if members is None else [dict(m) for m in members]
    evaluator = _evaluator(config, prog, eval_every, eval_episodes)
    chunk_updates = chunk_size(eval_every if evaluator else config.num_updates, chunk_updates)
    info = {"kind": "run" if members is None else "sweep", "config": config.to_dict(), "seed": seed,
            "num_seeds": num_seeds, "members": members, "chunk_updates": chunk_updates,
            "num_devices": prog.num_devices, "split": prog.split, "checkpoint_every": checkpoint_every,
            **getattr(prog, "run_info", {}), **(run_info or {}),  # e.g. PBT: its kind and settings
            **({"eval_every": eval_every, "eval_episodes": eval_episodes} if evaluator else {})}
    if init_from is not None:  # checked (JSON only) before any folder is made
        info["init_from"] = (init_from if isinstance(init_from, dict) else
                             warm_start.describe(init_from, init_member, config, num_seeds, info["kind"]))
    if resume and not run_dir:
        raise ConfigError("resume=True needs the run_dir of the run to continue")
    note = on_note or (lambda msg: print(f"warning: {msg}", file=sys.stderr, flush=True))
    args = (config, prog, info, members, run_dir, resume, stop_after, on_chunk, keep_checkpoints, loggers, note,
            evaluator)
    if not run_dir:
        return _train(*args)
    if resume:
        rf.check_resumable(run_dir, info)  # the wrong kind or setup is refused before anything is written
        saved = rf.load_run_info(run_dir)
        if any(saved.get(k) != info.get(k) for k in ("eval_every", "eval_episodes")):  # metrics.csv's columns
            raise ConfigError(f"{run_dir!r} was trained with eval_every={saved.get('eval_every')}, eval_episodes="
                              f"{saved.get('eval_episodes')}; resume it with the same (resume_run does by default)")
    else:
        os.makedirs(run_dir, exist_ok=True)
    with run_lock.hold(run_dir):  # one writer per folder; a second process is refused
        if not resume:
            rf.refuse_existing_run(run_dir)
        clean_partial(os.path.join(run_dir, rf.CHECKPOINTS))  # .tmp-* folders of interrupted saves and prunes
        return _train(*args)


def _evaluator(config, prog, every, episodes):
    if every is None:
        return None
    if getattr(prog, "run_info", {}).get("kind") == "pbt":
        raise ConfigError("--eval-every is not available for PBT runs yet; evaluate a PBT run afterwards with "
                          "`python -m purejaxppo eval RUN_DIR`")
    from purejaxppo.programs.eval_program import EvalProgram

    return EvalProgram(config, prog.ppo.agent, every, episodes, getattr(prog, "shard", 1))


def _train(config, prog, info, members, run_dir, resume, stop_after, on_chunk, keep_checkpoints, loggers, note,
           evaluator=None):
    n_total, chunk, num_seeds = config.num_updates, info["chunk_updates"], info["num_seeds"]
    checkpoint_every = info["checkpoint_every"]
    ckpt_root = os.path.join(run_dir, rf.CHECKPOINTS) if run_dir else None
    if ckpt_root:
        preload()  # orbax's import overlaps init and compile instead of stalling the first save
    t0 = time.perf_counter()
    inputs = prog.place(*(x for x in rf.run_inputs(config, info["seed"], num_seeds, members) if x is not None))
    configs = inputs[1] if members is not None else None
    runner, done, prev = prog.init(*inputs), 0, None
    saved, good = [-1], (runner, 0)  # good: the last state whose metrics are written and which is finite
    try:
        if resume:
            runner, done, prev, resume_note = rf.restore_latest(run_dir, runner, info)
            saved[0], good = done, (runner, done)
            if resume_note:
                note(resume_note)
        if info.get("init_from") and done == 0:  # a new run from another run's trained state
            runner = warm_start.apply(info["init_from"], runner, num_seeds)
            good = (runner, 0)
        stop_at = n_total if stop_after is None else min(n_total, max(stop_after, done))
        idle = resume and done >= stop_at  # e.g. a finished run: nothing to compute, nothing to rewrite
        if run_dir and not idle:
            rf.write_info(run_dir, info, resumed_from=done if resume else None)
        if not idle:
            first = min(chunk, max(n_total - done, 1), evaluator.updates_to_next(done) if evaluator else chunk)
            prog.compile(first, runner, configs)
            if evaluator:
                evaluator.compile(inputs[0], runner)
        compile_s = time.perf_counter() - t0  # init (+ restore) and the first chunk's compile
        sinks = ([CSVLogger(os.path.join(run_dir, rf.METRICS), num_seeds, members is not None, resume)]
                 if run_dir else []) + list(loggers)
    except OSError as e:
        raise _write_error(e, run_dir, ckpt_root) from None
    runs, start, run_s, chunks, since, eval_s = len(jax.tree.leaves(runner)[0]), done, 0.0, [], 0, 0.0
    watch = DivergenceWatch()

    def checkpoint(state, update):
        if ckpt_root and update != saved[0]:
            save_checkpoint(ckpt_root, update, state, dict(info, versions=rf.versions(), metrics_rows_per_seed=update),
                            keep=keep_checkpoints)
            saved[0] = update
        return latest_checkpoint(ckpt_root) if ckpt_root else None

    def describe(r):
        if members is None:
            return f"seed {r}"
        return f"member {r // num_seeds} ({', '.join(f'{k}={v:g}' for k, v in members[r // num_seeds].items())}), seed {r % num_seeds}"

    def launch(state, at):
        """Dispatch the chunk that starts at update ``at`` (compiling its length once) and
        return at once: JAX dispatch is asynchronous, so it runs while the host works."""
        n = min(chunk, stop_at - at)
        if evaluator:  # a chunk ends at every evaluation point
            n = min(n, evaluator.updates_to_next(at))
        c = prog.compile(n, state, configs)  # a remainder chunk: outside the timed run
        return n, c, prog.chunk(n, state, configs)

    try:
        with sigterm_as_interrupt():
            loop_t0, loop_compile = time.perf_counter(), 0.0
            pending = launch(runner, done) if done < stop_at else None
            while pending is not None:
                n, c, ((new_runner, metrics), finite) = pending
                compile_s, loop_compile = compile_s + c, loop_compile + c
                # the next chunk is dispatched on this one's (future) state before the host waits
                # for this one's metrics, so the device never idles between chunks while the host
                # fetches, writes and checks (one chunk ahead at most; after a stop it is discarded,
                # nothing of it is written). An evaluation at this boundary goes first instead, so
                # that its time is its own.
                evaluating = evaluator is not None and evaluator.due(done + n)
                more = done + n < stop_at
                pending = launch(new_runner, done + n) if more and not evaluating else None
                metrics, finite = jax.device_get((metrics, finite))
                metrics = {k: np.asarray(v) for k, v in metrics.items()}
                evaluated = None
                if evaluator:  # a separate program on the state after this chunk: training is untouched
                    t = time.perf_counter()
                    evaluated = evaluator(inputs[0], done + n, new_runner) if evaluating else None
                    eval_s += time.perf_counter() - t
                    metrics.update(evaluator.columns(evaluated, runs, n))
                    if evaluating and more:
                        pending = launch(new_runner, done + n)
                for sink in sinks:
                    sink.write(metrics, done)
                check = getattr(prog, "check_finite", first_non_finite)  # PBT replaces non-finite members
                problem = check(metrics, np.asarray(finite), done, describe)
                if problem is not None:
                    path = checkpoint(*good)
                    where = f"; the last finite checkpoint is {path} (update {good[1]})" if path else ""
                    hint = " (or drop that member from the sweep)" if members is not None else ""
                    raise NonFiniteError(f"{problem}; training stopped{where}. Lower the learning rate (--lr) or "
                                         f"--max-grad-norm, or enable --normalize-obs / --normalize-reward{hint}",
                                         path, good[1])
                warning = watch.check(metrics, done, describe)
                if warning:
                    note(warning)
                chunks.append(metrics)
                runner, done, since = new_runner, done + n, since + 1
                # wall time of the loop so far, less compiles and evaluations: the host's work is
                # inside it where it did not overlap a chunk
                run_s = time.perf_counter() - loop_t0 - loop_compile - eval_s
                good = (runner, done)
                if since >= checkpoint_every and done < stop_at:
                    checkpoint(runner, done)
                    since = 0
                if on_chunk is not None:
                    on_chunk({"updates": done, "num_updates": n_total, "env_steps": done * config.batch_size,
                              "run_s": run_s, "compile_s": compile_s, "start_update": start,
                              "steps_per_s": (done - start) * config.batch_size * runs / max(run_s, 1e-9),
                              "episode_return": metrics["episode_return"],
                              "eval_return": None if evaluated is None else evaluated["eval_return"]})
            checkpoint(runner, done)
    except NonFiniteError:
        raise
    except KeyboardInterrupt as e:
        raise TrainingInterrupted(_save_quietly(checkpoint, good, ckpt_root), good[1], str(e) or "interrupted") from None
    except OSError as e:  # full disk, permissions: keep what can be kept, say how to go on
        _save_quietly(checkpoint, good, ckpt_root)
        raise _write_error(e, run_dir, ckpt_root) from None
    except BaseException:
        _save_quietly(checkpoint, good, ckpt_root)
        raise
    finally:
        for sink in sinks:
            try:
                sink.close()
            except Exception:
                pass

    metrics = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in (chunks[0] if chunks else {})}
    if prev:
        metrics = {k: np.concatenate([prev[k].astype(v.dtype), v], axis=1) for k, v in metrics.items()} or prev
    ret = metrics.get("episode_return", np.full((runs, 1), np.nan))
    result = RunResult(config, run_dir, runner, metrics, compile_s, run_s, (done - start) * config.batch_size * runs,
                       rf.final_returns(ret), updates_done=done, finished=done >= n_total, members=members,
                       extra={"eval_s": eval_s} if evaluator else {})
    summary_path = os.path.join(run_dir, rf.SUMMARY) if run_dir else None
    if run_dir and result.finished and not (done == start and os.path.exists(summary_path)):
        try:
            rf.write_summary(run_dir, rf.summary(result, n_total * config.batch_size * runs, latest_checkpoint(ckpt_root)))
        except OSError as e:
            raise _write_error(e, run_dir, ckpt_root) from None
    return result


def _write_error(e: OSError, run_dir: Optional[str], ckpt_root: Optional[str]) -> RunFolderWriteError:
    """What to tell the user when the run folder cannot be written: the reason, what is kept
    (the newest checkpoint, the rows it covers) and how to continue."""
    reason = str(e) if isinstance(e, SaveError) else f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}"
    path = latest_checkpoint(ckpt_root) if ckpt_root and os.path.isdir(ckpt_root) else None
    update = int(os.path.basename(path).split("_")[-1]) if path else 0
    kept = (f"checkpoint {path} (update {update}) and the metrics.csv rows before it; later rows are recomputed"
            if path else "no checkpoint yet, so a resume starts from update 0 (same numbers)")
    return RunFolderWriteError(f"could not write to run folder {run_dir} ({reason}). Kept: {kept}. Free some space "
                               f"(or fix permissions), then continue with `python -m purejaxppo train --resume {run_dir}`",
                               path, update)


def _save_quietly(checkpoint, good, ckpt_root) -> Optional[str]:
    try:
        return checkpoint(*good)
    except BaseException:  # a failing save must not hide the original error
        return latest_checkpoint(ckpt_root) if ckpt_root else None


def resume_run(run_dir: str, **kwargs) -> RunResult:
    """Continue the run (or sweep) in ``run_dir`` from its latest checkpoint with its saved
    config, seed, seeds, members, chunk size, devices and split (keyword args override the
    others, e.g. ``on_chunk``, ``stop_after``, ``loggers``, ``program``)."""
    info = rf.load_run_info(run_dir)
    opts = dict(seed=info["seed"], num_seeds=info["num_seeds"], members=info.get("members"),
                chunk_updates=info.get("chunk_updates", 25), num_devices=info.get("num_devices", 1),
                split=info.get("split", "seeds"), checkpoint_every=info.get("checkpoint_every", 10),
                init_from=info.get("init_from"), eval_every=info.get("eval_every"),
                eval_episodes=info.get("eval_episodes", 10))
    opts.update(kwargs)
    if info.get("kind") == "pbt" and "program" not in opts:
        from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings

        opts["program"] = PBTProgram(info["config"], PBTSettings.from_dict(info["pbt"]), num_devices=opts["num_devices"])
    return train_chunked(info["config"], run_dir=run_dir, resume=True, **opts)
