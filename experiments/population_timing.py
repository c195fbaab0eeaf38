"""Wall time of an 8-member x 4-seed CartPole sweep in ONE compile versus 32 sequential
runs (each its own jit call, compiled once and reused), in one process.

    python experiments/population_timing.py [--total-timesteps 500000]
"""

import argparse
import json
import os
import time

import jax
import numpy as np

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.parallel.runs_axis import make_population, member, results_table, runs
from purejaxppo.run.run_folder import final_returns


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--out", default="experiments/results/population_timing.json")
    a = p.parse_args()
    base = PPOConfig(total_timesteps=a.total_timesteps)
    pop = make_population(base, {"lr": [1e-4, 2.5e-4, 5e-4, 1e-3], "clip_eps": [0.1, 0.2]}, num_seeds=4)
    ppo = make_ppo(base)
    keys, configs = runs(base, pop.members, pop.num_seeds, seed=0)  # R = members x seeds, run m*S + s
    S = pop.num_seeds

    t = time.perf_counter()
    f = jax.jit(jax.vmap(ppo.train)).lower(keys, configs).compile()
    pop_compile = time.perf_counter() - t
    t = time.perf_counter()
    _, m = f(keys, configs)
    jax.block_until_ready(m)
    pop_run = time.perf_counter() - t
    fr = final_returns(np.asarray(m["episode_return"])).reshape(len(pop.members), S)

    # 32 sequential runs: the same train function, jitted once (numeric config as an argument)
    t = time.perf_counter()
    single = jax.jit(ppo.train).lower(keys[0], member(pop, 0)[0]).compile()
    seq_compile = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(len(pop.members)):
        cfg = member(pop, i)[0]
        for s in range(pop.num_seeds):
            jax.block_until_ready(single(keys[i * S + s], cfg)[1])
    seq_run = time.perf_counter() - t
    res = {
        "members": len(pop.members),
        "seeds": pop.num_seeds,
        "total_timesteps": a.total_timesteps,
        "population_compile_s": round(pop_compile, 2),
        "population_run_s": round(pop_run, 2),
        "sequential_compile_s": round(seq_compile, 2),
        "sequential_run_s": round(seq_run, 2),
        "speedup_run": round(seq_run / pop_run, 2),
        "speedup_total": round((seq_run + seq_compile) / (pop_run + pop_compile), 2),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
    }
    print(results_table(pop, fr))
    for k, v in res.items():
        print(f"{k:<22} {v}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump({**res, "table": results_table(pop, fr)}, fh, indent=2)


if __name__ == "__main__":
    main()
