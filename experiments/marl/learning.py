"""Learning runs for experiments/marl/RESULTS.md: IPPO / MAPPO on JaxMARL envs, seeds vmapped.

    python experiments/marl/learning.py --env jaxmarl:MPE_simple_spread_v3 --steps 1500000 \
        [--critic centralised] [--no-bootstrap] [--network mlp] [--num-envs 48] --out FILE.json

``--steps`` counts agent steps (rows); the JSON holds the per-update team return of every
seed (mean over the episodes finished in that update's rollout), the final return per seed
(mean over the last 10% of updates), its IQM, and the timings."""

import argparse
import json
import time

import jax
import numpy as np

from purejaxppo.config.presets import preset_config
from purejaxppo.step.train import make_ppo


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--critic", default="independent")
    p.add_argument("--no-bootstrap", action="store_true")
    p.add_argument("--network", default=None)
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--set", nargs="*", default=[], help="field=value overrides (python literals)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    over = dict(total_timesteps=a.steps, agent_critic=a.critic, bootstrap_truncated=not a.no_bootstrap)
    if a.network:
        over["network"] = a.network
    if a.num_envs:
        over["num_envs"] = a.num_envs
    for kv in a.set:
        k, v = kv.split("=", 1)
        over[k] = eval(v)
    cfg = preset_config(a.env, **over)
    ppo = make_ppo(cfg)
    train = jax.jit(jax.vmap(ppo.train))
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    t0 = time.time()
    compiled = train.lower(keys).compile()
    t1 = time.time()
    runner, m = compiled(keys)
    ret = np.asarray(jax.block_until_ready(m["episode_return"]))
    t2 = time.time()
    extra = {}
    if ppo.venv.spec.action_mask:  # SMAX: greedy episodes after training; a won battle's team return is 2 x agents
        from purejaxppo.step.evaluate import evaluate_runner

        n = ppo.venv.spec.num_agents
        rets, _ = evaluate_runner(cfg, ppo.agent, runner, jax.random.PRNGKey(1), num_episodes=32)
        per_env = np.asarray(rets)  # [seeds, 32 episodes]: team returns
        extra = dict(
            greedy_team_return_per_seed=np.nanmean(per_env, axis=1).tolist(),
            greedy_win_rate_per_seed=np.mean(per_env > 1.5 * n, axis=1).tolist(),
        )
    tail = max(1, ret.shape[1] // 10)
    final = np.nanmean(ret[:, -tail:], axis=1)
    q = np.sort(final)
    iqm = float(np.mean(q[len(q) // 4 : len(q) - len(q) // 4])) if len(q) >= 4 else float(np.mean(q))
    out = dict(
        env=a.env,
        critic=a.critic,
        bootstrap=not a.no_bootstrap,
        network=cfg.network,
        num_envs=cfg.num_envs,
        agents=ppo.venv.spec.num_agents,
        agent_steps=cfg.num_updates * cfg.batch_size,
        seeds=a.seeds,
        final_per_seed=final.tolist(),
        iqm=iqm,
        compile_s=t1 - t0,
        run_s=t2 - t1,
        agent_steps_per_s=a.seeds * cfg.num_updates * cfg.batch_size / (t2 - t1),
        curve=np.nanmean(ret, axis=0).tolist(),
        config=cfg.to_dict(),
        **extra,
    )
    json.dump(out, open(a.out, "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("curve", "config")}))


if __name__ == "__main__":
    main()
