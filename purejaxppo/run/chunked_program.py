"""What every run kind's program does alike (:class:`~purejaxppo.run.protocol.RunProgram`'s
methods but ``init`` and ``kind_for``): compiled ``n``-update chunks, built once per length and
compiled once per input signature; the NaN stop; where the per-run training state lies."""

from __future__ import annotations

from typing import Callable, Optional

from purejaxppo.run.compile_once import CompileOnce, signature
from purejaxppo.run.guards import first_non_finite


class ChunkedProgram:
    """Chunks, the NaN stop and the training state of one run kind.

    Contract for a subclass: call ``super().__init__()``; implement ``build_chunk(n)``, a jitted
    function of :meth:`chunk_args` returning ``((state, metrics {name: [R, n]}), finite [R])``;
    set ``nan_by_design``: the prefixes of metric names that are NaN by design between the
    updates that fill them (left out of the NaN stop)."""

    nan_by_design: tuple = ()

    def __init__(self):
        self._chunks, self._once = {}, CompileOnce()

    def build_chunk(self, n: int) -> Callable:
        raise NotImplementedError

    def chunk_args(self, state, configs) -> tuple:
        """The chunk's arguments: ``(state,)``, or ``(state, configs)`` for stacked configs."""
        return (state,) if configs is None else (state, configs)

    def chunk_fn(self, n: int) -> Callable:  # built once per n
        if n not in self._chunks:
            self._chunks[n] = self.build_chunk(n)
        return self._chunks[n]

    def compile(self, n: int, state, configs=None) -> float:
        """Compile the ``n``-update chunk for these inputs (once); the seconds it took (0.0 when
        it already was). The call in :meth:`chunk` reuses it (jit's own cache)."""
        args = self.chunk_args(state, configs)
        return self._once((n, signature(args)), lambda: self.chunk_fn(n).lower(*args).compile())

    def chunk(self, n: int, state, configs=None):
        """``n`` updates of every run -> ``((state, metrics {name: [R, n]}), finite [R])``,
        dispatched asynchronously."""
        return self.chunk_fn(n)(*self.chunk_args(state, configs))

    def check_finite(self, metrics: dict, finite, first_update: int, describe) -> Optional[str]:
        """The NaN stop: the first non-finite metric (outside ``nan_by_design``) or state, in words."""
        kept = {k: v for k, v in metrics.items() if not k.startswith(self.nan_by_design)}
        return first_non_finite(kept, finite, first_update, describe)

    def place(self, *inputs) -> tuple:
        return inputs  # one device, or a kind whose program places its own inputs

    def counters(self, first_update: int, n: int) -> dict:
        return {}

    def training_state(self, state):
        return state  # the state is the per-run runner itself

    def with_training_state(self, state, runner):
        return runner
