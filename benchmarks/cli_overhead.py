"""The wait around training in the CLI, and the CLI's in-run speed next to the benchmark's.

Per round, both in fresh subprocesses, same config (default CartPole-v1 unless ``--env``/``--total-timesteps``):
  * ``python -m purejaxppo train --env ENV --quiet --run-dir TMP``: wall time, and from its
    ``summary.json`` the compile and run seconds and env-steps/s; overhead = wall - compile - run
    (interpreter start, imports, env build, run-folder writes, exit);
  * the benchmark: ``jax.jit(make_ppo(config).train)`` compiled, then timed once (what
    ``benchmarks/throughput.py`` measures), env-steps/s.
Round 1 uses an empty compilation cache (a fresh folder, ``PUREJAXPPO_CACHE_DIR``); later
rounds find the compiled programs there, as a user's second identical run does. Every round
also runs the CLI with JAX's persistent cache alone (``PUREJAXPPO_NO_EXECUTABLE_CACHE=1``, its own
cache folder: every program traced and lowered, then found by JAX when warm), to show what the
whole-executable cache saves.

Example:  python benchmarks/cli_overhead.py --rounds 3 --json benchmarks/results/cli_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BENCH = r"""
import json, sys, time
import jax
from purejaxppo import PPOConfig, make_ppo
cfg = PPOConfig(env_name=sys.argv[1], total_timesteps=int(sys.argv[2]))
train = jax.jit(make_ppo(cfg).train)
key = jax.random.PRNGKey(0)
t = time.perf_counter(); compiled = train.lower(key).compile(); c = time.perf_counter() - t
t = time.perf_counter(); jax.block_until_ready(compiled(key)); r = time.perf_counter() - t
print("BENCH " + json.dumps({"compile_s": c, "run_s": r, "steps_per_s": cfg.num_updates * cfg.batch_size / r}))
"""


def run_cli(env: str, steps: int, cache: str, tmp: str, i, jax_cache_only: bool = False) -> dict:
    run_dir = os.path.join(tmp, f"run{i}")
    environ = {
        **os.environ,
        "PUREJAXPPO_CACHE_DIR": cache,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    if jax_cache_only:
        environ["PUREJAXPPO_NO_EXECUTABLE_CACHE"] = "1"
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "purejaxppo",
            "train",
            "--env",
            env,
            "--total-timesteps",
            str(steps),
            "--quiet",
            "--run-dir",
            run_dir,
        ],
        env=environ,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"the CLI failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    s = json.load(open(os.path.join(run_dir, "summary.json")))
    return {
        "wall_s": wall,
        "compile_s": s["compile_s"],
        "run_s": s["run_s"],
        "steps_per_s": s["steps_per_s"],
        "overhead_s": wall - s["compile_s"] - s["run_s"],
    }


def run_bench(env: str, steps: int) -> dict:
    environ = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    environ.pop("PUREJAXPPO_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", BENCH, env, str(steps)], env=environ, capture_output=True, text=True)
    line = [l for l in proc.stdout.splitlines() if l.startswith("BENCH ")]
    if proc.returncode or not line:
        raise SystemExit(f"the benchmark failed:\n{proc.stderr[-2000:]}")
    return json.loads(line[-1][6:])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    from _common import hardware  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "xla-cache")
        for i in range(args.rounds):
            cli = run_cli(args.env, args.total_timesteps, cache, tmp, i)
            bench = run_bench(args.env, args.total_timesteps)
            rows.append(
                {
                    "round": i + 1,
                    "cache": "cold" if i == 0 else "warm",
                    "cli": cli,
                    "bench": bench,
                    "in_run_ratio": cli["steps_per_s"] / bench["steps_per_s"],
                }
            )
            # its own folder: the whole-executable cache compiles without JAX's cache, so it fills none
            jax_only = run_cli(
                args.env, args.total_timesteps, cache + "-jax-only", tmp, f"{i}-jax", jax_cache_only=True
            )
            rows.append(
                {
                    "round": i + 1,
                    "cache": ("cold" if i == 0 else "warm") + ", JAX's cache only",
                    "cli": jax_only,
                    "bench": bench,
                    "in_run_ratio": jax_only["steps_per_s"] / bench["steps_per_s"],
                }
            )
    print(f"{args.env}, {args.total_timesteps} steps, {args.rounds} rounds (CLI then benchmark, interleaved)")
    print(
        "| round | cache | CLI wall s | compile s | run s | overhead s (wall - compile - run) | CLI steps/s | "
        "bench steps/s | CLI / bench |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, b = r["cli"], r["bench"]
        print(
            f"| {r['round']} | {r['cache']} | {c['wall_s']:.1f} | {c['compile_s']:.1f} | {c['run_s']:.1f} | "
            f"{c['overhead_s']:.1f} | {c['steps_per_s']:,.0f} | {b['steps_per_s']:,.0f} | {r['in_run_ratio']:.3f} |"
        )
    warm = [r for r in rows if r["cache"] == "warm"]
    jax_only = [r for r in rows if r["cache"] == "warm, JAX's cache only"]
    res = {"env": args.env, "total_timesteps": args.total_timesteps, "rows": rows, "hardware": hardware()}
    if warm:
        res["warm_overhead_s_median"] = statistics.median(r["cli"]["overhead_s"] for r in warm)
        res["warm_compile_s_median"] = statistics.median(r["cli"]["compile_s"] for r in warm)
        res["warm_jax_cache_only_compile_s_median"] = statistics.median(r["cli"]["compile_s"] for r in jax_only)
        print(f"warm compile with JAX's cache only: {res['warm_jax_cache_only_compile_s_median']:.1f} s")
        res["in_run_ratio_median"] = statistics.median(r["in_run_ratio"] for r in rows if "only" not in r["cache"])
        print(
            f"warm cache: overhead {res['warm_overhead_s_median']:.1f} s (target <= 3), compile "
            f"{res['warm_compile_s_median']:.1f} s (target <= 1); in-run CLI/bench {res['in_run_ratio_median']:.3f} "
            "(target >= 0.95)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
