"""Scaling curves: training env-steps/s vs number of envs and vs number of vmapped seeds.

For each point a fresh ``jax.jit`` of ``--updates`` PPO updates is compiled (compile time
recorded separately), run once to warm up, then ``--repeats`` times (median). Each point
runs at least ``--updates`` updates and at least ``--min-steps`` env steps, so small points
are not pure dispatch overhead. Envs axis: one seed, ``E`` envs. Seeds axis: ``--seed-envs`` envs,
``S`` vmapped seeds (aggregate steps/s). Writes ``OUT.json`` and ``OUT.png``.

Example (the default sweep takes a few minutes on 2 CPU cores):
  nice -n 10 python benchmarks/scaling.py --out benchmarks/results/scaling
Bigger:  --envs 4,16,64,256,1024,4096,16384 --seeds 1,4,16,64,256,1024 --updates 4 --num-steps 128
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ENV_DEFAULTS = {"CartPole-v1": dict(network="mlp"), "Breakout-MinAtar": dict(network="mlp")}


def measure(
    env: str, num_envs: int, seeds: int, num_steps: int, updates: int, repeats: int, network: str, min_steps: int = 0
) -> dict:
    import jax
    from _common import compile_timed, interleaved_rounds

    from purejaxppo import PPOConfig, make_ppo

    # enough updates that a point moves >= min_steps env steps: tiny points are otherwise
    # all dispatch overhead, and their steps/s says nothing about training
    updates = max(updates, -(-min_steps // (num_envs * num_steps * seeds)))
    cfg = PPOConfig(
        env_name=env,
        num_envs=num_envs,
        num_steps=num_steps,
        network=network,
        total_timesteps=num_envs * num_steps * updates,
        num_minibatches=4,
        update_epochs=4,
    )
    ppo = make_ppo(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    fn = jax.jit(jax.vmap(ppo.train)) if seeds > 1 else jax.jit(lambda k: ppo.train(k[0]))
    compiled, compile_s = compile_timed(fn, keys)
    jax.block_until_ready(compiled(keys))  # warm-up: the first call also starts the CPU thread pool
    run_s = statistics.median(interleaved_rounds({"run": functools.partial(compiled, keys)}, repeats)["run"].times)
    steps = cfg.num_updates * cfg.batch_size * seeds
    return {
        "env": env,
        "num_envs": num_envs,
        "seeds": seeds,
        "num_steps": num_steps,
        "updates": cfg.num_updates,
        "network": network,
        "compile_s": round(compile_s, 3),
        "run_s": round(run_s, 4),
        "env_steps": steps,
        "steps_per_s": steps / run_s,
    }


def plot(results: list, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for env in sorted({r["env"] for r in results}):
        ev = [r for r in results if r["env"] == env and r["axis"] == "envs"]
        sv = [r for r in results if r["env"] == env and r["axis"] == "seeds"]
        axes[0].plot([r["num_envs"] for r in ev], [r["steps_per_s"] for r in ev], "o-", label=env)
        axes[1].plot([r["seeds"] for r in sv], [r["steps_per_s"] for r in sv], "o-", label=env)
        axes[2].plot([r["num_envs"] for r in ev], [r["compile_s"] for r in ev], "o-", label=f"{env} (envs)")
        axes[2].plot([r["seeds"] for r in sv], [r["compile_s"] for r in sv], "s--", label=f"{env} (seeds)")
    axes[0].set(
        xscale="log", yscale="log", xlabel="envs (1 seed)", ylabel="training env-steps/s", title="throughput vs envs"
    )
    axes[1].set(
        xscale="log", yscale="log", xlabel="vmapped seeds", ylabel="aggregate env-steps/s", title="throughput vs seeds"
    )
    axes[2].set(xscale="log", xlabel="envs or seeds", ylabel="compile s", title="compile time")
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs-list", "--envs", dest="envs", default="4,16,64,256,1024,4096")
    p.add_argument("--seeds", default="1,4,16,64,256")
    p.add_argument("--seed-envs", type=int, default=4, help="envs per seed on the seeds axis")
    p.add_argument("--tasks", default="CartPole-v1,Breakout-MinAtar")
    p.add_argument("--network", default=None, help="override the network for every task (mlp/cnn)")
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--updates", type=int, default=2, help="at least this many updates per point")
    p.add_argument("--min-steps", type=int, default=200_000, help="at least this many env steps per timed run")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default="benchmarks/results/scaling")
    args = p.parse_args(argv)
    from _common import hardware

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    results = []

    def save():  # after every point, so a hang or kill keeps what was measured
        with open(args.out + ".json", "w") as f:
            json.dump({"hardware": hardware(), "args": vars(args), "results": results}, f, indent=2)

    for task in args.tasks.split(","):
        net = args.network or ENV_DEFAULTS.get(task, {}).get("network", "mlp")
        for axis, values in (("envs", args.envs), ("seeds", args.seeds)):
            for v in map(int, values.split(",")):
                e, s = (v, 1) if axis == "envs" else (args.seed_envs, v)
                r = measure(task, e, s, args.num_steps, args.updates, args.repeats, net, args.min_steps)
                r["axis"] = axis
                results.append(r)
                print(json.dumps(r), flush=True)
                save()
    plot(results, args.out + ".png")
    print(f"wrote {args.out}.json and {args.out}.png")


if __name__ == "__main__":
    main()
