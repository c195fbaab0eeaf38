"""GAE with a critic vs GRPO vs RLOO on the pipeline's task: PPO against the learned reward
model, 4 seeds per arm, compared at equal KL from the SFT model and by seconds per iteration.

    python experiments/rlhf_pipeline/advantages.py --out runs/adv --from runs/pipeline
    python experiments/rlhf_pipeline/advantages.py --out /tmp/adv --quick     # tiny, every arm

``--from`` is a folder of ``run.py`` (its stages 1-4: tokenizer, SFT model, prompts, reward model,
read only); without it they are built once in ``--out`` (``run.py``'s sizes, ``--quick``: its
QUICK ones). Every arm is :func:`ppo.run_ppo` (the ``rlhf`` command's front door) with the same
sizes, beta, ``k1`` KL in the reward, optimiser and seeds; only ``advantage`` (and, for the
``gae-g1`` arm, the grouping) changes:

* every arm samples ``batch`` responses per iteration as ``batch / G`` prompts x ``G`` (``group``,
  4): the same samples per iteration and the same prompts per sample, so the advantage estimator
  is the one difference. GAE ignores the grouping and trains a separate critic; GRPO and RLOO
  take their baseline from the group and train none. ``gae-g1`` (``--arms``) is GAE as the
  pipeline runs it, ``batch`` distinct prompts.

Equal KL: one beta for all and each seed's checkpoints read along its learning trajectory: the
true objective and the proxy where the seed first reaches KL = each of ``kl_levels``
(:func:`at_kl`), the mean over the seeds that reach it. Tuning a beta per arm to land on one KL
would need a sweep per arm (several times the CPU) and compare one point; the trajectory gives
every level, and what each arm pays in score to move that far from the SFT model (Gao et al.'s
reading). Time: ``run_s / iterations`` from the run's summary (the loop's wall time less
compiles; the 4 seeds at once), the compile apart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

ARMS = {"gae": ("gae", True), "grpo": ("grpo", True), "rloo": ("rloo", True), "gae-g1": ("gae", False)}
COLORS = {"gae": "tab:blue", "grpo": "tab:red", "rloo": "tab:green", "gae-g1": "tab:gray"}
FULL = dict(
    seeds=4, beta=0.02, iterations=100, batch=64, group=4, chunk=5, lr=3e-4, reps=4, kl_levels=(2, 4, 6, 8), tail=5
)
QUICK = dict(
    seeds=2, beta=0.02, iterations=4, batch=16, group=4, chunk=2, lr=3e-4, reps=1, kl_levels=(0.1, 0.5), tail=1
)


def at_kl(kl, values, level: float) -> float:
    """``values`` where a trajectory first reaches ``kl >= level``: linear between the checkpoint
    before the crossing and the one at it; NaN if it never does. ``kl``, ``values``: one per
    checkpoint in iteration order, ``kl[0]`` (the SFT model) below every level asked."""
    kl, values = np.asarray(kl, float), np.asarray(values, float)
    for i in range(1, len(kl)):
        if kl[i] >= level:
            w = (level - kl[i - 1]) / (kl[i] - kl[i - 1])
            return float(values[i - 1] + w * (values[i] - values[i - 1]))
    return float("nan")


def curves(rows, arm: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(iterations [N], values [N, seeds])`` of one arm's evaluation rows."""
    mine = [r for r in rows if r["arm"] == arm]
    its = sorted({r["iteration"] for r in mine})
    seeds = sorted({r["seed"] for r in mine})
    val = {(r["iteration"], r["seed"]): r[key] for r in mine}
    return np.array(its), np.array([[val[i, s] for s in seeds] for i in its], float)


def arm_table(rows, arm: str, record: dict, p: dict) -> dict:
    """One arm's line: score at each KL level (mean over the seeds reaching it, and how many),
    the end of training (each seed's mean over its last ``tail`` checkpoints) and the time per
    iteration."""
    its, kl = curves(rows, arm, "kl")
    out = {"arm": arm, "s_per_iteration": record["run_s"] / p["iterations"], "compile_s": record["compile_s"]}
    for key in ("true", "proxy"):
        vals = curves(rows, arm, key)[1]
        for level in p["kl_levels"]:
            per_seed = [at_kl(kl[:, s], vals[:, s], level) for s in range(kl.shape[1])]
            hit = [v for v in per_seed if not np.isnan(v)]
            out[f"{key}@{level:g}"] = (float(np.mean(hit)) if hit else float("nan"), len(hit))
        end = vals[-p["tail"] :].mean(0)
        out[f"{key}_final"], out[f"{key}_final_per_seed"] = float(end.mean()), [round(float(v), 2) for v in end]
        out[f"{key}_peak"] = float(vals.mean(1).max())
    end = kl[-p["tail"] :].mean(0)
    out["kl_final"], out["kl_final_per_seed"] = float(end.mean()), [round(float(v), 1) for v in end]
    out["final_iterations"] = [int(its[-p["tail"]]), int(its[-1])]
    return out


def markdown(table, p: dict) -> str:
    n, lv = p["seeds"], p["kl_levels"]

    def cell(v):
        return "-" if v[1] == 0 else f"{v[0]:.2f}" + ("" if v[1] == n else f" ({v[1]}/{n})")

    head = " | ".join(f"KL {x:g}" for x in lv)
    lines = [
        f"| advantage | TRUE at {head} | proxy at {head} | s / iteration | compile s |",
        "|---|" + "---|" * (2 * len(lv) + 2),
    ]
    for t in table:
        true = " | ".join(cell(t[f"true@{x:g}"]) for x in lv)
        proxy = " | ".join(cell(t[f"proxy@{x:g}"]) for x in lv)
        lines.append(f"| {t['arm']} | {true} | {proxy} | {t['s_per_iteration']:.3f} | {t['compile_s']:.0f} |")
    a, b = table[0]["final_iterations"]
    lines += [
        "",
        f"| advantage | KL, iterations {a}-{b} (per seed) | TRUE, iterations {a}-{b} (per seed) "
        f"| proxy, iterations {a}-{b} | peak TRUE (seed mean) |",
        "|---|---|---|---|---|",
    ]
    for t in table:
        lines.append(
            f"| {t['arm']} | {t['kl_final']:.1f} ({', '.join(map(str, t['kl_final_per_seed']))}) "
            f"| {t['true_final']:.2f} ({', '.join(map(str, t['true_final_per_seed']))}) "
            f"| {t['proxy_final']:.2f} | {t['true_peak']:.2f} |"
        )
    return "\n".join(lines)


def plot(rows, table, out: str) -> str:
    """``advantages_vs_kl.png``: true and proxy against KL; true against the iteration and against
    the training seconds (iteration x the arm's s / iteration); each arm's seed mean thick, its
    seeds thin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = (
        ("kl", "true", "TRUE objective vs KL", "KL(policy || SFT) per response, nats"),
        ("kl", "proxy", "proxy (reward model) vs KL", "KL(policy || SFT) per response, nats"),
        ("iteration", "true", "TRUE vs iteration", "PPO iteration"),
        ("seconds", "true", "TRUE vs training time", "seconds of training (4 seeds at once, compile apart)"),
    )
    for ax, (x_key, y_key, title, xlabel) in zip(axes, panels):
        for t in table:
            arm = t["arm"]
            its, y = curves(rows, arm, y_key)
            x = its[:, None].repeat(y.shape[1], 1).astype(float)
            x = curves(rows, arm, "kl")[1] if x_key == "kl" else x
            x = x * t["s_per_iteration"] if x_key == "seconds" else x
            for s in range(y.shape[1]):
                ax.plot(x[:, s], y[:, s], color=COLORS[arm], alpha=0.25, lw=0.8)
            ax.plot(x.mean(1), y.mean(1), color=COLORS[arm], lw=2.2, marker="o", ms=3, label=arm)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "advantages_vs_kl.png")
    fig.savefig(path, dpi=75)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--from", dest="src", help="a run.py folder whose SFT model and reward model to use")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every arm")
    ap.add_argument("--arms", default="gae,grpo,rloo", help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a size (beta=0.005)")
    args = ap.parse_args(argv)
    import run

    p = run.apply_sets(ap, dict(QUICK if args.quick else FULL), args.set, tuple_key="kl_levels")
    arms = args.arms.split(",")
    bad = [a for a in arms if a not in ARMS]
    if bad:
        ap.error(f"--arms {args.arms}: no arm {bad[0]!r}; one of {', '.join(ARMS)}")
    if args.src and not os.path.isdir(os.path.join(args.src, "rm", "model")):
        ap.error(f"--from {args.src}: no reward model in {args.src}/rm/model; run run.py --out {args.src} first")
    out, t0 = os.path.abspath(args.out), time.time()
    os.makedirs(out, exist_ok=True)
    src = os.path.abspath(args.src) if args.src else out
    if not args.src:
        run.build_models(out, dict(run.QUICK if args.quick else run.FULL), args.seed)
    import ppo
    import world

    model, prompts = os.path.join(src, "sft_model"), os.path.join(src, "data", "prompts.jsonl")
    rm = os.path.join(src, "rm", "model")
    evaluator = ppo.Evaluator(world.Sampler(model, prompts), rm, p["reps"])
    rows, records = [], {}
    for arm in arms:
        advantage, grouped = ARMS[arm]
        run_dir = os.path.join(out, f"ppo_{arm}")

        def train_and_eval(run_dir=run_dir, advantage=advantage, grouped=grouped):
            if not os.path.exists(os.path.join(run_dir, "summary.json")):
                ppo.run_ppo(
                    run_dir, model, prompts, reward_model=rm, beta=p["beta"], seeds=p["seeds"],
                    iterations=p["iterations"], batch=p["batch"], chunk=p["chunk"], lr=p["lr"], seed=args.seed,
                    advantage=advantage, group_size=p["group"] if grouped else 1,
                )  # fmt: skip
            with open(os.path.join(run_dir, "summary.json")) as f:
                summary = json.load(f)
            rec = {k: summary[k] for k in ("run_s", "compile_s")}
            return {**rec, "rows": ppo.evaluate_run(run_dir, evaluator)}

        rec = run.stage(out, f"ppo_{arm}", train_and_eval)
        rows += [{"arm": arm, **r} for r in rec.pop("rows")]
        records[arm] = rec
    table = [arm_table(rows, arm, records[arm], p) for arm in arms]
    plot(rows, table, out)
    with open(os.path.join(out, "eval.csv"), "w") as f:
        keys = ["arm", "iteration", "seed", "true", "proxy", "kl", "eos_rate", "length"]
        f.write(",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows))
    summary = {"sizes": p, "from": src, "arms": records, "table": table, "wall_s": round(time.time() - t0, 1)}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    run.log(f"done in {summary['wall_s']:.0f}s: {out}/summary.json, eval.csv, advantages_vs_kl.png")
    print(markdown(table, p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
