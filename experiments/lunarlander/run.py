"""LunarLander-v3 to "solved": purejaxppo (Gymnasium bridge) next to Stable-Baselines3's PPO.

Both train with the RL Zoo's PPO hyperparameters for LunarLander (``rl-baselines3-zoo``,
``hyperparams/ppo.yml``: 16 envs x 1024 steps, batch 64, 4 epochs, gamma 0.999,
GAE lambda 0.98, ent_coef 0.01; SB3's defaults otherwise: lr 3e-4 constant, clip 0.2, no value
clipping, vf_coef 0.5, max_grad_norm 0.5, Adam eps 1e-5, separate 64x64 tanh actor and critic)
for the same env steps: 61 rollouts of 16 x 1024 = 999,424 steps.

Both are scored by the SAME evaluation, written here and owned by neither library: 100 episodes
of the greedy policy (the mode: argmax of the logits) on a fresh ``gym.make("LunarLander-v3")``,
episode ``i`` reset with seed ``10_000 * (seed + 1) + i``. "Solved" = mean return >= 200.

    python experiments/lunarlander/run.py train --runner ours --seed 0     # one run -> runs/ours-s0.json
    python experiments/lunarlander/run.py train --runner sb3 --seed 0
    python experiments/lunarlander/run.py summarize                        # table + curves

Needs ``pip install -e ".[sb3]"`` (torch, stable-baselines3, gymnasium[box2d]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "runs")
ENV = "LunarLander-v3"
NUM_ENVS, NUM_STEPS, UPDATES = 16, 1024, 61
TOTAL = NUM_ENVS * NUM_STEPS * UPDATES  # 999,424
ZOO = dict(batch_size=64, n_epochs=4, gamma=0.999, gae_lambda=0.98, ent_coef=0.01)  # the rest: SB3 defaults
EVAL_EPISODES = 100


def greedy_eval(act, seed: int, episodes: int = EVAL_EPISODES) -> list[float]:
    """Mean-return protocol shared by both runners: ``act(obs [8]) -> int`` plays ``episodes`` episodes."""
    import gymnasium as gym

    env = gym.make(ENV)
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 * (seed + 1) + i)
        ret, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(int(act(obs)))
            ret += float(r)
            done = term or trunc
        out.append(ret)
    return out


def train_ours(seed: int) -> dict:
    import jax

    from purejaxppo import PPOConfig, envs, make_ppo
    from purejaxppo.envs.gymnasium_bridge import gymnasium_vec_env

    cfg = PPOConfig(
        env_name=ENV,
        num_envs=NUM_ENVS,
        num_steps=NUM_STEPS,
        total_timesteps=TOTAL,
        update_epochs=ZOO["n_epochs"],
        num_minibatches=NUM_ENVS * NUM_STEPS // ZOO["batch_size"],
        gamma=ZOO["gamma"],
        gae_lambda=ZOO["gae_lambda"],
        ent_coef=ZOO["ent_coef"],
        lr=3e-4,
        anneal_lr=False,
        clip_eps=0.2,
        clip_value=False,
        vf_coef=0.5,
        max_grad_norm=0.5,
    )
    ppo = make_ppo(cfg, venv=envs.episode_statistics(gymnasium_vec_env(ENV, num_envs=NUM_ENVS)))
    key = jax.random.PRNGKey(seed)
    t = time.perf_counter()
    compiled = jax.jit(ppo.train).lower(key).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    runner, metrics = compiled(key)
    curve = np.asarray(jax.block_until_ready(metrics["episode_return"]), np.float64)  # [U] per-update mean
    run_s = time.perf_counter() - t
    params = runner.train.params
    act = jax.jit(lambda o: ppo.agent.dist.mode(ppo.agent.act(params, (), o[None], np.ones(1, bool))[1])[0])
    evals = greedy_eval(lambda o: act(np.asarray(o, np.float32)), seed)
    return {
        "compile_s": compile_s,
        "train_s": run_s,
        "curve_steps": [(u + 1) * cfg.batch_size for u in range(len(curve))],
        "curve_return": [None if not np.isfinite(x) else float(x) for x in curve],
        "config": cfg.to_dict(),
        "eval_returns": evals,
    }


def train_sb3(seed: int, torch_threads: int = 1) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(torch_threads)
    venv = make_vec_env(ENV, n_envs=NUM_ENVS, seed=seed)
    model = PPO("MlpPolicy", venv, n_steps=NUM_STEPS, seed=seed, device="cpu", verbose=0, **ZOO)
    t = time.perf_counter()
    model.learn(total_timesteps=TOTAL)
    train_s = time.perf_counter() - t
    assert model.num_timesteps == TOTAL, model.num_timesteps
    # per-rollout mean return of the episodes that ended in it (the same curve as ours)
    ends, rets = [], []
    for mon in venv.envs:
        ends += list(np.cumsum(mon.get_episode_lengths()) * NUM_ENVS)  # approximate global step of each end
        rets += mon.get_episode_rewards()
    ends, rets = np.asarray(ends), np.asarray(rets)
    batch = NUM_ENVS * NUM_STEPS
    curve = [
        float(rets[(ends > u * batch) & (ends <= (u + 1) * batch)].mean())
        if ((ends > u * batch) & (ends <= (u + 1) * batch)).any()
        else None
        for u in range(UPDATES)
    ]
    evals = greedy_eval(lambda o: model.predict(o, deterministic=True)[0], seed)
    return {
        "compile_s": 0.0,
        "train_s": train_s,
        "curve_steps": [(u + 1) * batch for u in range(UPDATES)],
        "curve_return": curve,
        "config": {
            "n_envs": NUM_ENVS,
            "n_steps": NUM_STEPS,
            **ZOO,
            "total_timesteps": TOTAL,
            "torch_threads": torch_threads,
        },
        "eval_returns": evals,
    }


def summarize(figure: str | None) -> str:
    rows, curves = [], {}
    for runner in ("ours", "sb3"):
        runs = sorted(f for f in os.listdir(RUNS) if f.startswith(runner + "-s") and f.endswith(".json"))
        if not runs:
            continue
        rs = [json.load(open(os.path.join(RUNS, f))) for f in runs]
        means = [float(np.mean(r["eval_returns"])) for r in rs]
        curves[runner] = rs
        rows.append(
            f"| {'purejaxppo (bridge)' if runner == 'ours' else 'SB3 PPO'} | {len(rs)} | "
            f"{', '.join(f'{m:.1f}' for m in means)} | **{np.mean(means):.1f}** | "
            f"{sum(m >= 200 for m in means)} / {len(rs)} | {TOTAL:,} | "
            f"{np.mean([r['train_s'] for r in rs]):.0f} | {np.mean([r['compile_s'] for r in rs]):.0f} |"
        )
    table = (
        "| runner | seeds | greedy eval, mean of 100 episodes, per seed | mean over seeds | solved (>= 200) | "
        "env steps / seed | train s / seed (mean) | compile s / seed |\n|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
    )
    if figure and curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for (runner, rs), color in zip(curves.items(), ("C0", "C1")):
            for k, r in enumerate(rs):
                y = np.array([np.nan if v is None else v for v in r["curve_return"]])
                ax.plot(
                    np.asarray(r["curve_steps"]) / 1e6,
                    y,
                    color=color,
                    alpha=0.7,
                    label=("purejaxppo" if runner == "ours" else "SB3") if k == 0 else None,
                )
        ax.axhline(200, color="k", ls="--", lw=0.8)
        ax.set_xlabel("env steps (millions)"), ax.set_ylabel("training episode return"), ax.legend()
        ax.set_title("LunarLander-v3, RL Zoo hyperparameters, one line per seed")
        fig.tight_layout(), fig.savefig(figure, dpi=100)
    return table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--runner", choices=("ours", "sb3"), required=True)
    t.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("summarize")
    s.add_argument("--figure", default=os.path.join(HERE, "curves.png"))
    args = p.parse_args(argv)
    if args.cmd == "summarize":
        print(summarize(args.figure))
        return 0
    os.makedirs(RUNS, exist_ok=True)
    out = os.path.join(RUNS, f"{args.runner}-s{args.seed}.json")
    if os.path.exists(out):
        print(f"{out} exists; delete it to rerun")
        return 0
    result = (train_ours if args.runner == "ours" else train_sb3)(args.seed)
    result.update(runner=args.runner, seed=args.seed, env=ENV, eval_mean=float(np.mean(result["eval_returns"])))
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out)  # a killed run leaves no half-written result
    print(f"{args.runner} seed {args.seed}: eval mean {result['eval_mean']:.1f}, train {result['train_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
