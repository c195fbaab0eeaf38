"""purejaxppo vs Stable-Baselines3 PPO on CartPole-v1: same hyperparameters, same budget.

One run measures both, so the ratio is taken under the same machine load:
4 envs x 128 steps, 4 epochs x 4 minibatches of 128, lr 2.5e-4 linearly annealed, clip 0.2,
ent 0.01, value loss 0.5 (SB3: 0.25 on its un-halved mse = the same gradient), value clip 0.2,
GAE 0.95, gamma 0.99, max_grad_norm 0.5, tanh 64x64 separate actor/critic, orthogonal init,
5e5 env steps. Reported per library: wall time (purejaxppo: compile and run apart),
env-steps/s and the final return (mean return of training episodes ending in the last 5%
of steps), and the speedup. Also the vmapped-seeds aggregate for purejaxppo (what JAX buys
beyond one run).

Needs the optional extra:  pip install torch  &&  pip install -e ".[sb3]"
Example: nice -n 10 python benchmarks/sb3_compare.py --seeds 1 --out benchmarks/results/sb3_compare
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_purejaxppo(total: int, seeds: int, vmapped_seeds: int) -> dict:
    import jax
    import numpy as np

    from purejaxppo import PPOConfig, make_ppo
    from purejaxppo.run.run_folder import final_returns

    cfg = PPOConfig(env_name="CartPole-v1", total_timesteps=total)
    ppo = make_ppo(cfg)
    one = jax.jit(ppo.train)
    t0 = time.perf_counter()
    compiled = one.lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t0
    runs = []
    for s in range(seeds):
        t = time.perf_counter()
        _, metrics = compiled(jax.random.PRNGKey(s))
        ret = np.asarray(jax.block_until_ready(metrics["episode_return"]))
        dt = time.perf_counter() - t
        runs.append(
            {
                "seed": s,
                "run_s": dt,
                "steps_per_s": cfg.num_updates * cfg.batch_size / dt,
                "final_return": float(final_returns(ret[None])[0]),
            }
        )
    out = {
        "compile_s": compile_s,
        "runs": runs,
        "run_s_mean": float(np.mean([r["run_s"] for r in runs])),
        "steps_per_s_mean": float(np.mean([r["steps_per_s"] for r in runs])),
        "final_return_mean": float(np.mean([r["final_return"] for r in runs])),
        "wall_s_first_run_incl_compile": compile_s + runs[0]["run_s"],
    }
    if vmapped_seeds > 1:
        keys = jax.random.split(jax.random.PRNGKey(100), vmapped_seeds)
        many = jax.jit(jax.vmap(ppo.train)).lower(keys).compile()
        t = time.perf_counter()
        _, m = many(keys)
        ret = np.asarray(jax.block_until_ready(m["episode_return"]))
        dt = time.perf_counter() - t
        out["vmapped"] = {
            "seeds": vmapped_seeds,
            "run_s": dt,
            "aggregate_steps_per_s": vmapped_seeds * cfg.num_updates * cfg.batch_size / dt,
            "final_return_mean": float(np.nanmean(final_returns(ret))),
        }
    return out


def run_sb3(total: int, seeds: int, vf_coef: float) -> dict:
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from _common import final_window_return, sb3_ppo_kwargs

    runs = []
    for s in range(seeds):
        venv = make_vec_env("CartPole-v1", n_envs=4, seed=s)
        model = PPO("MlpPolicy", venv, seed=s, **sb3_ppo_kwargs(total, vf_coef))
        t = time.perf_counter()
        model.learn(total_timesteps=total)
        dt = time.perf_counter() - t
        rets, ends = [], []
        for mon in venv.envs:  # Monitor wrappers: per-env episode returns and lengths
            r, l = mon.get_episode_rewards(), mon.get_episode_lengths()
            rets += r
            ends += list(np.cumsum(l) * 4)  # env steps of the whole vector env when it ended
        runs.append(
            {
                "seed": s,
                "run_s": dt,
                "steps_per_s": model.num_timesteps / dt,
                "env_steps": int(model.num_timesteps),
                "final_return": final_window_return(rets, ends, model.num_timesteps),
            }
        )
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "vf_coef": vf_coef,
        "runs": runs,
        "run_s_mean": float(np.mean([r["run_s"] for r in runs])),
        "steps_per_s_mean": float(np.mean([r["steps_per_s"] for r in runs])),
        "final_return_mean": float(np.mean([r["final_return"] for r in runs])),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--seeds", type=int, default=1, help="sequential runs per library (SB3 ~2 min each)")
    p.add_argument("--vmapped-seeds", type=int, default=8, help="purejaxppo seeds in one vmapped call (0: skip)")
    p.add_argument("--sb3-vf-coef", type=float, default=0.25)
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads for SB3")
    p.add_argument("--out", default="benchmarks/results/sb3_compare", help="writes OUT.json and OUT.md")
    args = p.parse_args(argv)

    from _common import hardware, set_torch_threads

    set_torch_threads(args.torch_threads)

    res = {"task": "CartPole-v1", "total_timesteps": args.total_timesteps, "hardware": hardware()}
    res["purejaxppo"] = run_purejaxppo(args.total_timesteps, args.seeds, args.vmapped_seeds)
    print("purejaxppo", json.dumps(res["purejaxppo"]), flush=True)
    res["sb3"] = run_sb3(args.total_timesteps, args.seeds, args.sb3_vf_coef)
    print("sb3", json.dumps(res["sb3"]), flush=True)
    j, s = res["purejaxppo"], res["sb3"]
    res["speedup_steps_per_s"] = j["steps_per_s_mean"] / s["steps_per_s_mean"]
    res["speedup_wall_incl_compile"] = s["run_s_mean"] / j["wall_s_first_run_incl_compile"]
    if "vmapped" in j:
        res["speedup_vmapped_aggregate"] = j["vmapped"]["aggregate_steps_per_s"] / s["steps_per_s_mean"]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=2)
    hw = res["hardware"]
    md = [
        f"# purejaxppo vs SB3 PPO, CartPole-v1, {args.total_timesteps} steps, {args.seeds} seed(s)",
        "",
        f"Hardware: {hw['cpu']}, {hw['cpu_count']} cores, load at start {hw.get('loadavg_at_start')}; "
        f"jax {hw['jax']} ({hw['backend']}), torch {s['torch']} ({s['torch_threads']} threads).",
        "",
        "| | wall s | env-steps/s | final return |",
        "|---|---|---|---|",
        f"| purejaxppo (1 run) | {j['run_s_mean']:.1f} + compile {j['compile_s']:.1f} | {j['steps_per_s_mean']:.0f} | "
        f"{j['final_return_mean']:.1f} |",
        f"| SB3 PPO (1 run) | {s['run_s_mean']:.1f} | {s['steps_per_s_mean']:.0f} | {s['final_return_mean']:.1f} |",
    ]
    if "vmapped" in j:
        v = j["vmapped"]
        md.append(
            f"| purejaxppo ({v['seeds']} vmapped seeds) | {v['run_s']:.1f} | {v['aggregate_steps_per_s']:.0f} "
            f"(aggregate) | {v['final_return_mean']:.1f} |"
        )
    md += [
        "",
        f"Speedup (steps/s, 1 run): **{res['speedup_steps_per_s']:.1f}x**; wall incl. compile: "
        f"{res['speedup_wall_incl_compile']:.1f}x"
        + (f"; vmapped aggregate: {res['speedup_vmapped_aggregate']:.0f}x" if "vmapped" in j else "")
        + ".",
        "Final return = mean return of training episodes ending in the last 5% of env steps.",
        "",
    ]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    return res


if __name__ == "__main__":
    main()
