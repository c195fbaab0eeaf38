"""What stops training early: non-finite numbers and signals.

* :func:`tree_finite` (traced) says whether every float leaf of a state is finite, the flag a
  compiled chunk returns next to its metrics;
* :func:`first_non_finite` finds the earliest non-finite loss, diagnostic or parameter of a
  chunk (``episode_return``/``episode_length`` are NaN by design when no episode finished);
  the loop then raises :class:`NonFiniteError`.
* :class:`DivergenceWatch` warns (once) when the critic loss, gradient norm or KL stay far
  beyond sane bounds for several updates in a row (finite, but training has blown up);
* :class:`RunFolderWriteError`: the run folder could not be written (full disk,
  permissions); the loop raises it with what is kept and where to resume from;
* :class:`TrainingInterrupted`: Ctrl-C or SIGTERM (as KeyboardInterrupt, see
  :mod:`purejaxppo.run.signals`) stopped the loop after it saved a checkpoint;
* :func:`interrupts_deferred` holds SIGINT/SIGTERM while a checkpoint is written, so a save
  is never cut in half (orbax's writer threads would be left mid-file).

The exceptions carry what a caller needs (``checkpoint``, ``updates_done``) as fields.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np


def tree_finite(tree) -> jax.Array:
    """Traced: a scalar bool, True when every inexact leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


# NaN by design: when no episode finished; evaluation columns at updates without an evaluation
MAY_BE_NAN = ("episode_return", "episode_length", "eval_return", "eval_episodes")


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or parameter; the message names update, metric and
    run. ``checkpoint``: the last finite state's checkpoint (or None), after ``updates_done``."""

    def __init__(self, message: str, checkpoint: Optional[str] = None, updates_done: int = 0):
        super().__init__(message)
        self.checkpoint, self.updates_done = checkpoint, updates_done


class RunFolderWriteError(RuntimeError):
    """Writing the run folder failed (full disk, permissions); the message says what is kept
    and how to resume. ``checkpoint`` (or None) holds the state after ``updates_done``."""

    def __init__(self, message: str, checkpoint: Optional[str] = None, updates_done: int = 0):
        super().__init__(message)
        self.checkpoint, self.updates_done = checkpoint, updates_done


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training; ``checkpoint`` (or None) holds the state after
    ``updates_done`` updates (continue with :func:`resume_run`). ``hint`` (or None): what was
    kept and what to run next, where a checkpoint does not say it (e.g. a stage before the
    run folder exists: nothing is kept, the command starts over)."""

    def __init__(
        self, checkpoint: Optional[str], updates_done: int, reason: str = "interrupted", hint: Optional[str] = None
    ):
        super().__init__(reason)
        self.checkpoint, self.updates_done, self.reason, self.hint = checkpoint, updates_done, reason, hint


IN_METRICS = "of metrics.csv"  # in a NaN stop's message: the row it names is written, for the user to read


def _worst(metrics: dict, skip: tuple = ()):
    """``(update in the chunk, run, name, value)`` of the earliest non-finite metric, or None."""
    worst = None
    for name in sorted(set(metrics) - set(MAY_BE_NAN)):
        if skip and name.startswith(skip):
            continue
        a = np.asarray(metrics[name], np.float64)
        bad = np.argwhere(~np.isfinite(a))
        if len(bad):
            r, u = bad[np.argmin(bad[:, 1])]
            if worst is None or u < worst[0]:
                worst = (int(u), int(r), name, a[r, u])
    return worst


def first_bad_update(metrics: dict, skip: tuple = ()) -> Optional[int]:
    """The chunk's first update (0-based) with a non-finite metric (names starting with
    ``skip`` and those NaN by design left out), or None."""
    worst = _worst(metrics, skip)
    return None if worst is None else worst[0]


def rows_to_keep(metrics: dict, problem: Optional[str], caught: bool, skip: tuple = ()) -> int:
    """How many leading updates of an unsound chunk's ``metrics`` (``{name: [R, n]}``) are
    written: those before its first non-finite metric, and that one too when the NaN stop's
    ``problem`` names it in metrics.csv (not after a signal was ``caught``: then the signal made
    the NaN); all when the metrics are finite but the parameters are not (the message names those
    rows); all but the last when only the evaluation (at the chunk's end) is bad."""
    n = np.shape(next(iter(metrics.values())))[1]
    bad = first_bad_update(metrics, skip)
    if bad is None:
        return n if problem is not None else n - 1
    return bad + 1 if not caught and problem is not None and IN_METRICS in problem else bad


def first_non_finite(metrics: dict, finite: np.ndarray, first_update: int, describe: Callable[[int], str]):
    """The earliest non-finite loss/diagnostic (or parameter) of a chunk, described, else None.

    ``metrics``: name -> ``[R, n]``; ``finite``: ``[R]`` bools after the chunk."""
    worst = _worst(metrics)
    if worst is not None:
        u, r, name, v = worst
        return f"non-finite {name} ({v}) at update {first_update + u} {IN_METRICS} ({describe(r)})"
    if not np.all(finite):
        r, n = int(np.argmin(finite)), np.asarray(next(iter(metrics.values()))).shape[1]
        return (
            f"non-finite parameters or optimizer state after updates {first_update}..{first_update + n - 1} "
            f"of metrics.csv ({describe(r)})"
        )
    return None


class DivergenceWatch:
    """Warns once when, in some run, any of ``BOUNDS`` is exceeded ``patience`` updates in a
    row: the numbers are finite but training has blown up (e.g. ``--lr 1e6`` collapses the
    policy with gradient norms ~1e7). :meth:`check` takes a chunk's ``{name: [R, n]}`` and
    returns the warning text the first time, else None. It never stops training."""

    BOUNDS = {"grad_norm": 1e4, "critic_loss": 1e8, "approx_kl": 1.0}

    def __init__(self, patience: int = 5):
        self.patience, self.streak, self.warned = patience, None, False

    def check(self, metrics: dict, first_update: int, describe: Callable[[int], str]) -> Optional[str]:
        names = [k for k in self.BOUNDS if k in metrics]
        if self.warned or not names:
            return None
        over = np.zeros(np.shape(metrics[names[0]]), bool)
        with np.errstate(invalid="ignore"):
            for k in names:
                over |= np.abs(np.asarray(metrics[k], np.float64)) > self.BOUNDS[k]
        streak = np.zeros(over.shape[0], int) if self.streak is None else self.streak
        for u in range(over.shape[1]):
            streak = np.where(over[:, u], streak + 1, 0)
            if streak.max() >= self.patience:
                r = int(np.argmax(streak))
                worst = ", ".join(f"{k}={float(np.asarray(metrics[k])[r, u]):.3g}" for k in names)
                self.warned = True
                return (
                    f"training looks divergent: {worst} at update {first_update + u} ({describe(r)}), beyond "
                    f"sane bounds for {self.patience} updates in a row; lower the learning rate (--lr) or "
                    "--max-grad-norm, or enable --normalize-obs / --normalize-reward"
                )
        self.streak = streak
        return None


@contextmanager
def interrupts_deferred():
    """Within the block SIGINT and SIGTERM are recorded, not acted on; when the block ends the
    previous handlers are back and the first signal received is raised again, so it acts as
    it would have (KeyboardInterrupt under Ctrl-C or :mod:`purejaxppo.run.signals`). For a
    short block that must finish whole: a checkpoint save. Outside the main thread (where
    Python delivers no signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    old = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if received:
            signal.raise_signal(received[0])
