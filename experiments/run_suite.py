"""Results across the gymnax suite: presets x >= 8 seeds -> experiments/RESULTS.md.

For each env: final return (mean over the last 5% of updates, per seed) as IQM and mean
with 95% bootstrap intervals, env steps, wall time on this machine, and a learning-curve
plot. Each env is one `python -m purejaxppo train --env ENV --preset --seeds 8` run:

    python experiments/run_suite.py --envs CartPole-v1,Acrobot-v1 [--seeds 8] [--total-timesteps N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# gymnax's own PPO baselines (gymnax README / gymnax-blines), final evaluation returns
REFERENCE = {"CartPole-v1": 500.0, "Acrobot-v1": -80.0, "MountainCar-v0": -118.0, "Pendulum-v1": -130.0,
             "MountainCarContinuous-v0": 92.0, "Catch-bsuite": 1.0,
             # MinAtar PPO rows of the gymnax README table (gymnax-blines agents, 1e7 steps)
             "Asterix-MinAtar": 15.0, "Breakout-MinAtar": 28.0, "Freeway-MinAtar": 58.0,
             "SpaceInvaders-MinAtar": 131.0}


def iqm(x: np.ndarray) -> float:
    x = np.sort(np.asarray(x, np.float64))
    n = len(x)
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(np.mean(x[lo:hi])) if hi > lo else float(np.mean(x))


def bootstrap_ci(x: np.ndarray, stat, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x = np.asarray(x, np.float64)
    samples = [stat(x[rng.integers(0, len(x), len(x))]) for _ in range(n)]
    return float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))


def run_env(env: str, seeds: int, total: int | None, out_dir: str, extra: list[str]) -> dict:
    run_dir = os.path.join(out_dir, env)
    if os.path.exists(os.path.join(run_dir, "summary.json")):
        print(f"{env}: reusing {run_dir}")
    else:
        cmd = [sys.executable, "-m", "purejaxppo", "train", "--env", env, "--preset", "--seeds", str(seeds),
               "--run-dir", run_dir, "--quiet"] + (["--total-timesteps", str(total)] if total else []) + extra
        print(" ".join(cmd), flush=True)
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"{env}: {time.perf_counter() - t:.0f}s", flush=True)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)["config"]
    finals = np.asarray(summary["final_return_per_seed"], np.float64)
    return {"env": env, "seeds": len(finals), "finals": finals.tolist(), "iqm": iqm(finals),
            "iqm_ci": bootstrap_ci(finals, iqm), "mean": float(finals.mean()),
            "mean_ci": bootstrap_ci(finals, np.mean), "env_steps": summary["env_steps"] // len(finals),
            "wall_s": summary["compile_s"] + summary["run_s"], "network": cfg["network"], "run_dir": run_dir}


def write_table(results: list[dict], path: str) -> None:
    lines = ["| env | seeds | IQM [95% CI] | mean [95% CI] | env steps / seed | wall s (all seeds) | reference | vs reference |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ref = REFERENCE.get(r["env"])
        verdict = "" if ref is None else ("matches/beats" if r["iqm"] >= ref - 0.02 * abs(ref) else "falls short")
        lines.append(f"| {r['env']} | {r['seeds']} | {r['iqm']:.1f} [{r['iqm_ci'][0]:.1f}, {r['iqm_ci'][1]:.1f}] | "
                     f"{r['mean']:.1f} [{r['mean_ci'][0]:.1f}, {r['mean_ci'][1]:.1f}] | {r['env_steps']:,} | "
                     f"{r['wall_s']:.0f} | {'' if ref is None else ref} | {verdict} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--envs", default="CartPole-v1,Acrobot-v1,Pendulum-v1,Catch-bsuite,MountainCarContinuous-v0,MountainCar-v0")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--total-timesteps", type=int, default=None)
    p.add_argument("--out", default=os.path.join(HERE, "suite"))
    p.add_argument("--extra", default="", help="extra train flags, quoted")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = [run_env(e, a.seeds, a.total_timesteps, a.out, a.extra.split()) for e in a.envs.split(",")]
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    write_table(results, os.path.join(a.out, "table.md"))
    try:
        from purejaxppo.plot import plot_runs

        for r in results:
            plot_runs([r["run_dir"]], os.path.join(a.out, f"{r['env']}.png"))
    except Exception as e:  # plotting is optional (matplotlib extra)
        print(f"plots skipped: {e}")


if __name__ == "__main__":
    main()
