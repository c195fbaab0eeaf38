"""Every run kind, registered: importing this module loads each ``*_kind.py`` module here.

A kind is one object meeting :class:`purejaxppo.run.kinds.RunKind`, registered by its own
module (``kinds.register(MyKind())`` at its end): plain runs and sweeps (:mod:`.run_kind`),
PBT (:mod:`.pbt_kind`), token-level PPO (:mod:`.rlhf_kind`), reward models
(:mod:`.reward_kind`). A new kind is registered by a new ``<name>_kind.py`` module and
nothing else; its name appears there and in the program that records it, nowhere else. Commands look a
folder's kind up (:func:`folder`) and ask it, or ask which kinds offer an optional method
(:func:`offering`); they never compare kind names. :mod:`purejaxppo.programs` imports this
module, so any import of a program or front door has every kind registered.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Tuple

from purejaxppo.run import run_folder as rf
from purejaxppo.run.kinds import RunKind, kind_named, kind_of, known, offering, resume_hint  # noqa: F401  (the registry's API, here)
from purejaxppo.run.record import RunRecord

for _module in pkgutil.iter_modules([os.path.dirname(os.path.abspath(__file__))]):
    if _module.name.endswith("_kind"):
        importlib.import_module(f"{__package__}.{_module.name}")


def folder(run_dir: str) -> Tuple[RunKind, RunRecord]:
    """``(kind, record)`` of a run folder (any layout version); a missing, damaged or unknown
    folder raises :class:`~purejaxppo.run.checkpoint.CheckpointError` saying so."""
    raw = rf.read_raw(run_dir)
    return kind_of(raw)[0], rf.record_of(raw, os.path.join(run_dir, rf.CONFIG))


def load(run_dir: str, checkpoint=None):
    """The trained state of a run folder of any kind: its :class:`~purejaxppo.run.kinds.Loaded`
    (record, per-run state ``[R, ...]``, what plays it, checkpoint and update)."""
    kind, record = folder(run_dir)
    return kind.load(run_dir, record, checkpoint)
