"""Learning curves from run folders: mean and spread over seeds vs env steps.

Each run's ``metrics.csv`` (one row per update per run, see :mod:`purejaxppo.run.run_folder`)
gives one line: the mean over seeds of ``metric`` (default ``episode_return``) at each
update, with a band from the min to the max over seeds. A ``member`` column (population
runs) splits a run into one line per member. Updates in which no episode finished are
NaN; they are carried forward from the last finite value so lines have no gaps. A sparse
metric (``eval_return``: only at the updates where ``--eval-every`` evaluated) is drawn
through its points, with markers; when the episode return is plotted, a run's greedy
evaluation is drawn on top of it (dashed, same colour).
"""

from __future__ import annotations

import csv
import os
import sys
from typing import Optional, Sequence

import numpy as np

SPARSE = ("eval_return", "eval_episodes")  # metrics.csv columns set only at some updates (--eval-every)


def _ffill(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs along the last axis (``[..., U]``); leading NaNs stay NaN."""
    a = np.array(a, np.float64)
    idx = np.where(np.isfinite(a), np.arange(a.shape[-1]), 0)
    np.maximum.accumulate(idx, axis=-1, out=idx)
    out = np.take_along_axis(a, idx, axis=-1)
    return out


def _number(x: str):
    """A cell as a float, or None (NaN in an array) for text or an empty cell."""
    try:
        return float(x)
    except ValueError:
        return None


def _header(path: str) -> list:
    """The first line's columns (read leniently: a foreign file gets its own message)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return next(csv.reader(f), [])


def load_curves(run_dir: str, metric: str = "episode_return") -> list[dict]:
    """``[{label, env_steps [U], values [S, U]}]``: one entry per run (or per member).

    Raises ``FileNotFoundError`` / ``KeyError`` with a clear message if the folder has no
    metrics or not that metric."""
    from purejaxppo.run.metrics_file import load_table, text_cells

    path = os.path.join(run_dir, "metrics.csv") if os.path.isdir(run_dir) else run_dir
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir!r} has no metrics.csv; pass a run folder written by purejaxppo train")
    empty = KeyError(f"{path} holds no rows yet (the run has not finished an update); train it first or leave it out")
    first = _header(path)
    if not first:
        raise empty
    if "seed" not in first or "update" not in first:
        raise KeyError(f"{path} has no seed/update columns (header {first[:3]}); pass run folders written by "
                       "purejaxppo train")
    header, body, lines, _ = load_table(path)  # damage or bytes that are not UTF-8: CheckpointError
    if not body:
        raise empty
    text = text_cells(header, body, lines)
    lead = header.index("update") + 1
    numeric = [n for n in header[lead:] if n not in text or any(_number(r[header.index(n)]) is not None for r in body)]
    if metric not in header[lead:]:
        raise KeyError(f"{path} has no metric {metric!r}; available: {', '.join(numeric)}")
    if metric in text:
        line, x = text[metric]
        if metric not in numeric:
            raise KeyError(f"{path} column {metric!r} holds text, not numbers (line {line}: {x[:30]!r}); plot one "
                           f"of: {', '.join(n for n in numeric if n not in text)}")
        print(f"warning: {path} column {metric!r} has text where numbers belong (first on line {line}: {x[:30]!r}); "
              "plotted as gaps", file=sys.stderr)
    col = {name: i for i, name in enumerate(header)}
    label = os.path.basename(os.path.normpath(run_dir))
    groups: dict = {}
    for r in body:
        member = r[col["member"]] if "member" in col else None
        groups.setdefault(member, []).append(r)
    curves = []
    for member, rs in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0])):
        seed = np.array([int(float(r[col["seed"]])) for r in rs])
        upd = np.array([int(float(r[col["update"]])) for r in rs])
        val = np.array([_number(r[col[metric]]) for r in rs], np.float64)
        S, U = seed.max() + 1, upd.max() + 1
        values = np.full((S, U), np.nan)
        values[seed, upd] = val
        if "env_steps" in col:
            steps = np.full(U, np.nan)
            steps[upd] = np.array([_number(r[col["env_steps"]]) for r in rs], np.float64)
        else:
            steps = np.arange(1, U + 1, dtype=np.float64)
        curves.append({"label": label if member is None else f"{label} [member {member}]",
                       "env_steps": steps, "values": values})
    return curves


def plot_runs(run_dirs: Sequence[str], out: str, metric: str = "episode_return",
              title: Optional[str] = None) -> str:
    """Plot mean (line) and min..max over seeds (band) of ``metric`` vs env steps for every
    run/member into ``out`` (png/pdf/svg by extension); returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run_dir in run_dirs:
        curves = load_curves(run_dir, metric)
        evals = _eval_curves(run_dir, len(curves)) if metric == "episode_return" else [None] * len(curves)
        for c, e in zip(curves, evals):
            v = _ffill(c["values"]) if metric in ("episode_return", "episode_length") else c["values"]
            n = c["values"].shape[0]
            color = _draw(ax, c["env_steps"], v, f"{c['label']} ({n} seed{'s' if n > 1 else ''})",
                          marker="o" if metric in SPARSE else None)
            if e is not None:
                _draw(ax, e["env_steps"], e["values"], f"{c['label']} greedy eval", color, "--", "o")
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title or f"{metric.replace('_', ' ')}: mean over seeds, band = min..max")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _eval_curves(run_dir: str, n: int) -> list:
    """The run's ``eval_return`` curves (one per member), or ``None`` each if it has none."""
    try:
        curves = load_curves(run_dir, "eval_return")
    except KeyError:
        return [None] * n
    return [c if np.isfinite(c["values"]).any() else None for c in curves]


def _draw(ax, steps: np.ndarray, values: np.ndarray, label: str, color=None, style: str = "-", marker=None):
    """Mean over seeds (line) and min..max band of ``values [S, U]``; updates where every seed is
    NaN are left out (so a sparse metric's points are joined). Returns the line's colour."""
    import warnings

    keep = np.isfinite(values).any(axis=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, lo, hi = (f(values[:, keep], 0) for f in (np.nanmean, np.nanmin, np.nanmax))
    (line,) = ax.plot(steps[keep], mean, style, color=color, marker=marker, markersize=3, label=label)
    if values.shape[0] > 1:
        ax.fill_between(steps[keep], lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    return line.get_color()


def plot_schedules(run_dir: str, out: str, best: Optional[int] = None) -> str:
    """A PBT run's hyperparameter schedules from its ``lineage.csv``: one panel per searched
    hyperparameter, every member's value over updates (thin steps) and, bold, the schedule the
    ``best`` member's final weights were trained with (its ancestry). Returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from purejaxppo.run.lineage import ancestry, read_lineage

    names, table = read_lineage(run_dir)
    updates = sorted(table)
    values = np.stack([table[u]["hparams"] for u in updates])  # [T, N, K]
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 2.6 * len(names)), sharex=True, squeeze=False)
    lineage = ancestry(names, table, best) if best is not None else []
    for k, (name, ax) in enumerate(zip(names, axes[:, 0])):
        for m in range(values.shape[1]):
            ax.step(updates, values[:, m, k], where="post", color="0.6", alpha=0.5, linewidth=0.8)
        if lineage:
            xs = [s["from_update"] for s in lineage] + [updates[-1]]
            ys = [s[name] for s in lineage] + [lineage[-1][name]]
            ax.step(xs, ys, where="post", color="C3", linewidth=2, label=f"best member {best} (ancestry)")
            ax.legend(fontsize=8)
        if np.all(values[..., k] > 0) and values[..., k].max() / values[..., k].min() > 20:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update")
    axes[0, 0].set_title(f"PBT schedules: {os.path.basename(os.path.normpath(run_dir))}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
