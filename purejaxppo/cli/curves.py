"""Learning curves read from run folders: one :class:`Curve` per run (or per member of a sweep
or population), its x axes, and a label from the run's ``config.json``.

Kind-agnostic: a run folder is ``metrics.csv`` (``[member,] seed, update, <metrics>``, see
:mod:`purejaxppo.run.metrics_file`), ``config.json`` and, once a session ended, ``summary.json``;
what is plotted is whatever columns the file has. The headline metrics are the first set of
:data:`HEADLINES` every run has (a control run's ``episode_return``; a token-level run's
``score`` and ``kl``, or ``score`` alone at beta 0).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import NamedTuple, Optional, Sequence

import numpy as np

# a token-level run at beta 0 runs no reference pass (nothing reads it) and logs no kl
HEADLINES = (("episode_return",), ("score", "kl"), ("score",))
X_AXES = ("env_steps", "updates", "time")
X_LABELS = {
    "env_steps": "env steps (per run)",
    "updates": "updates",
    "time": "training time (s, at the run's measured speed)",
}


class Curve(NamedTuple):
    """One run's (or member's) metric over updates: ``values [S, U]`` (NaN: no value at that
    update), ``env_steps [U]`` per run (``updates`` where the file has no such column),
    ``updates [U]`` (1, 2, ...)."""

    label: str
    run_dir: str
    member: Optional[int]
    updates: np.ndarray
    env_steps: np.ndarray
    values: np.ndarray


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


def metric_columns(run_dir: str) -> list:
    """The metric columns of ``run_dir``'s metrics.csv (after ``update``), from its header."""
    first = _header(os.path.join(run_dir, "metrics.csv"))
    return first[first.index("update") + 1 :] if "update" in first else []


def headline_metrics(run_dirs: Sequence[str]) -> list:
    """The first of :data:`HEADLINES` whose columns every readable run has; ``KeyError`` if none."""
    have = [set(c) for c in map(metric_columns, run_dirs) if c]  # an empty or foreign file: the loader says why
    for names in HEADLINES:
        if all(set(names) <= h for h in have):
            return list(names)
    raise KeyError(
        "the runs share none of the default metrics ("
        + "; ".join(",".join(h) for h in HEADLINES)
        + "); name the columns to draw with --metric a,b"
    )


def load_curves(run_dir: str, metric: str = "episode_return") -> list:
    """``[Curve]``: one per run (or per member, in member order). Labels are the folder's
    name here (:func:`labels` gives the config's). Raises ``FileNotFoundError`` / ``KeyError``
    with a clear message if the folder has no metrics or not that metric."""
    from purejaxppo.run.metrics_file import load_table, text_cells

    path = os.path.join(run_dir, "metrics.csv") if os.path.isdir(run_dir) else run_dir
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir!r} has no metrics.csv; pass a run folder written by purejaxppo train")
    empty = KeyError(f"{path} holds no rows yet (the run has not finished an update); train it first or leave it out")
    first = _header(path)
    if not first:
        raise empty
    if "seed" not in first or "update" not in first:
        raise KeyError(
            f"{path} has no seed/update columns (header {first[:3]}); pass run folders written by purejaxppo train"
        )
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
            raise KeyError(
                f"{path} column {metric!r} holds text, not numbers (line {line}: {x[:30]!r}); plot one "
                f"of: {', '.join(n for n in numeric if n not in text)}"
            )
        print(
            f"warning: {path} column {metric!r} has text where numbers belong (first on line {line}: {x[:30]!r}); "
            "plotted as gaps",
            file=sys.stderr,
        )
    col = {name: i for i, name in enumerate(header)}
    label = os.path.basename(os.path.normpath(run_dir))
    groups: dict = {}
    for r in body:
        member = int(float(r[col["member"]])) if "member" in col else None
        groups.setdefault(member, []).append(r)
    curves = []
    for member, rs in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0])):
        seed = np.array([int(float(r[col["seed"]])) for r in rs])
        upd = np.array([int(float(r[col["update"]])) for r in rs])
        val = np.array([_number(r[col[metric]]) for r in rs], np.float64)
        S, U = seed.max() + 1, upd.max() + 1
        values = np.full((S, U), np.nan)
        values[seed, upd] = val
        updates = np.arange(1, U + 1, dtype=np.float64)
        if "env_steps" in col:
            steps = np.full(U, np.nan)
            steps[upd] = np.array([_number(r[col["env_steps"]]) for r in rs], np.float64)
        else:
            steps = updates
        curves.append(
            Curve(label if member is None else f"{label} [member {member}]", run_dir, member, updates, steps, values)
        )
    return curves


def x_values(curve: Curve, axis: str, num_runs: int) -> np.ndarray:
    """``[U]``: the curve's x on ``axis`` (:data:`X_AXES`). ``time``: seconds of training at the
    speed the run's ``summary.json`` recorded for its last session (compile excluded): env steps
    of all ``num_runs`` runs over its ``steps_per_s``, or, without an env-steps column, updates
    times ``run_s`` over the updates in the file (one session assumed). ``KeyError`` (a message
    naming the fix) when the run cannot give that axis."""
    where = os.path.normpath(curve.run_dir)
    if axis == "updates":
        return curve.updates
    has_steps = "env_steps" in metric_columns(curve.run_dir)
    if axis == "env_steps":
        if not has_steps:
            raise KeyError(
                f"--x env_steps: {where} has no env_steps column (its updates are iterations); "
                "use --x updates or --x time"
            )
        return curve.env_steps
    try:
        with open(os.path.join(curve.run_dir, "summary.json")) as f:
            summary = json.load(f)
        run_s, rate = float(summary["run_s"]), float(summary["steps_per_s"])
    except (OSError, ValueError, KeyError, TypeError):
        raise KeyError(
            f"--x time: {where} has no readable summary.json with run_s and steps_per_s (a session "
            "not finished yet); use --x env_steps or --x updates"
        ) from None
    if has_steps:
        return curve.env_steps * num_runs / rate
    return curve.updates * run_s / curve.updates[-1]


def _read_config(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = tuple(v) if isinstance(v, list) else v
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return ",".join(_fmt(x) for x in v)
    return str(v)


def _task(info: dict) -> Optional[str]:
    """What the run learns: the config's ``env_name``, else a ``task`` named in any section."""
    env = (info.get("config") or {}).get("env_name")
    if env:
        return str(env)
    for section in info.values():
        if isinstance(section, dict) and isinstance(section.get("task"), str):
            return section["task"]
    return None


def labels(curves: Sequence[Curve], max_fields: int = 3) -> list:
    """A legend label per curve from its run's ``config.json``: what it learns (env or task),
    the config fields whose values differ between the runs drawn (at most ``max_fields``), and
    a sweep member's own values (``lr=0.001``). A population member whose hyperparameters change
    during the run (``lineage.csv``) is ``member k``. Labels that would coincide get the folder name."""
    infos = {c.run_dir: _read_config(c.run_dir) for c in curves}
    flat = {d: _flat(i.get("config") or {}) for d, i in infos.items()}
    keys = sorted(set().union(*flat.values())) if flat else []
    differ = [k for k in keys if k != "env_name" and len({repr(f.get(k)) for f in flat.values()}) > 1]
    out = []
    for c in curves:
        info = infos[c.run_dir]
        parts = [_task(info) or os.path.basename(os.path.normpath(c.run_dir))]
        parts += [f"{k}={_fmt(flat[c.run_dir].get(k))}" for k in differ[:max_fields]]
        if len(differ) > max_fields:
            parts.append("...")
        members = info.get("members")
        if c.member is not None:
            if (
                isinstance(members, list)
                and c.member < len(members)
                and isinstance(members[c.member], dict)
                and not os.path.exists(os.path.join(c.run_dir, "lineage.csv"))
            ):
                parts += [f"{k}={_fmt(v)}" for k, v in _flat(members[c.member]).items()]
            else:
                parts.append(f"member {c.member}")
        out.append(" ".join(parts))
    twice = {lab for lab in out if out.count(lab) > 1}
    return [
        f"{lab} ({os.path.basename(os.path.normpath(c.run_dir))})" if lab in twice else lab
        for lab, c in zip(out, curves)
    ]
