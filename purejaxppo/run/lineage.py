"""A PBT run's lineage: ``lineage.csv`` (who copied whom, with which hyperparameters) and
the schedule of one member's ancestry.

``lineage.csv`` has one row per member at update 0 (its initial values, ``parent`` = itself)
and after every exploit: ``update, member, parent, <one column per searched
hyperparameter>, score, non_finite``. ``parent`` is the member whose state (weights,
optimizer and normaliser statistics) the member holds from that update on (itself unless
it lost), the hyperparameters are those it trains with from then on, ``score`` is the
window's mean return that was ranked (NaN: no episode completed, not ranked) and
``non_finite`` is 1 where the member had blown up and was replaced.
"""

from __future__ import annotations

import csv
import os
import warnings
from typing import Optional, Sequence

import numpy as np

from purejaxppo.run.metrics_file import format_number as _fmt

LINEAGE = "lineage.csv"


class LineageSink:
    """A metrics sink (``write(metrics, first_update)``, ``close()``) that turns the PBT
    program's per-update ``pbt_*`` metrics into ``lineage.csv`` rows. A new file starts with
    the initial ``members`` (``[{name: value}]``); ``append=True`` (a resume) keeps the file
    but drops rows after the update training continues from."""

    def __init__(
        self, path: str, names: Sequence[str], members: Sequence[dict], append: bool = False, num_seeds: int = 1
    ):
        self.path, self.names, self.append, self.seeds = path, list(names), append, num_seeds
        if not append or not os.path.exists(path):
            self.append = False
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["update"] + self._lead() + ["member", "parent"] + self.names + ["score", "non_finite"])
                for s in range(num_seeds):
                    for m, values in enumerate(members):
                        w.writerow([0] + self._lead(s) + [m, m] + [_fmt(values[n]) for n in self.names] + ["nan", 0])

    def _lead(self, seed=None):
        """The ``seed`` column, present when there are several populations (``num_seeds > 1``)."""
        if self.seeds == 1:
            return []
        return ["seed"] if seed is None else [seed]

    def write(self, metrics: dict, first_update: int) -> None:
        if self.append:  # rows written after the checkpoint we resumed from
            with open(self.path, newline="") as f:
                rows = list(csv.reader(f))
            with open(self.path + ".tmp", "w", newline="") as f:
                csv.writer(f).writerows(rows[:1] + [r for r in rows[1:] if r and int(r[0]) <= first_update])
            os.replace(self.path + ".tmp", self.path)
            self.append = False
        exploited = np.asarray(metrics["pbt_exploit"])[0]
        cols = [np.asarray(metrics[f"pbt_{n}"]) for n in self.names]
        parent, score = np.asarray(metrics["pbt_parent"]), np.asarray(metrics["pbt_score"])
        bad = np.asarray(metrics["pbt_non_finite"])
        with open(self.path, "a", newline="") as f:
            w = csv.writer(f)
            for u in np.flatnonzero(exploited > 0):
                update = first_update + int(u) + 1
                for s in range(self.seeds):
                    for r in range(s, parent.shape[0], self.seeds):  # run r: member r // S of population s
                        m = r // self.seeds
                        w.writerow(
                            [update]
                            + self._lead(s)
                            + [m, int(parent[r, u])]
                            + [_fmt(c[r, u]) for c in cols]
                            + [_fmt(score[r, u]), int(bad[r, u])]
                        )
                        if bad[r, u]:
                            warnings.warn(
                                f"PBT: member {m} had non-finite numbers at update {update}; replaced by "
                                f"a copy of member {int(parent[r, u])}",
                                RuntimeWarning,
                                stacklevel=2,
                            )

    def close(self) -> None:
        pass


def read_lineage(path: str, seed: int = 0) -> tuple[list, dict]:
    """``(names, {update: {"parent": [N] int, "hparams": [N, K], "score": [N]}})`` from a run
    folder or a ``lineage.csv``; with several populations (a ``seed`` column), population ``seed``."""
    if os.path.isdir(path):
        path = os.path.join(path, LINEAGE)
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], [r for r in rows[1:] if r]
    m_col, p_col = header.index("member"), header.index("parent")
    names = header[p_col + 1 : -2]
    if "seed" in header:
        body = [r for r in body if int(r[header.index("seed")]) == seed]
    out: dict = {}
    for r in body:
        out.setdefault(int(r[0]), []).append(r)
    table = {}
    for u, rs in sorted(out.items()):
        rs = sorted(rs, key=lambda r: int(r[m_col]))
        table[u] = {
            "parent": np.array([int(r[p_col]) for r in rs]),
            "hparams": np.array([[float(x) for x in r[p_col + 1 : p_col + 1 + len(names)]] for r in rs]),
            "score": np.array([float(r[-2]) for r in rs]),
        }
    return names, table


def ancestry(names: Sequence[str], table: dict, member: int, until: Optional[int] = None) -> list:
    """The hyperparameter schedule that member ``member``'s final weights were trained with:
    ``[{"from_update", "member", <name>: value}]`` in time order, following the parents back
    through every exploit (``member``: the slot the weights were in during that stretch).
    Consecutive stretches with the same slot and values are merged."""
    updates = [u for u in sorted(table) if until is None or u <= until]
    segments, cur = [], member
    for u in reversed(updates):
        segments.append(
            {"from_update": u, "member": cur, **{n: float(v) for n, v in zip(names, table[u]["hparams"][cur])}}
        )
        cur = int(table[u]["parent"][cur])
    segments.reverse()
    merged = []
    for s in segments:
        if merged and all(merged[-1][k] == s[k] for k in s if k != "from_update"):
            continue
        merged.append(s)
    return merged


def exploit_count(table: dict) -> int:
    """Number of member copies (losers) recorded after update 0."""
    return int(sum(np.sum(t["parent"] != np.arange(len(t["parent"]))) for u, t in table.items() if u > 0))
