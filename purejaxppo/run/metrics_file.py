"""``metrics.csv``: reading it, and finding how much of it survived a crash.

One row per update per run: ``seed, update, <metrics>`` (one config) or ``member, seed,
update, <metrics>`` (a sweep); run ``member * S + seed``. Rows are appended after every
chunk, so a crash or a full disk can leave a partly written LAST line (no line end):
:func:`load_rows` drops it. Any other malformed row is damage nobody can explain, and
raises :class:`~purejaxppo.run.checkpoint.CheckpointError` naming the line.
:func:`complete_updates` says how many leading updates have a row for every run, which
is where a resume may safely continue from (see :func:`purejaxppo.run.run_folder.restore_latest`).
"""

from __future__ import annotations

import csv
import io
import os
from typing import Optional

import numpy as np

from purejaxppo.run.checkpoint import CheckpointError


def lead_columns(header: list, path: str) -> int:
    """Number of index columns before ``update``: 1 (``seed``) or 2 (``member, seed``)."""
    if header[:2] == ["seed", "update"]:
        return 1
    if header[:3] == ["member", "seed", "update"]:
        return 2
    raise CheckpointError(f"{path}: unexpected header {header[:3]}; expected seed, update, ... or "
                          "member, seed, update, ... (is this a metrics.csv written by purejaxppo train?)")


def load_rows(path: str) -> tuple[list, list, bool]:
    """``(header, rows, partial)``: the parsed rows (lists of strings, each complete and
    numeric) and whether a partly written last line was dropped. An empty file gives
    ``([], [], False)``."""
    with open(path, newline="") as f:
        text = f.read()
    partial = bool(text) and not text.endswith("\n")
    lines = list(csv.reader(io.StringIO(text)))
    if partial:
        lines = lines[:-1]
    if not lines:
        return [], [], partial
    header, rows = lines[0], []
    for i, r in enumerate(lines[1:], start=2):
        if not r:
            continue
        try:
            ok = len(r) == len(header) and all(isinstance(float(x), float) for x in r)
        except ValueError:
            ok = False
        if not ok:
            raise CheckpointError(f"{path} line {i} is damaged ({','.join(r)[:60]!r}); only a partly written "
                                  "LAST line can be repaired. Delete the damaged lines (or the run) by hand")
        rows.append(r)
    return header, rows, partial


def complete_updates(path: str, num_runs: int, num_seeds: int) -> int:
    """How many leading updates ``0 .. K-1`` have a row for every one of ``num_runs`` runs."""
    header, rows, _ = load_rows(path)
    if not header:
        return 0
    lead = lead_columns(header, path)
    have = [set() for _ in range(num_runs)]
    for r in rows:
        idx = [int(float(x)) for x in r[:lead + 1]]
        run = idx[0] * num_seeds + idx[1] if lead == 2 else idx[0]
        if 0 <= run < num_runs:
            have[run].add(idx[lead])
    k = 0
    while all(k in h for h in have):
        k += 1
    return k


def read_metrics(path: str, num_runs: Optional[int] = None, max_update: Optional[int] = None,
                 num_seeds: Optional[int] = None) -> dict:
    """``metrics.csv`` (or a run folder) -> ``{name: float64 [R, U]}``, run ``member*S + seed``.

    Rows with ``update >= max_update`` are ignored; missing (run, update) cells are NaN; a
    partly written last line is ignored. ``num_runs``/``num_seeds`` default to what the file holds."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.csv")
    header, rows, _ = load_rows(path)
    if not header:
        return {}
    lead = lead_columns(header, path)
    data = np.array([[float(x) for x in r] for r in rows], np.float64).reshape(-1, len(header))
    if max_update is not None:
        data = data[data[:, lead] < max_update]
    idx = data[:, :lead].astype(int)
    seeds = num_seeds or (int(idx[:, -1].max()) + 1 if len(data) else 0)
    run = idx[:, 0] * seeds + idx[:, 1] if lead == 2 else idx[:, 0]
    n_runs = num_runs or (int(run.max()) + 1 if len(data) else 0)
    updates = int(data[:, lead].max()) + 1 if len(data) else 0
    out = {}
    for j, name in enumerate(header[lead + 1:], start=lead + 1):
        a = np.full((n_runs, updates), np.nan)
        a[run, data[:, lead].astype(int)] = data[:, j]
        out[name] = a
    return out


def truncate_metrics(path: str, max_update: int) -> None:
    """Drop rows of ``metrics.csv`` with ``update >= max_update`` (written after the checkpoint
    a run resumes from) and a partly written last line, keeping the order of the others.
    The file is rewritten atomically, and only when something is dropped."""
    if not os.path.exists(path):
        return
    header, rows, partial = load_rows(path)
    if not header:
        return
    lead = lead_columns(header, path)
    keep = [r for r in rows if int(float(r[lead])) < max_update]
    if len(keep) == len(rows) and not partial:
        return
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([header] + keep)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
