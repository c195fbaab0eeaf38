"""``metrics.csv``, its one owner: writing rows, reading them back, finding what survived a crash.

One row per update per run: ``seed, update, <metrics>`` (one config) or ``member, seed,
update, <metrics>`` (a sweep); run ``member * S + seed``. Rows are appended after every chunk
(:class:`MetricsWriter`), so a crash can leave a partly written LAST line: :func:`load_rows`
drops it. Floats have 9 significant digits (a float32 reads back exactly), counters are whole
numbers (``env_steps`` is counted on the host, 64-bit). A column added by hand is kept; text
where a number belongs reads as NaN, with a warning. What cannot be read (not UTF-8, a row
with the wrong number of fields, an index cell that is not a whole number) raises
:class:`~purejaxppo.run.checkpoint.CheckpointError` naming the line and the repair.
:func:`complete_updates`: the leading updates with a row for every run (where a resume may
continue from, see :func:`purejaxppo.run.run_folder.read_latest`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from typing import Callable, Optional

import numpy as np

from purejaxppo.config import PPOConfig
from purejaxppo.run.checkpoint import CheckpointError
from purejaxppo.run.guards import interrupts_deferred


def format_number(x) -> str:
    """A cell: whole numbers (ints, counters) exactly; floats with 9 significant digits, which
    round-trip any float32 (a resume re-reads earlier rows); ``nan``."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    x = float(x)
    return "nan" if math.isnan(x) else f"{x:.9g}"


def env_steps(first_update: int, n: int, batch_size: int) -> np.ndarray:
    """``int64 [n]``: :func:`purejaxppo.step.train.env_steps_after` (the one count)."""
    from purejaxppo.step.train import env_steps_after

    return env_steps_after(first_update, n, batch_size)


def with_host_counters(metrics: dict, first_update: int, batch_size: Optional[int]) -> dict:
    """``metrics`` with ``env_steps`` replaced by the host's 64-bit count (when it is there and
    ``batch_size`` is known)."""
    if batch_size is None or "env_steps" not in metrics:
        return metrics
    shape = np.shape(metrics["env_steps"])
    return dict(metrics, env_steps=np.broadcast_to(env_steps(first_update, shape[-1], batch_size), shape))


# --- reading ------------------------------------------------------------------------------
def lead_columns(header: list, path: str) -> int:
    """Number of index columns before ``update``: 1 (``seed``) or 2 (``member, seed``)."""
    if header[:2] == ["seed", "update"]:
        return 1
    if header[:3] == ["member", "seed", "update"]:
        return 2
    raise CheckpointError(
        f"{path}: unexpected header {header[:3]}; expected seed, update, ... or "
        "member, seed, update, ... (is this a metrics.csv written by purejaxppo train?)"
    )


def _number(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:  # text
        return None


def _decode(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise CheckpointError(
            f"{path} line {line} holds bytes that are not UTF-8 text ({raw[e.start : e.end]!r} at character {col}; "
            f"an edit saved in another encoding?); re-save the file as UTF-8 (or retype that cell of line {line}) "
            "and run the command again. No row needs deleting"
        ) from None


def _damaged(path: str, line: int, row: list, header: list, lead: Optional[int], why: str) -> CheckpointError:
    upd = _number(row[lead]) if lead is not None and len(row) > lead else None
    when = f"update {int(upd)}" if upd is not None and upd.is_integer() else "that line's update"
    return CheckpointError(
        f"{path} line {line} is damaged ({why}: {','.join(row)[:60]!r}). Repair it by hand: give line {line} "
        f"the {len(header)} comma-separated fields of the header ({','.join(header)[:60]}), e.g. from a backup; "
        f"or delete line {line} alone (sed -i '{line}d' {path}), and `train --resume` recomputes from the "
        f"checkpoint before {when} (same seeds, same numbers). Leave the other lines as they are"
    )


def load_table(path: str) -> tuple[list, list, list, bool]:
    """``(header, rows, lines, partial)``: the rows (lists of strings) with their line numbers,
    and whether a partly written last line was dropped. Every row has the header's fields and
    whole-number index cells; other cells may hold text (see :func:`text_cells`). An empty
    file gives ``([], [], [], False)``."""
    text = _decode(path)
    partial = bool(text) and not text.endswith("\n")
    reader = csv.reader(io.StringIO(text))
    records = [(reader.line_num, r) for r in reader]
    if partial:
        records = records[:-1]
    records = [(n, r) for n, r in records if r]
    if not records:
        return [], [], [], partial
    (_, header), body = records[0], records[1:]
    lead = lead_columns(header, path) if body else None
    widths = {len(r) for _, r in body}
    if len(body) > 1 and len(widths) == 1 and widths != {len(header)}:
        raise CheckpointError(
            f"{path}: its header (line 1) names {len(header)} columns but every row has {widths.pop()} fields; "
            f"edit line 1 so it names the rows' columns (it is {','.join(header)[:80]!r}). No row needs deleting"
        )
    for n, r in body:
        if len(r) != len(header):
            raise _damaged(path, n, r, header, lead, f"{len(r)} fields where the header has {len(header)}")
        index = [_number(x) for x in r[: lead + 1]]
        if not all(x is not None and x.is_integer() and x >= 0 for x in index):
            raise _damaged(path, n, r, header, None, f"its {', '.join(header[: lead + 1])} cells are not whole numbers")
    return header, [r for _, r in body], [n for n, _ in body], partial


def load_rows(path: str) -> tuple[list, list, bool]:
    """``(header, rows, partial)`` of :func:`load_table` (without the line numbers)."""
    return (t := load_table(path))[0], t[1], t[3]


def text_cells(header: list, rows: list, lines: list) -> dict:
    """``{column: (line, text)}``: the first cell of each column that holds text instead of a
    number (an empty cell is NaN, not text)."""
    out = {}
    for r, n in zip(rows, lines):
        for name, x in zip(header, r):
            if name not in out and x.strip() and _number(x) is None:
                out[name] = (n, x)
    return out


def complete_updates(path: str, num_runs: int, num_seeds: int) -> int:
    """How many leading updates ``0 .. K-1`` have a row for every one of ``num_runs`` runs."""
    header, rows, _ = load_rows(path)
    if not header:
        return 0
    lead = lead_columns(header, path)
    have = [set() for _ in range(num_runs)]
    for r in rows:
        idx = [int(float(x)) for x in r[: lead + 1]]
        run = idx[0] * num_seeds + idx[1] if lead == 2 else idx[0]
        if 0 <= run < num_runs:
            have[run].add(idx[lead])
    k = 0
    while all(k in h for h in have):
        k += 1
    return k


def read_metrics(
    path: str, num_runs: Optional[int] = None, max_update: Optional[int] = None, num_seeds: Optional[int] = None
) -> dict:
    """``metrics.csv`` (or a run folder) -> ``{name: float64 [R, U]}``, run ``member*S + seed``.

    Rows with ``update >= max_update`` are ignored; missing (run, update) cells, empty cells
    and text are NaN; a partly written last line is ignored. ``num_runs``/``num_seeds``
    default to what the file holds."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.csv")
    header, rows, _ = load_rows(path)
    if not header:
        return {}
    lead = lead_columns(header, path)
    cell = lambda x: math.nan if (v := _number(x)) is None else v
    data = np.array([[cell(x) for x in r] for r in rows], np.float64).reshape(-1, len(header))
    if max_update is not None:
        data = data[data[:, lead] < max_update]
    idx = data[:, :lead].astype(int)
    seeds = num_seeds or (int(idx[:, -1].max()) + 1 if len(data) else 0)
    run = idx[:, 0] * seeds + idx[:, 1] if lead == 2 else idx[:, 0]
    n_runs = num_runs or (int(run.max()) + 1 if len(data) else 0)
    updates = int(data[:, lead].max()) + 1 if len(data) else 0
    out = {}
    for j, name in enumerate(header[lead + 1 :], start=lead + 1):
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


# --- writing ------------------------------------------------------------------------------
class MetricsWriter:
    """Appends rows to ``metrics.csv``: columns ``seed, update, <names>`` for one config, or
    ``member, seed, update, <names>`` for a sweep (``num_seeds`` seeds per member; run
    ``r`` is member ``r // num_seeds``, seed ``r % num_seeds``). The header (metric names,
    sorted) is written with the first rows unless ``append`` finds it already there; then its
    columns are kept, also ones added by hand (left empty in new rows, with one warning to
    ``on_note``, default stderr). ``env_steps`` is counted on the host from ``batch_size``
    (default: the run folder's ``config.json``)."""

    def __init__(
        self,
        path: str,
        num_seeds: int = 1,
        sweep: bool = False,
        append: bool = False,
        batch_size: Optional[int] = None,
        on_note: Optional[Callable[[str], None]] = None,
    ):
        self.path, self.num_seeds, self.sweep, self.batch_size = path, num_seeds, sweep, batch_size
        self.on_note = on_note or (lambda msg: print(f"warning: {msg}", file=sys.stderr, flush=True))
        self.names: Optional[list] = None
        if not append and os.path.exists(path):
            os.remove(path)

    def _start(self, metrics: dict) -> None:
        lead = (["member"] if self.sweep else []) + ["seed", "update"]
        if self.batch_size is None:  # the run folder's (a sink used alone: the device's counter)
            try:
                with open(os.path.join(os.path.dirname(os.path.abspath(self.path)), "config.json")) as f:
                    self.batch_size = PPOConfig.from_dict(json.load(f)["config"]).batch_size
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:  # appending: keep its columns
            header, rows, lines, _ = load_table(self.path)
            self.names = header[len(lead) :]
            extra = [k for k in self.names if k not in metrics]
            missing = sorted(set(metrics) - set(self.names))
            text = {k: v for k, v in text_cells(header, rows, lines).items() if k in metrics}
            notes = [
                f"{self.path}: text where numbers belong in column(s) "
                + "; ".join(f"{k!r} (first on line {n}: {x[:30]!r})" for k, (n, x) in text.items())
                + "; read as NaN, the file is left as it is"
                if text
                else None
            ]
            if extra:
                notes.append(
                    f"{self.path} has column(s) {', '.join(map(repr, extra))} that training does not "
                    "write (added by hand?); kept as they are, new rows leave them empty"
                )
            if missing:
                notes.append(
                    f"{self.path} has no column for {', '.join(missing)}; those metrics are not recorded "
                    "in it (a new run folder records every metric)"
                )
            for note in filter(None, notes):
                self.on_note(note)
        else:
            self.names = sorted(metrics)
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(lead + self.names)

    def write(self, metrics: dict, first_update: int) -> None:
        if self.names is None:
            self._start(metrics)
        metrics = with_host_counters(metrics, first_update, self.batch_size)
        shape = np.shape(next(iter(metrics.values())))
        runs, n = shape[:2]
        arrays = [np.asarray(metrics[k]) if k in metrics else None for k in self.names]
        buf = io.StringIO()
        w = csv.writer(buf)
        for r in range(runs):
            index = [r // self.num_seeds, r % self.num_seeds] if self.sweep else [r]
            for u in range(n):
                w.writerow(index + [first_update + u] + ["" if a is None else format_number(a[r, u]) for a in arrays])
        self._append(buf.getvalue().encode())

    def _append(self, data: bytes) -> None:
        # the chunk's rows unbuffered and whole: a signal waits for the (short) write, and on a
        # failure (full disk) no partial row stays
        data = memoryview(data)
        with interrupts_deferred():
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                size = os.fstat(fd).st_size
                try:
                    while data:
                        data = data[os.write(fd, data) :]
                    os.fsync(fd)
                except BaseException:
                    try:
                        os.ftruncate(fd, size)
                    except OSError:
                        pass  # a partial last line is dropped by the next resume (load_rows)
                    raise
            finally:
                os.close(fd)

    def close(self) -> None:
        pass
