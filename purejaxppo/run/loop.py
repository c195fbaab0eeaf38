"""The chunk loop: a compiled run (:class:`~purejaxppo.run.protocol.RunProgram`) driven in
chunks of updates, on ``R`` runs at once.

Each chunk length compiles once; between chunks the host shows progress, hands the metrics
to the sinks, stops on non-finite numbers and saves checkpoints. The numbers equal those of
an uninterrupted run through the same chunks: the same executables applied to the same
state, and a resumed run continues with exactly the state (arrays, PRNG keys, update counter)
it stopped with. The loop never asks which kind of run it drives: the front doors in
:mod:`purejaxppo.programs` build the program, the ``config.json`` record and the evaluator.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.run import processes
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import preload
from purejaxppo.run import signals
from purejaxppo.run.guards import (
    DivergenceWatch,
    NonFiniteError,
    RunFolderWriteError,
    TrainingInterrupted,
    rows_to_keep,
)
from purejaxppo.run.protocol import Evaluator, RunProgram
from purejaxppo.run.record import RunRecord
from purejaxppo.run.results import RunResult, chunk_size, describe_run  # noqa: F401  (their home before)
from purejaxppo.run.run_storage import RunStorage
from purejaxppo.run.sinks import CSVLogger


def run_chunks(
    program: RunProgram,
    record: RunRecord,
    inputs: tuple,
    *,
    run_dir: Optional[str] = None,
    resume: bool = False,
    stop_after: Optional[int] = None,
    on_chunk: Optional[Callable[[dict], None]] = None,
    keep_checkpoints: int = 2,
    sinks: Sequence = (),
    on_note: Optional[Callable[[str], None]] = None,
    evaluator: Optional[Evaluator] = None,
    start_from: Optional[Callable[[object], object]] = None,
) -> RunResult:
    """Run ``program`` to ``config.num_updates`` (or ``stop_after``) in chunks; a :class:`RunResult`.

    ``record``: the run's :class:`~purejaxppo.run.record.RunRecord` (``config.json``; every
    checkpoint carries it too; the loop reads ``num_seeds``, ``members``, ``chunk_updates``
    and ``checkpoint_every``).
    ``inputs``: ``(keys [R], configs [R] | None)`` for ``program.place``/``init``. After
    every chunk: ``on_chunk(progress)``, the metrics ``{name: [R, n]}`` to ``metrics.csv`` and
    each of ``sinks``, the finite check, every ``checkpoint_every`` chunks a checkpoint. A
    checkpoint is also saved at the end, at ``stop_after`` (then ``finished=False``), on
    Ctrl-C/SIGTERM (raised as :class:`TrainingInterrupted`; from the first compile on, so a
    run folder always holds a checkpoint to continue from) and on any error (which then
    propagates); non-finite numbers raise :class:`NonFiniteError` after saving the last
    finite state. ``metrics.csv`` gets rows of finished updates only (:meth:`_Session.record`);
    a signal inside a host callback waits for the chunk (:mod:`purejaxppo.run.signals`).
    ``resume=True`` continues ``run_dir`` from its newest usable checkpoint.
    ``start_from(state) -> state`` replaces the state at update 0 (a warm start).

    The run folder is locked while training (:mod:`purejaxppo.run.run_lock`), a new run
    refuses a folder that holds one, and a resume of a finished run rewrites nothing. A
    folder that cannot be written (full disk) raises :class:`RunFolderWriteError` after
    keeping what it can. ``on_note(text)`` receives warnings; default: stderr.

    Several processes (:mod:`purejaxppo.run.processes`): every process calls this with the same
    arguments; process 0 alone reads and writes ``run_dir``, calls ``on_chunk`` and the sinks
    (:class:`~purejaxppo.run.run_storage.RunStorage`); the metrics are gathered on every process."""
    if resume and not run_dir:
        raise ConfigError("resume=True needs the run_dir of the run to continue")
    group = processes.current()
    if group.many and evaluator is not None:
        raise ConfigError(
            "evaluation during training (eval_every) does not run across processes yet; train "
            "without it and evaluate the run folder afterwards (python -m purejaxppo eval RUN_DIR)"
        )
    note = on_note or (lambda msg: print(f"warning: {msg}", file=sys.stderr, flush=True))
    storage = RunStorage(run_dir, record, group, keep_checkpoints)
    session = _Session(
        program,
        record,
        inputs,
        storage,
        resume,
        stop_after,
        on_chunk if group.writer else None,
        list(sinks) if group.writer else [],
        note,
        evaluator,
        start_from,
    )
    with contextlib.ExitStack() as held:
        storage.open(resume, held)  # the lock, held for the session; the checks of a new run or a resume
        return session.run()


class _Session:
    """One call of :func:`run_chunks`: its state between chunks, and the steps of the loop."""

    def __init__(
        self,
        prog,
        record,
        inputs,
        storage: RunStorage,
        resume,
        stop_after,
        on_chunk,
        sinks,
        note,
        evaluator,
        start_from,
    ):
        self.prog, self.run_record, self.raw_inputs, self.storage, self.resume = prog, record, inputs, storage, resume
        self.stop_after, self.on_chunk, self.user_sinks, self.note = stop_after, on_chunk, sinks, note
        self.evaluator, self.start_from, self.group = evaluator, start_from, storage.group
        self.config, self.members, self.num_seeds = prog.config, record.members, record.num_seeds
        self.describe = lambda r: describe_run(r, self.num_seeds, self.members)
        self.run_dir = storage.run_dir
        self.sinks, self.chunks, self.good, self.started = [], [], None, False
        self.compile_s = self.run_s = self.eval_s = 0.0

    # --- start: inputs, state (fresh, restored or warm-started), the first compile, sinks ----
    def start(self):
        if self.storage.writes:
            preload()  # orbax's import overlaps init and compile instead of stalling the first save
        t0 = time.perf_counter()
        inputs = self.prog.place(*(x for x in self.raw_inputs if x is not None))
        self.keys, self.configs = inputs[0], (inputs[1] if len(inputs) > 1 else None)
        fresh = state = self.prog.init(*inputs)
        done, self.prev = 0, None
        if self.resume:
            state, done, self.prev, resume_note = self.storage.restore(fresh)
            self.storage.saved = done if state is not fresh else -1
            if resume_note:
                self.note(resume_note)
        if self.start_from is not None and state is fresh:  # a checkpoint (update 0 too) holds it already
            state = self.start_from(state)
        self.state, self.done, self.start_update, self.good = state, done, done, (state, done)
        n_total = self.config.num_updates
        self.stop_at = n_total if self.stop_after is None else min(n_total, max(self.stop_after, done))
        idle = self.resume and done >= self.stop_at  # e.g. a finished run: nothing to compute or rewrite
        if not idle:
            self.storage.write_info(resumed_from=done if self.resume else None)
            ev = self.evaluator
            first = min(
                self.run_record.chunk_updates, max(n_total - done, 1), ev.updates_to_next(done) if ev else n_total
            )
            self.prog.compile(first, state, self.configs)
            if ev:
                ev.compile(self.keys, self.prog.training_state(state))
        self.compile_s = time.perf_counter() - t0  # init (+ restore) and the first chunk's compile
        csv_sink = (
            CSVLogger(
                os.path.join(self.run_dir, rf.METRICS),
                self.num_seeds,
                self.members is not None,
                self.resume,
                self.config.batch_size,
                self.note,
            )
            if self.storage.writes
            else None
        )
        self.sinks = ([csv_sink] if csv_sink else []) + self.user_sinks

    def checkpoint(self, state, update) -> Optional[str]:
        return self.storage.save(state, update)

    def launch(self, state, at: int):
        """Dispatch the chunk that starts at update ``at`` (compiling its length once) and
        return at once: JAX dispatch is asynchronous, so it runs while the host works."""
        n = min(self.run_record.chunk_updates, self.stop_at - at)
        if self.evaluator:  # a chunk ends at every evaluation point
            n = min(n, self.evaluator.updates_to_next(at))
        c = self.prog.compile(n, state, self.configs)  # a remainder chunk: outside the timed run
        return n, c, self.prog.chunk(n, state, self.configs)

    # --- the loop -------------------------------------------------------------------------
    def loop(self):
        loop_t0, loop_compile, since, watch = time.perf_counter(), 0.0, 0, DivergenceWatch()
        pending = self.launch(self.state, self.done) if self.done < self.stop_at else None
        while pending is not None:
            n, c, ((new_state, metrics), finite) = pending
            self.compile_s, loop_compile = self.compile_s + c, loop_compile + c
            # the next chunk is dispatched on this one's (future) state before the host waits for
            # this one's metrics, so the device never idles between chunks while the host fetches,
            # writes and checks (one chunk ahead at most; after a stop it is discarded, nothing of
            # it is written). An evaluation at this boundary goes first instead, so its time is its own.
            ev, at = self.evaluator, self.done + n
            evaluating, more = ev is not None and ev.due(at), at < self.stop_at
            pending = self.launch(new_state, at) if more and not evaluating else None
            metrics, finite = self.group.gather((metrics, finite))  # device_get on one process
            metrics = {k: np.asarray(v) for k, v in metrics.items()}
            metrics.update({k: np.broadcast_to(v, (self.runs, n)) for k, v in self.prog.counters(self.done, n).items()})
            evaluated = None
            if ev:  # a separate program on the state after this chunk: training is untouched
                t = time.perf_counter()
                evaluated = ev(self.keys, at, self.prog.training_state(new_state)) if evaluating else None
                self.eval_s += time.perf_counter() - t
                metrics.update(ev.columns(evaluated, self.runs, n))
            caught = signals.take()  # Ctrl-C/SIGTERM inside a host callback of this chunk or evaluation
            if caught is None and evaluating and more:
                pending = self.launch(new_state, at)
            self.record(metrics, np.asarray(finite), watch, caught, evaluated)
            self.state, self.done, since = new_state, at, since + 1
            # wall time of the loop so far, less compiles and evaluations: the host's work is
            # inside it where it did not overlap a chunk
            self.run_s = time.perf_counter() - loop_t0 - loop_compile - self.eval_s
            self.good = (self.state, self.done)
            if since >= self.run_record.checkpoint_every and self.done < self.stop_at:
                self.checkpoint(self.state, self.done)
                since = 0
            if caught is not None:  # this chunk is kept whole: the checkpoint on the way out holds it
                raise caught
            if self.on_chunk is not None:
                self.on_chunk(self.progress(metrics, evaluated))
        self.checkpoint(self.state, self.done)

    def record(self, metrics: dict, finite: np.ndarray, watch: DivergenceWatch, caught=None, evaluated=None) -> None:
        """The chunk's metrics to every sink, then the NaN stop and the divergence warning.

        A chunk that is not sound (non-finite, or its evaluation is, after a signal ``caught``
        inside a host callback cut it short) writes only its rows before the first bad
        update, and that row too when the NaN stop's message points to it in metrics.csv;
        then ``caught`` is raised, or :class:`NonFiniteError`."""
        problem = self.prog.check_finite(metrics, finite, self.done, self.describe)
        n = np.shape(next(iter(metrics.values())))[1]
        unsound = caught is not None and any(not np.all(np.isfinite(v)) for v in (evaluated or {}).values())
        if problem is None and not unsound:
            self.write(metrics)
        else:
            keep = rows_to_keep(metrics, problem, caught is not None, getattr(self.prog, "nan_by_design", ()))
            self.write({k: v[:, :keep] for k, v in metrics.items()} if keep < n else metrics)
            if caught is not None:  # the signal cut this chunk short: stop as the signal says
                raise caught
            path = self.checkpoint(*self.good)
            where = f"; the last finite checkpoint is {path} (update {self.good[1]})" if path else ""
            hint = " (or drop that member)" if self.members is not None else ""
            advice = self.prog.nan_hint.replace("RUN_DIR", self.run_dir) if self.run_dir else self.prog.nan_hint
            raise NonFiniteError(f"{problem}; training stopped{where}. {advice}{hint}", path, self.good[1])
        warning = watch.check(metrics, self.done, self.describe)
        if warning:
            self.note(warning)
        self.chunks.append(metrics)

    def write(self, metrics: dict) -> None:
        if np.shape(next(iter(metrics.values())))[1]:
            for sink in self.sinks:
                sink.write(metrics, self.done)

    def progress(self, metrics: dict, evaluated: Optional[dict]) -> dict:
        """``on_chunk``'s argument: counters, timings, the chunk's ``metrics`` and ``evaluated`` (or None)."""
        batch = self.config.batch_size
        return {
            "updates": self.done,
            "num_updates": self.config.num_updates,
            "env_steps": self.done * batch,
            "run_s": self.run_s,
            "compile_s": self.compile_s,
            "start_update": self.start_update,
            "steps_per_s": (self.done - self.start_update) * batch * self.runs / max(self.run_s, 1e-9),
            "metrics": metrics,
            "evaluated": evaluated,
            "episode_return": metrics.get("episode_return"),
            "eval_return": None if evaluated is None else evaluated.get("eval_return"),
        }

    # --- the whole session, with what every way out keeps ----------------------------------
    def run(self) -> RunResult:
        try:
            # from the start: a signal during the first compile saves
            with signals.interrupts_at_safe_points(self.storage.kept_note()):
                try:
                    self.start()
                except OSError as e:
                    raise self.storage.write_error(e) from None
                self.runs, self.started = len(self.keys), True
                self.loop()
        except (NonFiniteError, RunFolderWriteError):
            raise
        except KeyboardInterrupt as e:
            path = self.save_quietly()  # the update the message names is the one that checkpoint holds
            done = self.storage.saved_update(path) if path else (self.good[1] if self.good else 0)
            raise TrainingInterrupted(path, done, str(e) or "interrupted") from None
        except OSError as e:  # full disk, permissions: keep what can be kept, say how to go on
            self.save_quietly()
            raise self.storage.write_error(e) from None
        except BaseException:
            if self.started:  # an error before the loop (a bad input, a compile) keeps the folder as it was
                self.save_quietly()
            raise
        finally:
            for sink in self.sinks:
                try:
                    sink.close()
                except Exception:
                    pass
        return self.finish()

    def save_quietly(self) -> Optional[str]:
        return self.storage.save_quietly(*self.good) if self.good else self.storage.latest()

    def finish(self) -> RunResult:
        chunks, prev, done, runs = self.chunks, self.prev, self.done, self.runs
        metrics = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in (chunks[0] if chunks else {})}
        if prev:
            metrics = {k: np.concatenate([prev[k].astype(v.dtype), v], axis=1) for k, v in metrics.items()} or prev
        ret = metrics.get(self.prog.headline[0], np.full((runs, 1), np.nan))
        n_total, batch = self.config.num_updates, self.config.batch_size
        result = RunResult(
            self.config,
            self.run_dir,
            self.state,
            metrics,
            self.compile_s,
            self.run_s,
            (done - self.start_update) * batch * runs,
            rf.final_returns(ret),
            updates_done=done,
            finished=done >= n_total,
            members=self.members,
            extra={"eval_s": self.eval_s} if self.evaluator else {},
        )
        run_dir = self.run_dir
        if (
            self.storage.writes
            and result.finished
            and not (done == self.start_update and os.path.exists(os.path.join(run_dir, rf.SUMMARY)))
        ):
            try:
                summary = rf.summary(result, n_total * batch * runs, self.storage.latest(), self.prog.headline[1])
                self.storage.write_summary(summary)
            except OSError as e:
                raise self.storage.write_error(e) from None
        return result
