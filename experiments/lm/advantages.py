"""GAE with a critic vs GRPO vs RLOO on the built-in ``reverse`` task, 4 seeds each.

    python experiments/lm/advantages.py --out runs/advantages [--iterations 80] [--group-size 4]

Each arm is one ``python -m purejaxppo rlhf --task reverse --seeds 4`` run with the task's preset
(the same SFT model, batch of 64 responses, 4 epochs x 4 minibatches, beta 0.02, k1); only the
advantage changes. GAE samples one response for each of 64 prompts and trains a separate critic;
GRPO and RLOO sample ``G`` responses for each of ``64 / G`` prompts and train no critic. The
table: the sampled score and KL per sequence (k1) over the last 10 iterations, the greedy exact
match at the end (256 fixed prompts), and the seconds per iteration (4 seeds at once; the run's
time less compiles and evaluations). Results: experiments/lm/RESULTS.md.
"""

import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np

ARMS = {
    "gae (critic)": ["--advantage", "gae"],
    "grpo": ["--advantage", "grpo", "--group-size", "{G}"],
    "rloo": ["--advantage", "rloo", "--group-size", "{G}"],
}


def last(rows, key, n):
    us = sorted({int(r["update"]) for r in rows})[-n:]
    v = [float(r[key]) for r in rows if int(r["update"]) in us and r[key] not in ("", "nan")]
    return float(np.mean(v)) if v else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/advantages")
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    table = []
    for name, flags in ARMS.items():
        run_dir = os.path.join(args.out, name.split()[0])
        if not os.path.exists(os.path.join(run_dir, "summary.json")):
            cmd = [sys.executable, "-m", "purejaxppo", "rlhf", "--task", "reverse", "--seeds", str(args.seeds)]
            cmd += ["--iterations", str(args.iterations), "--quiet", "--run-dir", run_dir]
            cmd += [f.format(G=args.group_size) for f in flags]
            print(" ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, check=True)
        rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        final = [r for r in rows if int(r["update"]) == args.iterations - 1]
        exact = [float(r["eval_exact_match"]) for r in final if r.get("eval_exact_match") not in (None, "", "nan")]
        table.append(
            (
                name,
                last(rows, "score", 10),
                last(rows, "kl_k1", 10),
                f"{np.mean(exact):.3f} [{np.min(exact):.3f}, {np.max(exact):.3f}]" if exact else "",
                summary["run_s"] / args.iterations,
                summary["compile_s"],
            )
        )
    print(f"\n{args.seeds} seeds, {args.iterations} iterations, group size {args.group_size} (grpo, rloo)")
    print(
        "| advantage | sampled score (last 10 it.) | KL/seq k1 (last 10 it.) | greedy exact match: mean [min, max] | s / iteration | compile s |"
    )
    print("|---|---|---|---|---|---|")
    for name, score, kl, exact, sec, comp in table:
        print(f"| {name} | {score:.3f} | {kl:.2f} | {exact} | {sec:.3f} | {comp:.0f} |")


if __name__ == "__main__":
    main()
