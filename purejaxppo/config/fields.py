"""Settings fields that describe themselves: one declaration per field carries its default, a
help sentence, its choices and numeric bounds (and, for a command-line setting, its flag).

A config dataclass declares ``lr: float = setting(2.5e-4, "the learning rate", lo=0, lo_open=True)``;
the command line generates its ``--flag`` (parser, help, choices, range check) from it
(:mod:`purejaxppo.cli.flags`), and the config's own validation checks the same bounds
(:func:`check_fields`), so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
from typing import Callable, Optional

from purejaxppo.config.ppo_config import ConfigError


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A numeric range: ``lo`` / ``hi`` (None: unbounded), each closed unless ``*_open``;
    ``why`` says what the range protects (shown after a refusal). Values must also be finite."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""

    def describe(self) -> str:
        """``>= 1``, ``> 0``, ``<= 9`` or ``in (0, 1]``: the range as a reader writes it."""
        lo, hi = _number(self.lo), _number(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi}"
        return "a finite number"

    def holds(self, v) -> bool:
        """Whether the real number ``v`` is finite and in range (NaN fails every comparison)."""
        if not math.isfinite(v):
            return False
        above = self.lo is None or (v > self.lo if self.lo_open else v >= self.lo)
        below = self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)
        return above and below

    def refusal(self, v) -> str:
        """What is wrong with the number ``v``, for a reader: ``must be >= 1, got 0`` (the reason appended)."""
        finite = "" if math.isfinite(v) else "a finite number "
        return f"must be {finite}{self.describe()}, got {v!r}" + (f" ({self.why})" if self.why else "")

    def wanted(self, v, integer: bool = False) -> str:
        """``a positive integer``, ``an integer >= 0``, ``> 0`` or ``a finite number in [0, 1]``."""
        if integer and self.lo == 1 and not self.lo_open and self.hi is None:
            return "a positive integer"
        if integer:
            return f"an integer {self.describe()}"
        if isinstance(v, numbers.Real) and not math.isfinite(v):
            return "a finite number" if self.lo is None and self.hi is None else f"a finite number {self.describe()}"
        return self.describe()


def _number(x) -> str:
    """A bound as typed: ``1``, ``0.5``, ``4294967295`` (whole numbers in full, not ``4.29e+09``)."""
    return str(int(x)) if x is not None and float(x).is_integer() else f"{x:g}" if x is not None else ""


def setting(
    default,
    help: str,
    *,
    choices=(),
    lo=None,
    hi=None,
    lo_open: bool = False,
    hi_open: bool = False,
    why: str = "",
    flag: Optional[str] = None,
    cli: bool = True,
    switch: bool = False,
    repeat: bool = False,
    metavar: Optional[str] = None,
    static: bool = False,
):
    """A dataclass field of ``default`` described for people and checks: ``help`` (what it does),
    ``choices`` (the values allowed), bounds ``lo``/``hi`` (see :class:`Bounds`), ``flag`` (its
    command-line name, else ``--`` + the name with dashes), ``cli=False`` (no flag: set by the
    data or by another flag), ``switch`` (a flag without a value), ``repeat`` (a flag given once
    per item), ``metavar`` (its value's name in ``--help``), ``static`` (a flax struct's
    structural field, in the treedef)."""
    bounds = Bounds(lo, hi, lo_open, hi_open, why) if lo is not None or hi is not None else None
    meta = dict(help=help, choices=tuple(choices), bounds=bounds, flag=flag, cli=cli, switch=switch, repeat=repeat)
    meta["metavar"] = metavar
    if static:
        meta["pytree_node"] = False
    return dataclasses.field(default=default, metadata=meta)


def field_bounds(f: dataclasses.Field) -> Optional[Bounds]:
    return f.metadata.get("bounds")


def field_choices(f: dataclasses.Field) -> tuple:
    return f.metadata.get("choices", ())


def spelled(name: str, value=dataclasses.MISSING, flag_of: Optional[Callable[[str], str]] = None) -> str:
    """A field (and its value) in the reader's words: ``batch_size=8`` for the Python API,
    ``--batch 8`` when ``flag_of`` maps fields to the flags the user typed."""
    if value is dataclasses.MISSING:
        return flag_of(name) if flag_of else name
    return f"{flag_of(name)} {value!r}" if flag_of else f"{name}={value!r}"


def check_fields(obj, flag_of: Optional[Callable[[str], str]] = None) -> None:
    """Every field of ``obj`` that declares choices or bounds, checked: :class:`ConfigError`
    naming the first bad one (as :func:`spelled`) and the range. Values that are not concrete
    Python numbers (traced or stacked arrays, in a population) are the caller's to check; a
    field with a whole-number default must hold a whole number."""
    for f in dataclasses.fields(obj):
        v, bounds, choices = getattr(obj, f.name), field_bounds(f), field_choices(f)
        if choices and v not in choices:
            raise ConfigError(f"{spelled(f.name, v, flag_of)} must be one of {choices}")
        if bounds is None:
            continue
        integer = isinstance(f.default, int) and not isinstance(f.default, bool)
        concrete = isinstance(v, numbers.Real) and not isinstance(v, bool)
        if (integer and not isinstance(v, numbers.Integral)) or (integer and isinstance(v, bool)):
            raise ConfigError(f"{spelled(f.name, v, flag_of)} must be {bounds.wanted(v, True)}")
        if not concrete and f.metadata.get("pytree_node", True) is False:  # a structural field is never traced
            raise ConfigError(f"{spelled(f.name, v, flag_of)} must be a number {bounds.describe()}")
        if concrete and not bounds.holds(v):
            why = f" ({bounds.why})" if bounds.why else ""
            raise ConfigError(f"{spelled(f.name, v, flag_of)} must be {bounds.wanted(v, integer)}{why}")


def documented(cls):
    """``cls`` (a dataclass of :func:`setting` fields) with an ``Attributes:`` section appended to
    its docstring, written from the declarations (help, default, choices, range): the fields are
    documented where they are declared, once, and ``help(cls)`` shows them."""
    lines = []
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        extra = [f"default {f.default!r}"]
        if field_choices(f):
            extra.append("one of " + ", ".join(map(str, field_choices(f))))
        if field_bounds(f) is not None:
            extra.append(field_bounds(f).describe())
        lines.append(f"  {f.name}: {f.metadata['help']} ({'; '.join(extra)}).")
    cls.__doc__ = inspect.cleandoc(cls.__doc__ or "") + "\n\nAttributes:\n" + "\n".join(lines) + "\n"
    return cls
