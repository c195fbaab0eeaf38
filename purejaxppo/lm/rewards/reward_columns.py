"""The calling convention of Python rewards on text, TRL's: ``fn(prompts, completions,
**columns) -> list[float | None]``.

* ``prompts``, ``completions``: one string per completion (a prompt repeated for each of its
  group's completions).
* ``columns``: every other column of each completion's dataset row, ``{name: [value per
  completion]}`` (None where a row lacks it), plus ``completion_ids`` (the completion's token
  ids, stop and padding stripped). A function receives only the columns it names as
  parameters, or all of them when it takes ``**kwargs``: ``fn(prompts, completions)`` (the
  two-argument form) gets none and keeps working unchanged.
* The result: one value per completion, a finite number or None, "not applicable" (the row
  has nothing this reward scores, e.g. no gold answer). None is counted (the fraction scored is
  a statistic) and contributes 0: to the score of a single reward, and to the weighted sum of
  :func:`~purejaxppo.lm.rewards.reward_mix.combine` (whose per-reward means leave it out).

Optional dependencies (math-verify, reasoning-gym, datasets, pyarrow) are imported when first
used, through :func:`optional_import`, whose error names the extra to install.
"""

from __future__ import annotations

import importlib
import inspect
import math
import threading
from typing import Callable, Optional

EXTRA = 'pip install "purejaxppo[rlvr]"'


class MissingExtraError(ImportError):
    """An optional dependency is not installed: the message names it and the extra to install."""


def optional_import(module: str, what: str):
    """``module`` imported, or :class:`MissingExtraError` naming ``what`` needs it and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{what} needs the optional package {module.split('.')[0]!r} ({e}); install it with {EXTRA}"
        ) from None


def accepted_columns(fn: Callable) -> Optional[frozenset]:
    """The column names ``fn`` takes by keyword past its first two parameters; None: all of
    them (``**kwargs``). A callable without a readable signature takes none."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    skip = {p.name for p in positional[:2]}
    return frozenset(
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip
    )


def required_columns(fn: Callable) -> list:
    """The columns ``fn`` needs: the keyword parameters past its first two without a default."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    skip = {p.name for p in positional[:2]}
    return [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip and p.default is p.empty
    ]


def reward_kwargs(fn: Callable, columns: dict) -> dict:
    """The part of ``columns`` that ``fn`` takes (:func:`accepted_columns`)."""
    names = accepted_columns(fn)
    return dict(columns) if names is None else {k: v for k, v in columns.items() if k in names}


def call_reward(fn: Callable, name: str, prompts: list, completions: list, columns: dict) -> list:
    """``fn(prompts, completions, **the columns it takes)``, its result checked (:func:`check_values`).

    Returns:
      One ``float`` or None per completion.
    """
    return check_values(fn(prompts, completions, **reward_kwargs(fn, columns)), name, prompts, completions)


def check_values(values, name: str, prompts: list, completions: list) -> list:
    """A reward function's result as one ``float`` or None per completion.

    Raises:
      ValueError: not a list of numbers and Nones, the wrong length, or a non-finite number
        (the message names the function ``name`` and the row).
    """
    try:
        out = [None if v is None else float(v) for v in values]
    except (TypeError, ValueError) as e:
        raise ValueError(f"the reward function {name} must return a list of numbers (or None) ({e})") from None
    if len(out) != len(prompts):
        raise ValueError(
            f"the reward function {name} returned {len(out)} values for {len(prompts)} rows; "
            "return one number (or None) per (prompt, completion) pair"
        )
    for i, v in enumerate(out):
        if v is not None and not math.isfinite(v):
            raise ValueError(
                f"the reward function {name} returned {v} for row {i} (prompt {prompts[i]!r}, "
                f"response {completions[i]!r}); return finite numbers (or None: not applicable)"
            )
    return out


class Tally:
    """Running sums a reward keeps between two :meth:`take` calls (thread-safe: callbacks of
    several devices may score at once).

    Attributes:
      counts: ``{key: float}`` accumulated since the last :meth:`take`.
    """

    def __init__(self):
        self.counts: dict = {}
        self._lock = threading.Lock()

    def add(self, **amounts) -> None:
        """Add ``amounts`` to the counts."""
        with self._lock:
            for k, v in amounts.items():
                self.counts[k] = self.counts.get(k, 0.0) + float(v)

    def take(self) -> dict:
        """The counts since the last take, reset to none."""
        with self._lock:
            out, self.counts = self.counts, {}
        return out


def ratio(num: float, den: float) -> float:
    """``num / den``, NaN when ``den`` is 0 (nothing was scored: no number to log)."""
    return num / den if den else float("nan")
