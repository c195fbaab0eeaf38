"""Gymnasium tasks through purejaxppo's host-callback bridge (the slow path) vs SB3.

Same PPO hyperparameters and budget for both (classic-control defaults, see
``sb3_compare.py``), measured in one process: env-steps/s (purejaxppo: run time after
compile, compile apart), final return (mean return of training episodes ending in the
last 5% of steps) and the ratio. On tasks that gymnax also has (CartPole-v1) the native
JAX env is timed too, to show what the bridge costs.

Example:  nice -n 10 python benchmarks/gymnasium_vs_sb3.py --tasks LunarLander-v3,CartPole-v1 \\
              --total-timesteps 50000 --out benchmarks/results/gymnasium_vs_sb3
LunarLander needs box2d (pip install "gymnasium[box2d]"); without it use e.g. Acrobot-v1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_pjp(task: str, total: int, native: bool) -> dict:
    import jax
    import numpy as np

    from purejaxppo import PPOConfig, envs, make_ppo
    from purejaxppo.run.run_folder import final_returns
    from purejaxppo.envs.gymnasium_bridge import gymnasium_vec_env

    cfg = PPOConfig(env_name=task, total_timesteps=total)
    venv = None if native else envs.episode_statistics(gymnasium_vec_env(task, cfg.num_envs))
    ppo = make_ppo(cfg, venv=venv)
    t = time.perf_counter()
    compiled = jax.jit(ppo.train).lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    _, m = compiled(jax.random.PRNGKey(0))
    ret = np.asarray(jax.block_until_ready(m["episode_return"]))
    run_s = time.perf_counter() - t
    steps = cfg.num_updates * cfg.batch_size
    return {
        "compile_s": compile_s,
        "run_s": run_s,
        "env_steps": steps,
        "steps_per_s": steps / run_s,
        "final_return": float(final_returns(ret[None])[0]),
    }


def run_sb3(task: str, total: int, vf_coef: float) -> dict:
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from _common import final_window_return, sb3_ppo_kwargs

    venv = make_vec_env(task, n_envs=4, seed=0)
    model = PPO("MlpPolicy", venv, seed=0, **sb3_ppo_kwargs(total, vf_coef))
    t = time.perf_counter()
    model.learn(total_timesteps=total)
    dt = time.perf_counter() - t
    rets, ends = [], []
    for mon in venv.envs:
        rets += mon.get_episode_rewards()
        ends += list(np.cumsum(mon.get_episode_lengths()) * 4)
    return {
        "run_s": dt,
        "env_steps": int(model.num_timesteps),
        "steps_per_s": model.num_timesteps / dt,
        "final_return": final_window_return(rets, ends, model.num_timesteps),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="LunarLander-v3,CartPole-v1")
    p.add_argument("--total-timesteps", type=int, default=50_000)
    p.add_argument("--sb3-vf-coef", type=float, default=0.25)
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads for SB3")
    p.add_argument("--out", default="benchmarks/results/gymnasium_vs_sb3")
    args = p.parse_args(argv)
    from _common import hardware, set_torch_threads

    set_torch_threads(args.torch_threads)

    from purejaxppo.envs import registered_envs

    res = {"total_timesteps": args.total_timesteps, "hardware": hardware(), "tasks": {}}
    md = [
        f"# Gymnasium tasks: purejaxppo bridge (slow path) vs SB3, {args.total_timesteps} steps, 1 seed",
        "",
        "| task | runner | env-steps/s | run s | compile s | final return |",
        "|---|---|---|---|---|---|",
    ]
    for task in args.tasks.split(","):
        r = {"bridge": run_pjp(task, args.total_timesteps, native=False)}
        if task in registered_envs():
            r["native_gymnax"] = run_pjp(task, args.total_timesteps, native=True)
        r["sb3"] = run_sb3(task, args.total_timesteps, args.sb3_vf_coef)
        r["ratio_bridge_to_sb3"] = r["bridge"]["steps_per_s"] / r["sb3"]["steps_per_s"]
        if "native_gymnax" in r:
            r["ratio_native_to_bridge"] = r["native_gymnax"]["steps_per_s"] / r["bridge"]["steps_per_s"]
        res["tasks"][task] = r
        print(task, json.dumps(r), flush=True)
        for name in ("bridge", "native_gymnax", "sb3"):
            if name in r:
                x = r[name]
                md.append(
                    f"| {task} | {name} | {x['steps_per_s']:.0f} | {x['run_s']:.1f} | "
                    f"{x.get('compile_s', float('nan')):.1f} | {x['final_return']:.1f} |"
                )
    md.append("")
    for task, r in res["tasks"].items():
        md.append(
            f"- {task}: bridge / SB3 steps/s = {r['ratio_bridge_to_sb3']:.2f}x"
            + (
                f"; native gymnax / bridge = {r['ratio_native_to_bridge']:.0f}x"
                if "ratio_native_to_bridge" in r
                else ""
            )
        )
    hw = res["hardware"]
    md += [
        "",
        f"Hardware: {hw['cpu']}, {hw['cpu_count']} cores, load at start {hw.get('loadavg_at_start')}; "
        f"jax {hw['jax']}. One seed each: final returns after this short budget are indicative only.",
        "",
    ]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=2)
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
