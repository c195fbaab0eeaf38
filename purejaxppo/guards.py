"""What stops training early: non-finite numbers and signals.

* :func:`first_non_finite` finds the earliest non-finite loss, diagnostic or parameter of a
  chunk (``episode_return``/``episode_length`` are NaN by design when no episode finished);
  the loop then raises :class:`NonFiniteError`.
* :func:`sigterm_as_interrupt` turns SIGTERM into KeyboardInterrupt (as Ctrl-C), which the
  loop turns into :class:`TrainingInterrupted` after saving a checkpoint.

Both exceptions carry what a caller needs (``checkpoint``, ``updates_done``) as fields.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Optional

import numpy as np

MAY_BE_NAN = ("episode_return", "episode_length")  # NaN by design when no episode finished


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or parameter; the message names update, metric and
    run. ``checkpoint``: the last finite state's checkpoint (or None), after ``updates_done``."""

    def __init__(self, message: str, checkpoint: Optional[str] = None, updates_done: int = 0):
        super().__init__(message)
        self.checkpoint, self.updates_done = checkpoint, updates_done


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training; ``checkpoint`` (or None) holds the state after
    ``updates_done`` updates (continue with :func:`resume_run`)."""

    def __init__(self, checkpoint: Optional[str], updates_done: int, reason: str = "interrupted"):
        super().__init__(reason)
        self.checkpoint, self.updates_done, self.reason = checkpoint, updates_done, reason


def first_non_finite(metrics: dict, finite: np.ndarray, first_update: int, describe: Callable[[int], str]):
    """The earliest non-finite loss/diagnostic (or parameter) of a chunk, described, else None.

    ``metrics``: name -> ``[R, n]``; ``finite``: ``[R]`` bools after the chunk."""
    worst = None  # (update, run, name, value)
    for name in sorted(set(metrics) - set(MAY_BE_NAN)):
        a = np.asarray(metrics[name], np.float64)
        bad = np.argwhere(~np.isfinite(a))
        if len(bad):
            r, u = bad[np.argmin(bad[:, 1])]
            if worst is None or u < worst[0]:
                worst = (int(u), int(r), name, a[r, u])
    if worst is not None:
        u, r, name, v = worst
        return f"non-finite {name} ({v}) at update {first_update + u + 1} ({describe(r)})"
    if not np.all(finite):
        r, n = int(np.argmin(finite)), np.asarray(next(iter(metrics.values()))).shape[1]
        return f"non-finite parameters or optimizer state after updates {first_update + 1}..{first_update + n} ({describe(r)})"
    return None


@contextmanager
def sigterm_as_interrupt():
    """Within the block SIGTERM raises KeyboardInterrupt (as Ctrl-C does), so the loop can save a checkpoint."""
    old = None
    if threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            raise KeyboardInterrupt("SIGTERM")

        old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
