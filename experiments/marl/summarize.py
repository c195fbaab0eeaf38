"""The learning table of RESULTS.md from experiments/marl/results/*.json (learning.py's output):
IQM of the per-seed final team return (mean of the last 10% of updates) with a 95% percentile
bootstrap interval over seeds (10,000 resamples)."""

import glob
import json
import os
import sys

import numpy as np


def iqm(x):
    q = np.sort(np.asarray(x))
    k = len(q) // 4
    return float(np.mean(q[k : len(q) - k]))


def interval(x, reps=10_000, seed=0):
    rng = np.random.default_rng(seed)
    x = np.asarray(x)
    stats = [iqm(rng.choice(x, len(x))) for _ in range(reps)]
    return np.percentile(stats, [2.5, 97.5])


RESULTS = os.path.join(os.path.dirname(__file__), "results")


def main(folder=RESULTS):
    print(
        "| env | agent | critic | truncation bootstrap | agent steps | seeds | final team return IQM [95% CI] | per seed | "
        "compile s | agent-steps/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        r = json.load(open(path))
        if "final_per_seed" not in r or "env" not in r:  # JaxMARL scripts' JSONs (jaxmarl_smax.py) have no env
            continue
        lo, hi = interval(r["final_per_seed"])
        print(
            f"| {r['env']} | {r['network']} | {r['critic']} | {'yes' if r['bootstrap'] else 'no'} | "
            f"{r['agent_steps']:,} | {r['seeds']} | {iqm(r['final_per_seed']):.2f} [{lo:.2f}, {hi:.2f}] | "
            f"{', '.join(f'{v:.2f}' for v in r['final_per_seed'])} | {r['compile_s']:.0f} | "
            f"{r['agent_steps_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
