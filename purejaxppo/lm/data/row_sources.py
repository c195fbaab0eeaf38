"""Datasets of rows with columns, as :class:`~purejaxppo.lm.data.prompts.Record` lists.

A source is one of:

* a ``.jsonl`` / ``.txt`` prompt file (:func:`~purejaxppo.lm.data.prompts.read_records`);
* a ``.parquet`` file (pyarrow), a row per record;
* a folder written by ``datasets``' ``save_to_disk`` (``datasets.load_from_disk``; nothing is
  downloaded), a ``DatasetDict``'s split chosen by ``split`` (default ``"train"``, or its only one);
* ``reasoning-gym:NAME``: ``size`` entries of a reasoning-gym generator drawn with ``seed``
  (``config``: the generator's own options): the ``question`` is the prompt, the ``answer`` and
  ``metadata`` columns are kept, and so is the whole ``entry`` (the ``reasoning-gym`` reward
  calls its generator's scorer on it).

Every column of a row but the prompt's reaches a Python reward by name
(:mod:`purejaxppo.lm.rewards.reward_columns`). The formats past JSONL need the ``rlvr`` extra,
imported when first used. :func:`split_rows` holds out a seeded share of the rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Optional, Union

import numpy as np

from purejaxppo.lm.data.prompts import FORMATS, PromptFileError, read_records, row_record
from purejaxppo.lm.rewards.reward_columns import optional_import

GYM = "reasoning-gym:"
DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")


def absolute(source: str) -> str:
    """A source as a run records it: a file or folder's absolute path (a resume may start
    elsewhere); a generator (``reasoning-gym:NAME``) as given."""
    return source if source.startswith(GYM) else os.path.abspath(source)


def source_kind(source: str) -> str:
    """``"file"`` (``.jsonl`` / ``.txt``), ``"parquet"``, ``"datasets"`` (a saved folder) or
    ``"reasoning-gym"``; a source of none of these kinds is refused."""
    if source.startswith(GYM):
        return "reasoning-gym"
    if os.path.isdir(source):
        if any(os.path.isfile(os.path.join(source, f)) for f in DATASET_FILES):
            return "datasets"
        raise PromptFileError(f"{source} is a folder but not one saved by datasets' save_to_disk")
    ext = os.path.splitext(source)[1].lower()
    if ext == ".parquet":
        return "parquet"
    if ext in FORMATS:
        return "file"
    raise PromptFileError(
        f"{source}: expected a .jsonl, .txt or .parquet file, a folder saved by datasets' "
        "save_to_disk, or reasoning-gym:NAME"
    )


def read_rows(
    source: str,
    *,
    columns: Optional[dict] = None,
    need_response: bool = False,
    size: Optional[int] = None,
    seed: Optional[int] = None,
    config: Optional[dict] = None,
    split: Optional[str] = None,
) -> list:
    """Read a dataset's rows as records with columns.

    Args:
      source: a file, a saved ``datasets`` folder or ``reasoning-gym:NAME`` (the module's list).
      columns: a column map ``{name: column of the source}``: ``"prompt"`` names the prompt's
        column, any other entry renames a column (:func:`~purejaxppo.lm.data.prompts.row_record`).
      need_response: SFT data: every row needs a ``"response"`` string.
      size, seed, config: ``reasoning-gym`` only: how many entries (default 1000), the
        generator's seed (default 0) and its options.
      split: a saved ``DatasetDict``'s split (default ``"train"``, or its only one).

    Returns:
      A list of :class:`~purejaxppo.lm.data.prompts.Record`, each with its :attr:`columns`.

    Raises:
      PromptFileError: an unknown source, a row that is not a record (named by its source and
        row), options the source does not take, or no rows.
      MissingExtraError: the source's optional package is not installed (the message names
        the extra to install).
    """
    kind = source_kind(source)
    if kind != "reasoning-gym" and (size is not None or seed is not None or config):
        raise PromptFileError(f"{source}: size, seed and config are options of reasoning-gym:NAME sources only")
    if kind != "datasets" and split is not None:
        raise PromptFileError(f"{source}: a split is chosen only in a folder saved by datasets' save_to_disk")
    if kind == "file":
        return read_records(source, need_response, columns)
    if kind == "reasoning-gym":
        rows, name = _gym_rows(source, size, seed, config), source
    elif kind == "parquet":
        pq = optional_import("pyarrow.parquet", "reading a .parquet file")
        try:
            rows = pq.read_table(source).to_pylist()
        except Exception as e:  # pyarrow's own errors: not a Parquet file, unreadable
            raise PromptFileError(f"{source} cannot be read as Parquet ({type(e).__name__}: {e})") from None
        name = source
    else:
        rows, name = _dataset_rows(source, split)
    out = [row_record(r, f"{name}:row {i}", need_response, columns) for i, r in enumerate(rows)]
    if not out:
        raise PromptFileError(f"{source} holds no rows")
    return out


def _dataset_rows(folder: str, split: Optional[str]) -> tuple:
    datasets = optional_import("datasets", "reading a folder saved by datasets' save_to_disk")
    try:
        ds = datasets.load_from_disk(folder)
    except Exception as e:
        raise PromptFileError(f"{folder} cannot be read by datasets.load_from_disk ({type(e).__name__}: {e})") from None
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds)
        if split is None:
            split = "train" if "train" in names else (names[0] if len(names) == 1 else None)
        if split not in names:
            raise PromptFileError(f"{folder} holds the splits {', '.join(names)}; choose one (split=...)")
        ds = ds[split]
        return ds.to_list(), f"{folder}[{split}]"
    if split is not None:
        raise PromptFileError(f"{folder} holds one dataset, no splits; leave split out")
    return ds.to_list(), folder


def _gym_rows(source: str, size: Optional[int], seed: Optional[int], config: Optional[dict]) -> list:
    name = source[len(GYM) :]
    rg = optional_import("reasoning_gym", f"the source {source}")
    size, seed = 1000 if size is None else int(size), 0 if seed is None else int(seed)
    if size < 1:
        raise PromptFileError(f"{source}: size must be >= 1, not {size}")
    try:
        data = rg.create_dataset(name, size=size, seed=seed, **(config or {}))
        entries = [data[i] for i in range(size)]
    except Exception as e:  # an unknown name, a bad option: reasoning-gym's own message
        raise PromptFileError(
            f"{source} (size={size}, seed={seed}, config={config}): {type(e).__name__}: {e}"
        ) from None
    return [
        {"question": e["question"], "answer": e["answer"], "metadata": e.get("metadata"), "entry": e} for e in entries
    ]


def split_rows(records: list, held_out: Union[int, float], seed: int = 0) -> tuple:
    """Hold out a seeded share of the rows (an evaluation set).

    Args:
      records: the rows.
      held_out: a fraction in ``(0, 1)`` (rounded, at least one row) or a count ``>= 1`` of
        rows to hold out; 0 holds out none.
      seed: the shuffle's seed: the same seed and rows give the same split.

    Returns:
      ``(train, held)``: two lists of the records, each in the source's order.

    Raises:
      PromptFileError: a negative share, or one that leaves no training row.
    """
    n = len(records)
    if held_out < 0 or (isinstance(held_out, float) and held_out >= 1 and not float(held_out).is_integer()):
        raise PromptFileError(f"held out {held_out}: give a fraction in (0, 1) or a count of rows")
    k = int(held_out) if held_out >= 1 else (max(1, round(n * held_out)) if held_out > 0 else 0)
    if k >= n:
        raise PromptFileError(f"holding out {k} of {n} rows leaves none to train on; hold out fewer")
    held = set(np.random.default_rng(seed).permutation(n)[:k].tolist())
    return [r for i, r in enumerate(records) if i not in held], [r for i, r in enumerate(records) if i in held]


def parse_column_map(text: str) -> dict:
    """``"prompt=problem,answer=solution"`` -> ``{"prompt": "problem", "answer": "solution"}``
    (a flag's form of a column map); a malformed entry is refused (:class:`PromptFileError`)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, col = (x.strip() for x in part.partition("="))
        if not sep or not name or not col:
            raise PromptFileError(
                f"column map {text!r}: each entry is NAME=COLUMN (e.g. prompt=problem,answer=solution)"
            )
        out[name] = col
    return out


def source_hash(source: str, options: Optional[dict] = None) -> str:
    """sha256 of what a source reads: a file's bytes, a saved folder's files (by name), or a
    reasoning-gym source's spec and options (its rows are a function of them)."""
    h = hashlib.sha256()
    kind = source_kind(source)
    if kind == "reasoning-gym":
        h.update(json.dumps([source, options or {}], sort_keys=True, default=str).encode())
        return h.hexdigest()
    paths = [source]
    if kind == "datasets":
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(source) for f in fs)
    for path in paths:
        h.update(os.path.relpath(path, os.path.dirname(source)).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
