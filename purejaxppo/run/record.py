"""The run record: what ``config.json`` (and every checkpoint's ``meta.json``) says about a run.

:class:`RunRecord` is typed and versioned. Layout version 2 (written now)::

    {"version": 2, "kind": NAME, "config": {...}, "settings": {...} | null, "seed", "num_seeds",
     "members", "chunk_updates", "num_devices", "split", "checkpoint_every", "eval_every",
     "eval_episodes", "init_from", <notes>, "versions", "resumes"}

Version 1 (no ``version`` key, folders written before this module): the kind's settings sat
under the kind's own name (``"pbt": {...}``), ``kind`` could be missing (then the registry's
default kind reads it, :func:`purejaxppo.run.kinds.kind_of`) and the counts had no defaults
written. :func:`from_json` reads both; a folder keeps the layout it was written with except
for what a resume appends (``resumes``), so an old folder resumes exactly.

Defaults live here once (:data:`CHUNK_UPDATES`, :data:`CHECKPOINT_EVERY`, :data:`EVAL_EPISODES`);
a kind that wants others passes its own when it builds a record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from purejaxppo.run import kinds
from purejaxppo.run.checkpoint import CheckpointError, list_checkpoints

CONFIG = "config.json"
VERSION = 2
CHUNK_UPDATES = 25  # updates per compiled chunk, unless the user or the kind says otherwise
CHECKPOINT_EVERY = 10  # chunks between checkpoints
EVAL_EPISODES = 10  # greedy episodes per evaluation during training
#: entries a kind may keep for people (never read to rebuild the program): the reference a
#: run reproduces, the SFT model's own evaluation, the prompts and responses a reward run cut
NOTES = ("reference", "sft", "cuts")


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run folder's setup. ``kind``: the registered kind's name as recorded; ``config``: the
    kind's config object; ``settings``: the kind's own settings object (or None); runs are
    ``num_seeds`` seeds of each of ``members`` (``[{field: value}]``; None: one config);
    ``chunk_updates``/``checkpoint_every``: the loop's pace; ``num_devices``/``split``: the
    layout; ``eval_every``/``eval_episodes``: evaluation during training (None: off);
    ``init_from``: the warm-start record (:mod:`purejaxppo.run.warm_start`); ``notes``:
    ``{name: value}`` of :data:`NOTES`."""

    kind: str
    config: Any
    settings: Any = None
    seed: int = 0
    num_seeds: int = 1
    members: Optional[list] = None
    chunk_updates: int = CHUNK_UPDATES
    num_devices: int = 1
    split: str = "seeds"
    checkpoint_every: int = CHECKPOINT_EVERY
    eval_every: Optional[int] = None
    eval_episodes: int = EVAL_EPISODES
    init_from: Optional[dict] = None
    notes: dict = dataclasses.field(default_factory=dict)
    version: int = VERSION

    @property
    def runs(self) -> int:
        """``R = M * S``: members (1 for one config) times seeds."""
        return self.num_seeds * len(self.members or [None])

    def replace(self, **changes) -> "RunRecord":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        """The ``config.json`` entries of this record (the current layout)."""
        out = {
            "version": VERSION,
            "kind": self.kind,
            "config": self.config.to_dict(),
            "settings": None if self.settings is None else self.settings.to_dict(),
        }
        for f in dataclasses.fields(self):
            if f.name not in ("kind", "config", "settings", "notes", "version"):
                out[f.name] = getattr(self, f.name)
        return {**out, **{k: v for k, v in self.notes.items() if k in NOTES}}


def from_json(raw: dict, kind: str, config_type, settings_type=None) -> "RunRecord":
    """The record of ``raw`` (a ``config.json`` of layout 1 or 2) for the kind recorded as ``kind``;
    ``config_type``/``settings_type``: the kind's classes (``from_dict``). Raises ``KeyError``,
    ``TypeError`` or ``ValueError`` on a damaged record (the caller names the file)."""
    version = raw.get("version", 1)
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(f"layout version {version!r} is newer than this purejaxppo reads ({VERSION})")
    settings = raw.get("settings") if version >= 2 else raw.get(kind)  # layout 1: under the kind's name
    if settings_type is not None and not isinstance(settings, dict):
        raise KeyError(f"a {kind!r} record without its settings")
    fields = {
        f.name: f.default
        for f in dataclasses.fields(RunRecord)
        if f.default is not dataclasses.MISSING and f.name not in ("settings", "version")
    }
    given = {k: raw[k] for k in fields if k in raw and raw[k] is not None}
    return RunRecord(
        **{
            **fields,
            **given,
            "kind": kind,
            "version": version,
            "config": config_type.from_dict(raw["config"]),
            "seed": int(raw["seed"]),
            "num_seeds": int(raw["num_seeds"]),
            "members": raw.get("members"),
            "eval_every": raw.get("eval_every"),
            "init_from": raw.get("init_from"),
            "settings": None if settings_type is None else settings_type.from_dict(settings),
            "notes": {k: raw[k] for k in NOTES if k in raw},
        }
    )


# --- reading a folder's record -----------------------------------------------------------
def read_json(path: str) -> dict:
    with open(path) as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    return raw


def read_raw(run_dir: str) -> dict:
    """The run folder's ``config.json`` as JSON; a missing or damaged one raises
    :class:`CheckpointError` saying what the folder is instead."""
    path = os.path.join(run_dir, CONFIG)
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise CheckpointError(f"{run_dir!r} is a file, not a run folder; pass a folder written with --run-dir")
    if not os.path.isdir(run_dir):
        raise CheckpointError(f"run folder {run_dir!r} does not exist; pass a folder written with --run-dir")
    if not os.path.exists(path):
        left = [n for n in os.listdir(run_dir) if not n.startswith(".")]
        if not left or left == ["checkpoints"] and not list_checkpoints(os.path.join(run_dir, "checkpoints")):
            raise CheckpointError(
                f"{run_dir!r} holds no run yet (its training stopped during startup, before "
                f"config.json was written); start it again with the same command and "
                f"--run-dir {run_dir}"
            )
        raise CheckpointError(
            f"{run_dir!r} has no config.json, so it is not a purejaxppo run folder; "
            "pass a folder written with --run-dir"
        )
    try:
        return read_json(path)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is damaged ({e}); it cannot be resumed or evaluated") from None


def record_of(raw: dict, path: str) -> RunRecord:
    """The typed record of a ``config.json`` or checkpoint ``meta.json`` (``raw``), read by its kind."""
    if "kind" not in raw and not {"config", "seed", "num_seeds"} <= set(raw):  # e.g. a model folder's config.json
        raise CheckpointError(
            f"{path} is not a purejaxppo run record (no config, seed, num_seeds); pass a folder written with --run-dir"
        )
    kind, name = kinds.kind_of(raw)
    try:
        return from_json(raw, name, kind.config_type, kind.settings_type)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path} is damaged ({e}); it cannot be resumed or evaluated") from None


def load_record(run_dir: str) -> RunRecord:
    """The run folder's record (:class:`~purejaxppo.run.record.RunRecord`), old layouts included."""
    return record_of(read_raw(run_dir), os.path.join(run_dir, CONFIG))
