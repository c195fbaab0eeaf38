"""Print the per-iteration table of an rlhf run folder (any number of seeds): python experiments/lm/table.py RUN_DIR."""
import csv, json, sys, numpy as np
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
info = json.load(open(f"{d}/config.json"))
seeds = sorted({int(r["seed"]) for r in rows})
us = sorted({int(r["update"]) for r in rows})
def col(k, u):
    return np.array([float(r[k]) for r in rows if int(r["update"]) == u and r[k] not in ("", "nan")])
print(f"SFT baseline (greedy, 256 fixed prompts): exact match {info['sft']['eval_exact_match']:.3f}")
print("| iteration | sampled score (mean over seeds) | KL/seq | greedy exact match: mean [min, max] over seeds |")
print("|---|---|---|---|")
for u in us:
    if (u + 1) % 10 == 0 or u == 0:
        ev = col("eval_exact_match", u)
        evs = f"{ev.mean():.3f} [{ev.min():.3f}, {ev.max():.3f}]" if len(ev) else ""
        print(f"| {u + 1} | {col('score', u).mean():.3f} | {col('kl', u).mean():.3f} | {evs} |")
