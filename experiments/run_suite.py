"""Results across the gymnax suite: presets x >= 8 seeds -> experiments/RESULTS.md.

For each env: final return (mean over the last 5% of updates, per seed) as IQM and mean
with 95% bootstrap intervals, the greedy (mode-policy) evaluation of the final params
(64 episodes per seed, IQM over seeds), env steps, wall time on this machine, and a learning-curve
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
REFERENCE = {
    "CartPole-v1": 500.0,
    "Acrobot-v1": -80.0,
    "MountainCar-v0": -118.0,
    "Pendulum-v1": -130.0,
    "MountainCarContinuous-v0": 92.0,
    "Catch-bsuite": 1.0,
    # MinAtar PPO rows of the gymnax README table (gymnax-blines agents, 1e7 steps)
    "Asterix-MinAtar": 15.0,
    "Breakout-MinAtar": 28.0,
    "Freeway-MinAtar": 58.0,
    "SpaceInvaders-MinAtar": 131.0,
}


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


def train_once(env: str, run_dir: str, flags: list[str]) -> dict:
    """``python -m purejaxppo train --env ENV FLAGS --run-dir RUN_DIR --quiet`` unless RUN_DIR
    already holds a finished run; a run that was stopped (killed, machine gone) is resumed from
    its last checkpoint with ``train --resume``. Returns its summary.json."""
    if os.path.exists(os.path.join(run_dir, "summary.json")):
        print(f"{env}: reusing {run_dir}")
    else:
        cmd = [sys.executable, "-m", "purejaxppo", "train", "--env", env, *flags, "--run-dir", run_dir, "--quiet"]
        if os.path.exists(os.path.join(run_dir, "config.json")):
            cmd = [sys.executable, "-m", "purejaxppo", "train", "--resume", run_dir, "--quiet"]
        print(" ".join(cmd), flush=True)
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"{env}: {time.perf_counter() - t:.0f}s", flush=True)
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def run_env(env: str, seeds: int, total: int | None, out_dir: str, extra: list[str]) -> dict:
    run_dir = os.path.join(out_dir, env)
    summary = train_once(
        env, run_dir, ["--preset", "--seeds", str(seeds)] + (["--total-timesteps", str(total)] if total else []) + extra
    )
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)["config"]
    finals = np.asarray(summary["final_return_per_seed"], np.float64)
    greedy = np.asarray(evaluate(run_dir)["per_seed_mean"], np.float64)
    return {
        "greedy": greedy.tolist(),
        "greedy_iqm": iqm(greedy),
        "greedy_iqm_ci": bootstrap_ci(greedy, iqm),
        "env": env,
        "seeds": len(finals),
        "finals": finals.tolist(),
        "iqm": iqm(finals),
        "iqm_ci": bootstrap_ci(finals, iqm),
        "mean": float(finals.mean()),
        "mean_ci": bootstrap_ci(finals, np.mean),
        "env_steps": summary["env_steps"] // len(finals),
        "wall_s": summary["compile_s"] + summary["run_s"],
        "network": cfg["network"],
        "run_dir": run_dir,
    }


def evaluate(run_dir: str, episodes: int = 64) -> dict:
    """Greedy (mode-policy) evaluation of every seed's final params, cached in RUN_DIR/eval.json."""
    path = os.path.join(run_dir, "eval.json")
    if not os.path.exists(path):
        out = subprocess.run(
            [sys.executable, "-m", "purejaxppo", "eval", run_dir, "--episodes", str(episodes), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        with open(path, "w") as f:
            f.write(out)
    with open(path) as f:
        return json.load(f)


def verdict(value: float, ref: float) -> str:
    return "matches/beats" if value >= ref - 0.02 * abs(ref) else "falls short"


def write_table(results: list[dict], path: str) -> None:
    lines = [
        "| env | network | seeds | training return IQM [95% CI] | mean [95% CI] | greedy eval IQM [95% CI] | "
        "env steps / seed | wall s (all seeds) | reference | vs reference (training / greedy) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ref = REFERENCE.get(r["env"])
        vs = "" if ref is None else f"{verdict(r['iqm'], ref)} / {verdict(r['greedy_iqm'], ref)}"
        lines.append(
            f"| {r['env']} | {r['network']} | {r['seeds']} | {r['iqm']:.1f} [{r['iqm_ci'][0]:.1f}, "
            f"{r['iqm_ci'][1]:.1f}] | {r['mean']:.1f} [{r['mean_ci'][0]:.1f}, {r['mean_ci'][1]:.1f}] | "
            f"{r['greedy_iqm']:.1f} [{r['greedy_iqm_ci'][0]:.1f}, {r['greedy_iqm_ci'][1]:.1f}] | "
            f"{r['env_steps']:,} | {r['wall_s']:.0f} | {'' if ref is None else ref} | {vs} |"
        )
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--envs",
        default="CartPole-v1,Acrobot-v1,MountainCar-v0,Pendulum-v1,MountainCarContinuous-v0,"
        "Catch-bsuite,MemoryChain-bsuite,Breakout-MinAtar,SpaceInvaders-MinAtar,Asterix-MinAtar,"
        "Freeway-MinAtar",
    )
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
        from purejaxppo.cli.plot import plot_runs

        for r in results:
            plot_runs([r["run_dir"]], os.path.join(a.out, f"{r['env']}.png"))
    except Exception as e:  # plotting is optional (matplotlib extra)
        print(f"plots skipped: {e}")


if __name__ == "__main__":
    main()
