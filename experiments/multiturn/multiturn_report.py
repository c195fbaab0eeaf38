"""The multi-turn experiment's outputs: CSV rows, the summary table (mean and 95% t-interval over
seeds), the methods' comparison, the markdown table and the plots (matplotlib when installed)."""

from __future__ import annotations

import csv
import json
import math
import os

from multiturn_world import t_interval

METRICS = ("solve_rate", "turns_to_solve", "invalid_rate")


def write_csv(path: str, rows: list) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def final_rows(evals: list, method: str) -> list:
    """The method's rows at its last evaluated iteration, one per seed."""
    mine = [r for r in evals if r["method"] == method]
    last = max(r["iteration"] for r in mine)
    return [r for r in mine if r["iteration"] == last]


def summary_table(evals: list, methods: list) -> list:
    """Per method and metric, at the first and the last evaluation: ``mean`` and ``ci95``
    (the t-interval's half-width over seeds); a seed that solved nothing has no turns to solve
    and is left out of that mean (``seeds_solving`` counts the others)."""
    table = []
    for m in methods:
        first_it = min(r["iteration"] for r in evals if r["method"] == m)
        row = {"method": m, "seeds": len(final_rows(evals, m))}
        for when, rows in (("start", [r for r in evals if r["method"] == m and r["iteration"] == first_it]),
                           ("final", final_rows(evals, m))):  # fmt: skip
            for k in METRICS:
                vals = [r[k] for r in rows if not math.isnan(r[k])]
                mean, half = t_interval(vals) if vals else (float("nan"), float("nan"))
                row[f"{when}_{k}"], row[f"{when}_{k}_ci95"] = round(mean, 4), round(half, 4)
            row[f"{when}_seeds_solving"] = sum(not math.isnan(r["turns_to_solve"]) for r in rows)
        table.append(row)
    return table


def comparison(table: list) -> dict:
    """The final solve rates' and turns' gaps between the first two methods (first minus
    second), and whether their 95% intervals overlap."""
    if len(table) < 2:
        return {}
    a, b = table[0], table[1]
    out = {"first": a["method"], "second": b["method"]}
    for k in ("solve_rate", "turns_to_solve"):
        ma, ha, mb, hb = a[f"final_{k}"], a[f"final_{k}_ci95"], b[f"final_{k}"], b[f"final_{k}_ci95"]
        out[f"{k}_gap"] = round(ma - mb, 4)
        out[f"{k}_intervals_overlap"] = bool(ma - ha <= mb + hb and mb - hb <= ma + ha)
    return out


def markdown_table(table: list, comp: dict) -> str:
    lines = [
        "| method | seeds | held-out solve rate: start -> final | turns to solve: start -> final | no-number turns, final |",
        "|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['method']} | {r['seeds']} | {r['start_solve_rate']:.3f} -> **{r['final_solve_rate']:.3f}** "
            f"± {r['final_solve_rate_ci95']:.3f} | {r['start_turns_to_solve']:.2f} -> **{r['final_turns_to_solve']:.2f}** "
            f"± {r['final_turns_to_solve_ci95']:.2f} | {r['final_invalid_rate']:.3f} |"
        )
    if comp:
        lines.append(
            f"\n{comp['first']} - {comp['second']}: solve rate {comp['solve_rate_gap']:+.3f} (95% intervals "
            f"{'overlap' if comp['solve_rate_intervals_overlap'] else 'disjoint'}), turns to solve "
            f"{comp['turns_to_solve_gap']:+.2f} ({'overlap' if comp['turns_to_solve_intervals_overlap'] else 'disjoint'})"
        )
    return "\n".join(lines)


def plot_all(evals: list, training: list, methods: list, out: str) -> list:
    """``eval_curves.png``: held-out solve rate and turns to solve against episodes per seed
    (mean and the 95% band over seeds). Returns the files written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)")
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in methods:
        its = sorted({r["episodes"] for r in evals if r["method"] == m})
        for ax, k in zip(axes, ("solve_rate", "turns_to_solve")):
            stats = []
            for e in its:
                vals = [r[k] for r in evals if r["method"] == m and r["episodes"] == e and not math.isnan(r[k])]
                stats.append(t_interval(vals) if vals else (float("nan"), 0.0))
            mean = [s[0] for s in stats]
            ax.plot(its, mean, marker="o", label=m)
            ax.fill_between(its, [a - h for a, h in stats], [a + h for a, h in stats], alpha=0.2)
            ax.set_xlabel("training episodes per seed")
            ax.set_ylabel(k.replace("_", " ") + " (held-out)")
    axes[0].legend()
    fig.tight_layout()
    path = os.path.join(out, "eval_curves.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write_all(out: str, p: dict, sft: dict, evals: list, training: list, walls: dict, methods: list, wall, args):
    """Every output file; returns the summary record."""
    write_csv(os.path.join(out, "eval.csv"), evals)
    write_csv(os.path.join(out, "training.csv"), training)
    table = summary_table(evals, methods)
    records = {
        "command": "python experiments/multiturn/run.py" + (" --quick" if args.quick else "")
        + "".join(f" --set {s}" for s in args.set),
        "sizes": p, "sft": sft, "train_wall_s": walls, "table": table, "comparison": comparison(table),
        "plots": plot_all(evals, training, methods, out), "wall_s": round(wall, 1),
    }  # fmt: skip
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(records, f, indent=1)
    return records
