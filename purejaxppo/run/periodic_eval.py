"""What every evaluation during training does alike (:class:`~purejaxppo.run.protocol.Evaluator`
but ``compile`` and ``__call__``, what it plays and scores): its schedule, after every ``every``
updates, and its ``metrics.csv`` columns, NaN but at the updates it evaluated."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from purejaxppo.run.compile_once import CompileOnce


class PeriodicEvaluator:
    """Evaluation after every ``every`` updates (``every >= 1``) into the columns ``names`` (a
    subclass may set them at ``compile``, before the loop asks for them)."""

    def __init__(self, every: int, names: Sequence[str] = ()):
        self.every, self.names, self._once = every, tuple(names), CompileOnce()

    def updates_to_next(self, done: int) -> int:
        """Updates from ``done`` to the next evaluation (a chunk must stop there)."""
        return self.every - done % self.every

    def due(self, done: int) -> bool:
        return done > 0 and done % self.every == 0

    def columns(self, result: Optional[dict], runs: int, n: int) -> dict:
        """A chunk's ``{name: [R, n]}`` columns: NaN, but ``result`` (``{name: [R]}``) in the last
        update's column."""
        out = {k: np.full((runs, n), np.nan, np.float32) for k in self.names}
        if result is not None:
            for k in self.names:
                out[k][:, -1] = result[k]
        return out
