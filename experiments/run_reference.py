"""gymnax-blines' own PPO configuration, run here, scored with their protocol -> table rows.

For each env: ``python -m purejaxppo train --env ENV --reference gymnax-blines --seeds 8``
(into experiments/reference/ENV; reused when finished), then
``python -m purejaxppo eval RUN --protocol gymnax-blines`` (164 sampled-action episodes per seed,
their batch_evaluate) and the greedy evaluation of RESULTS.md's other rows (64 mode-policy episodes).
Prints one markdown row per env: IQM over seeds with 95% bootstrap intervals.

    python experiments/run_reference.py --envs Acrobot-v1,Pendulum-v1
    python experiments/run_reference.py --envs Acrobot-v1 --kind preset   # our preset, same protocol
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_suite import REFERENCE, bootstrap_ci, iqm, train_once  # noqa: E402

OUT = os.path.relpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")
)  # relative paths in the JSONs
PRESET_OUT = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "preset"))


def _cached_eval(run_dir: str, name: str, flags: list[str]) -> dict:
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        out = subprocess.run(
            [sys.executable, "-m", "purejaxppo", "eval", run_dir, "--json", *flags],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        with open(path, "w") as f:
            f.write(out)
    with open(path) as f:
        return json.load(f)


def run_env(env: str, seeds: int, kind: str = "reference") -> dict:
    """``kind`` "reference" (``--reference gymnax-blines``, into experiments/reference/ENV) or
    "preset" (``--preset``, into experiments/preset/ENV): trained once, evaluated both ways."""
    run_dir = os.path.join(OUT if kind == "reference" else PRESET_OUT, env)
    how = ["--reference", "gymnax-blines"] if kind == "reference" else ["--preset"]
    summary = train_once(env, run_dir, how + ["--seeds", str(seeds)])
    train = np.asarray(summary["final_return_per_seed"], np.float64)
    protocol = np.asarray(_cached_eval(run_dir, "eval_protocol.json", ["--protocol", "gymnax-blines"])["per_seed_mean"])
    greedy = np.asarray(_cached_eval(run_dir, "eval.json", ["--episodes", "64"])["per_seed_mean"])
    return {
        "env": env,
        "kind": kind,
        "seeds": len(train),
        "env_steps": summary["env_steps"] // len(train),
        "wall_s": summary["compile_s"] + summary["run_s"],
        **{
            k: (iqm(v), bootstrap_ci(v, iqm), float(np.mean(v)))
            for k, v in (("train", train), ("protocol", protocol), ("greedy", greedy))
        },
    }


def row(r: dict) -> str:
    f = lambda k: f"{r[k][0]:.1f} [{r[k][1][0]:.1f}, {r[k][1][1]:.1f}]"
    label = "reference config run here" if r.get("kind", "reference") == "reference" else "preset (today's)"
    return (
        f"| {r['env']} | {label} | {r['seeds']} | {f('protocol')} (mean {r['protocol'][2]:.1f}) | "
        f"{f('train')} | {f('greedy')} | {r['env_steps']:,} | {r['wall_s']:.0f} | {REFERENCE.get(r['env'], '')} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="Acrobot-v1,Pendulum-v1")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument(
        "--kind",
        choices=("reference", "preset"),
        default="reference",
        help="the reference's own config, or our --preset scored the same way",
    )
    args = p.parse_args()
    rows = [run_env(env, args.seeds, args.kind) for env in args.envs.split(",")]
    out = OUT if args.kind == "reference" else PRESET_OUT
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "results.json")
    kept = json.load(open(path)) if os.path.exists(path) else []  # other envs' rows stay
    rows_all = [r for r in kept if r["env"] not in {x["env"] for x in rows}] + rows
    with open(path, "w") as f:
        json.dump(rows_all, f, indent=2)
    for r in rows:
        print(row(r))


if __name__ == "__main__":
    main()
