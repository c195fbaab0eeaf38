"""Print the per-iteration table of an rlhf run folder (any number of seeds): python experiments/lm/table.py RUN_DIR.

The columns follow the run's task: reverse shows greedy exact match; grammar shows the target
count and grammaticality, sampled and greedy. Row 1's sampled figures are the SFT model's own
(iteration 1's responses are drawn before its update), marked "(SFT)".
"""

import csv
import json
import sys
import numpy as np

d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
info = json.load(open(f"{d}/config.json"))
task = info["rlhf"]["task"]
us = sorted({int(r["update"]) for r in rows})


def col(k, u):
    return np.array([float(r[k]) for r in rows if int(r["update"]) == u and r[k] not in ("", "nan")])


def spread(k, u):
    v = col(k, u)
    return f"{v.mean():.3f} [{v.min():.3f}, {v.max():.3f}]" if len(v) else ""


# (heading, metrics.csv column, shown as mean [min, max] over seeds?)
extra = {
    "reverse": [("greedy exact match: mean [min, max] over seeds", "eval_exact_match", True)],
    "grammar": [
        ("sampled grammatical", "task_grammatical", False),
        ("EOS rate", "eos_rate", False),
        ("greedy score: mean [min, max] over seeds", "eval_score", True),
        ("greedy grammatical", "eval_grammatical", False),
    ],
}.get(task, [])
sft = info["sft"]
print(
    f"SFT baseline (greedy, {info['rlhf']['eval_batch']} fixed prompts): "
    + ", ".join(f"{k[5:]} {v:.3f}" for k, v in sft.items() if k.startswith("eval_"))
)
print("| iteration | sampled score (mean over seeds) | KL/seq | " + " | ".join(h for h, _, _ in extra) + " |")
print("|---|---|---|" + "---|" * len(extra))
for u in us:
    if (u + 1) % 10 == 0 or u == 0:
        cells = [
            spread(k, u) if wide else (f"{col(k, u).mean():.3f}" if len(col(k, u)) else "") for _, k, wide in extra
        ]
        name = "1 (SFT)" if u == 0 else str(u + 1)
        print(f"| {name} | {col('score', u).mean():.3f} | {col('kl', u).mean():.3f} | " + " | ".join(cells) + " |")
