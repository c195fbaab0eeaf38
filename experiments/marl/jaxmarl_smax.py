"""JaxMARL's own SMAX scripts (``baselines/IPPO/ippo_rnn_smax.py``, ``baselines/MAPPO/mappo_rnn_smax.py``)
run here, one seed after another, for the learning table of experiments/marl/RESULTS.md.

    python experiments/marl/jaxmarl_smax.py --script /tmp/JaxMARL/baselines/IPPO/ippo_rnn_smax.py \\
        --map 3m --env-steps 200000 --num-envs 16 --out FILE.json

The script is imported as it is (``benchmarks/vs_jaxmarl.py``'s loader: ``hydra``/``omegaconf`` stubbed,
``wandb.log`` replaced by a recorder), with its own yaml config except ``--num-envs`` (JaxMARL's 128
cut for a CPU, as our preset's 16) and ``TOTAL_TIMESTEPS``. Their callback logs, per update and seed,
the mean over the episodes finished in the rollout of agent 0's return and of the win flag; SMAX's
reward is the same for every agent, so the team return is that times the number of agents (what ours
reports). Final = mean over the last 10% of updates, per seed; IQM over seeds."""

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from vs_jaxmarl import load_their_make_train  # noqa: E402

IPPO_RNN_SMAX = dict(  # baselines/IPPO/config/ippo_rnn_smax.yaml
    LR=0.004,
    NUM_STEPS=128,
    GRU_HIDDEN_DIM=128,
    FC_DIM_SIZE=128,
    UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=4,
    GAMMA=0.99,
    GAE_LAMBDA=0.95,
    CLIP_EPS=0.05,
    SCALE_CLIP_EPS=False,
    ENT_COEF=0.01,
    VF_COEF=0.5,
    MAX_GRAD_NORM=0.25,
    ACTIVATION="relu",
    ENV_NAME="HeuristicEnemySMAX",
    ENV_KWARGS=dict(see_enemy_actions=True, walls_cause_death=True, attack_mode="closest"),
    ANNEAL_LR=True,
)
MAPPO_RNN_SMAX = dict(  # baselines/MAPPO/config/mappo_homogenous_rnn_smax.yaml
    IPPO_RNN_SMAX, LR=0.002, CLIP_EPS=0.2, ENT_COEF=0.0, OBS_WITH_AGENT_ID=True
)


def iqm(x):
    q = np.sort(np.asarray(x))
    k = len(q) // 4
    return float(np.mean(q[k : len(q) - k]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True)
    p.add_argument("--map", default="3m")
    p.add_argument("--env-steps", type=int, required=True)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    base = MAPPO_RNN_SMAX if "mappo" in os.path.basename(a.script) else IPPO_RNN_SMAX
    cfg = dict(base, MAP_NAME=a.map, NUM_ENVS=a.num_envs, TOTAL_TIMESTEPS=a.env_steps)
    logged = []
    record = lambda d, *_, **__: logged.append((float(d["returns"]), float(d["win_rate"])))
    train = load_their_make_train(a.script, log=record)(cfg)
    n_agents = cfg["NUM_ACTORS"] // cfg["NUM_ENVS"]
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    t0 = time.time()
    # one seed at a time: under jax.vmap over seeds their flax orthogonal inits (batched LAPACK QRs, also in
    # nn.GRUCell) deadlock jaxlib 0.10.2's CPU thread pool on 2 cores (benchmarks/NOTES.md, 2026-12-03)
    compiled = jax.jit(train).lower(keys[0]).compile()
    t1 = time.time()
    for k in keys:
        jax.block_until_ready(compiled(k))
    t2 = time.time()
    log = np.asarray(logged).reshape(a.seeds, cfg["NUM_UPDATES"], 2)  # the callback: once per update
    ret, win = log[..., 0] * n_agents, log[..., 1]  # [seeds, updates]; team return
    tail = max(1, ret.shape[1] // 10)
    final, final_win = np.nanmean(ret[:, -tail:], axis=1), np.nanmean(win[:, -tail:], axis=1)
    out = dict(
        script=os.path.basename(a.script),
        map=a.map,
        agents=n_agents,
        env_steps=cfg["NUM_UPDATES"] * cfg["NUM_ENVS"] * cfg["NUM_STEPS"],
        agent_steps=cfg["NUM_UPDATES"] * cfg["NUM_ACTORS"] * cfg["NUM_STEPS"],
        seeds=a.seeds,
        final_per_seed=final.tolist(),
        iqm=iqm(final),
        final_win_rate_per_seed=final_win.tolist(),
        compile_s=t1 - t0,
        run_s=t2 - t1,
        curve=np.nanmean(ret, axis=0).tolist(),
        win_curve=np.nanmean(win, axis=0).tolist(),
        config={k: v for k, v in cfg.items()},
    )
    json.dump(out, open(a.out, "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("curve", "win_curve", "config")}))


if __name__ == "__main__":
    main()
