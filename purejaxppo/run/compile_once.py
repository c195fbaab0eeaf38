"""Compile each distinct input signature once and time it: the one rule every program shares."""

from __future__ import annotations

import time
from typing import Callable, Hashable

import jax


def signature(args) -> tuple:
    """Everything about the arguments that compiles separately: tree, shapes, dtypes, weak types,
    shardings and committed-ness."""
    return (
        str(jax.tree.structure(args)),
        tuple(
            (
                tuple(x.shape),
                str(x.dtype),
                bool(getattr(x, "weak_type", False)),
                str(getattr(x, "sharding", "")),
                getattr(x, "committed", None),
            )
            for x in jax.tree.leaves(args)
        ),
    )


class CompileOnce:
    """``once(key, compile) -> seconds``: runs ``compile()`` the first time ``key`` is seen and
    returns how long it took; 0.0 for a key seen before."""

    def __init__(self):
        self._seen = set()

    def __call__(self, key: Hashable, compile: Callable[[], object]) -> float:
        if key in self._seen:
            return 0.0
        t = time.perf_counter()
        compile()
        self._seen.add(key)
        return time.perf_counter() - t

    def __contains__(self, key: Hashable) -> bool:
        return key in self._seen
