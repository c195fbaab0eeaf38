"""Learning quality of the fused GRU (purejaxppo/agents/gru.py) against the GRU before it, 16 seeds.

The fused cell computes flax's GRUCell with its own backward pass, so the numbers change at
float rounding only; this checks that learning is unchanged in distribution. Run from a
checkout (``--label new``) and from a worktree of the commit before the change
(``git worktree add /tmp/gru_old 5fa0cc6``; ``PYTHONPATH=/tmp/gru_old python run.py --label old``):
PureJaxRL's ``ppo_rnn.py`` CartPole config (as in benchmarks/vs_purejaxrl.py), 16 seeds vmapped.
Appends one JSON line per run to ``results.jsonl`` next to this file.
"""

import argparse
import json
import os
import time

import jax
import numpy as np

import purejaxppo
from purejaxppo import PPOConfig, make_ppo
from purejaxppo.run.run_folder import final_returns

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--seeds", type=int, default=16)
ap.add_argument("--total-timesteps", type=int, default=250_000)
args = ap.parse_args()
cfg = PPOConfig(
    env_name="CartPole-v1",
    network="gru",
    gru_size=128,
    hidden_sizes=(128,),
    activation="relu",
    num_envs=4,
    num_steps=128,
    update_epochs=4,
    num_minibatches=4,
    lr=2.5e-4,
    total_timesteps=args.total_timesteps,
)
train = jax.jit(jax.vmap(make_ppo(cfg).train))
keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
t = time.perf_counter()
compiled = train.lower(keys).compile()
compile_s = time.perf_counter() - t
t = time.perf_counter()
_, metrics = jax.block_until_ready(compiled(keys))
run_s = time.perf_counter() - t
ret = np.asarray(metrics["episode_return"])
final = final_returns(ret)
row = {
    "label": args.label,
    "library": os.path.dirname(purejaxppo.__file__),
    "seeds": args.seeds,
    "total_timesteps": args.total_timesteps,
    "compile_s": round(compile_s, 2),
    "run_s": round(run_s, 2),
    "final_mean": float(np.mean(final)),
    "final_min": float(np.min(final)),
    "final_per_seed": np.round(final, 1).tolist(),
    "curve_mean_per_tenth": [round(float(np.nanmean(part)), 1) for part in np.array_split(ret, 10, axis=1)],
}
print(json.dumps(row))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.jsonl"), "a") as fh:
    fh.write(json.dumps(row) + "\n")
