"""The demonstration's tables and figures from its evaluation rows (``eval.csv``: one row per
recipe, seed and evaluated iteration, with the held-out ``eval_pass@1``, ``eval_pass@8`` and
``eval_mean@8``) and the training rows (``training.csv``: what each iteration logged).

Intervals are over seeds: the mean +- Student's t (0.975, seeds - 1) x the standard error; a
difference of two recipes' means gets Welch's interval."""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict

import numpy as np

#: the training columns kept (``first_draw_score``, ``extra_draws``: dynamic sampling's, DAPO)
TRAINING = ("score", "first_draw_score", "extra_draws", "entropy", "kl", "response_length", "eos_rate", "clip_frac")
COLORS = {
    "ppo": "tab:blue",
    "grpo": "tab:orange",
    "dapo": "tab:green",
    "dr-grpo": "tab:red",
    "reinforce++": "tab:purple",
    "gspo": "tab:brown",
    "rloo": "tab:pink",
}
METRICS = (("eval_pass@1", "held-out pass@1"), ("eval_pass@8", "held-out pass@8"))


def write_csv(path: str, rows: list) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def t_interval(values) -> tuple:
    """``(mean, half width)`` of the 95% Student-t interval of ``values`` (half width nan for
    one value)."""
    from scipy import stats

    v = np.asarray(values, float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def welch_interval(a, b) -> tuple:
    """``(mean(a) - mean(b), half width)`` of Welch's 95% interval of the difference."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return float(a.mean() - b.mean()), 0.0
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return float(a.mean() - b.mean()), float(stats.t.ppf(0.975, dof) * se)


def curves(rows: list, recipe: str, key: str) -> tuple:
    """``(updates [U], samples [U, seeds], wall_s [U], values [U, seeds])`` of one recipe's
    ``key``, the seeds in order (wall_s: the first seed's, the same for all: one program trains
    them all; samples: each seed's own, which differ where dynamic sampling draws more)."""
    by = defaultdict(dict)
    for r in rows:
        if r["recipe"] == recipe:
            by[int(r["update"])][int(r["seed"])] = r
    updates = sorted(by)
    seeds = sorted(by[updates[0]]) if updates else []
    values = np.array([[float(by[u][s][key]) for s in seeds] for u in updates])
    samples = np.array([[float(by[u][s]["samples"]) for s in seeds] for u in updates])
    wall = np.array([float(by[u][seeds[0]]["wall_s"]) for u in updates])
    return np.array(updates), samples, wall, values


def common_budget(rows: list, recipes: list) -> float:
    """The largest sample count every seed of every recipe reached: where they are compared."""
    ends = [curves(rows, r, "eval_pass@1")[1][-1].min() for r in recipes if any(x["recipe"] == r for x in rows)]
    return float(min(ends)) if ends else 0.0


def at_budget(rows: list, recipe: str, key: str, budget: float) -> np.ndarray:
    """Each seed's ``key`` at ``budget`` samples, linear between its evaluations ``[seeds]``."""
    _, samples, _, v = curves(rows, recipe, key)
    return np.array([np.interp(budget, samples[:, s], v[:, s]) for s in range(v.shape[1])])


def summary_table(rows: list, recipes: list) -> list:
    """One dict per recipe: pass@1 and pass@8 of the SFT model (the first evaluation), at the
    common sample budget (:func:`common_budget`), at the last evaluation, and the best of the
    seed mean (mean, 95% interval, per seed), and the run's samples and wall time."""
    budget = common_budget(rows, recipes)
    table = []
    for recipe in recipes:
        if not any(r["recipe"] == recipe for r in rows):
            continue
        rec = {"recipe": recipe, "budget": int(budget)}
        for key, _ in METRICS:
            updates, samples, wall, v = curves(rows, recipe, key)
            name = key.removeprefix("eval_")
            m0, h0 = t_interval(v[0])
            mb, hb = t_interval(at_budget(rows, recipe, key, budget))
            m, h = t_interval(v[-1])
            best = int(np.argmax(v.mean(1)))
            rec.update(
                {
                    "seeds": v.shape[1],
                    "last_update": int(updates[-1]) + 1,
                    "samples": int(samples[-1].mean()),
                    "wall_s": round(float(wall[-1]), 1),
                    f"{name}_first": round(m0, 4),
                    f"{name}_first_ci": round(h0, 4),
                    f"{name}_budget": round(mb, 4),
                    f"{name}_budget_ci": round(hb, 4),
                    f"{name}_final": round(m, 4),
                    f"{name}_final_ci": round(h, 4),
                    f"{name}_final_per_seed": [round(float(x), 3) for x in v[-1]],
                    f"{name}_best": round(float(v.mean(1)[best]), 4),
                    f"{name}_best_update": int(updates[best]) + 1,
                }
            )
        table.append(rec)
    return table


def comparison(rows: list, recipes: list) -> dict:
    """At the common sample budget: the recipe with the highest mean pass@1 and its difference
    to each other recipe (Welch's 95% interval), for pass@1 and pass@8."""
    budget = common_budget(rows, recipes)
    at = {}
    for recipe in recipes:
        if any(r["recipe"] == recipe for r in rows):
            at[recipe] = {k: at_budget(rows, recipe, k, budget) for k, _ in METRICS}
    if not at:
        return {}
    best = max(at, key=lambda r: at[r]["eval_pass@1"].mean())
    out = {"budget": int(budget), "best_by_pass@1": best, "differences": {}}
    for other in at:
        if other != best:
            out["differences"][other] = {
                k.removeprefix("eval_"): [round(x, 4) for x in welch_interval(at[best][k], at[other][k])]
                for k, _ in METRICS
            }
    return out


def _fmt(m, h) -> str:
    return f"{m:.3f} ± {h:.3f}" if not math.isnan(h) else f"{m:.3f}"


def markdown_table(table: list, comp: dict) -> str:
    budget = table[0]["budget"] if table else 0
    lines = [
        f"| recipe | pass@1: SFT -> at {budget} samples (95% CI) -> final | pass@8: SFT -> at {budget} -> final "
        "| final pass@1 per seed | samples drawn per seed | wall s (+ compile) |",
        "|---|---|---|---|---|---|",
    ]
    for t in table:
        lines.append(
            f"| {t['recipe']} | {t['pass@1_first']:.3f} -> {_fmt(t['pass@1_budget'], t['pass@1_budget_ci'])} "
            f"-> {_fmt(t['pass@1_final'], t['pass@1_final_ci'])} "
            f"| {t['pass@8_first']:.3f} -> {_fmt(t['pass@8_budget'], t['pass@8_budget_ci'])} "
            f"-> {_fmt(t['pass@8_final'], t['pass@8_final_ci'])} "
            f"| {', '.join(f'{x:.2f}' for x in t['pass@1_final_per_seed'])} | {t['samples']} "
            f"| {t['wall_s']:.0f} (+ {t.get('compile_s', 0):.0f}) |"
        )
    if comp:
        lines.append("")
        lines.append(
            f"at {comp['budget']} samples per seed the best pass@1 is **{comp['best_by_pass@1']}**; "
            "its difference to each (Welch 95% CI):"
        )
        lines.append("")
        for other, d in comp["differences"].items():
            p1, p8 = d["pass@1"], d["pass@8"]
            lines.append(f"- vs {other}: pass@1 {p1[0]:+.3f} ± {p1[1]:.3f}, pass@8 {p8[0]:+.3f} ± {p8[1]:.3f}")
    return "\n".join(lines)


def _band(ax, x, v, color, label):
    m = v.mean(1)
    if v.shape[1] > 1:
        h = np.array([t_interval(row)[1] for row in v])
        ax.fill_between(x, np.clip(m - h, 0, 1), np.clip(m + h, 0, 1), color=color, alpha=0.15, lw=0)
    ax.plot(x, m, color=color, lw=2, marker="o", ms=3, label=label)


def plot_all(rows: list, training: list, recipes: list, out: str) -> list:
    """``pass_at_k.png`` (pass@1 and pass@8 against samples and against wall time) and
    ``training.png`` (the training score, entropy, KL and response length against samples)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = [r for r in recipes if any(x["recipe"] == r for x in rows)]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for i, (key, label) in enumerate(METRICS):
        for recipe in recipes:
            _, samples, wall, v = curves(rows, recipe, key)
            color = COLORS.get(recipe, None)
            _band(axes[i, 0], samples.mean(1), v, color, recipe)
            _band(axes[i, 1], wall, v, color, recipe)
        axes[i, 0].set_xlabel("responses sampled in training (per seed; DAPO's extra draws counted)")
        axes[i, 1].set_xlabel("wall time of the run, s (all seeds at once, evaluations included)")
        for ax in axes[i]:
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=9)
    fig.suptitle("held-out pass@k: mean over seeds, shaded 95% t-interval", fontsize=11)
    fig.tight_layout()
    paths = [os.path.join(out, "pass_at_k.png")]
    fig.savefig(paths[0], dpi=80)
    plt.close(fig)

    keys = [k for k in ("score", "entropy", "kl", "response_length") if training and k in training[0]]
    if keys:
        fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4), squeeze=False)
        for ax, key in zip(axes[0], keys):
            for recipe in recipes:
                by = defaultdict(list)
                for r in training:
                    # dynamic sampling's score is over the kept groups: its first draw's compares
                    k = "first_draw_score" if key == "score" and r.get("first_draw_score") not in ("", None) else key
                    if r["recipe"] == recipe and r.get(k, "") not in ("", None):
                        by[int(r["update"])].append(float(r[k]))
                updates = sorted(by)
                y = np.array([np.mean(by[u]) for u in updates])
                if len(y) > 4:  # a 5-iteration moving average
                    y = np.convolve(np.pad(y, (2, 2), mode="edge"), np.ones(5) / 5, mode="valid")
                ax.plot(np.array(updates) + 1, y, color=COLORS.get(recipe), label=recipe)
            ax.set_title(key if key != "score" else "training reward (first draw)", fontsize=10)
            ax.set_xlabel("iteration")
            ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=8)
        fig.tight_layout()
        paths.append(os.path.join(out, "training.png"))
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths
