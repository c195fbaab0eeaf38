"""Env-only Craftax-Classic-Symbolic with SEEDS vmapped runs (as `--seeds` trains them), 32 envs each,
random actions: env-steps/s for each ``reset_ratio``, all in one process, and how often a group had
more than one episode end on a step (where optimistic resets give a copied start).

Under the seeds vmap the auto-reset's ``lax.cond(any(done))`` is a select: every step pays for the
resets, so the reset_ratio is what cuts them.

    python experiments/suites/craftax_reset_ratio.py --seeds 4 --ratios 1,8,32
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.envs import make_vec_env

ap = argparse.ArgumentParser()
ap.add_argument("--env", default="craftax:Craftax-Classic-Symbolic-v1")
ap.add_argument("--seeds", type=int, default=4)
ap.add_argument("--envs", type=int, default=32)
ap.add_argument("--steps", type=int, default=64)
ap.add_argument("--ratios", default="1,8,32")
args = ap.parse_args()
E, T = args.envs, args.steps


def program(venv, ratio):
    def one(key):
        obs, state = venv.reset(key)

        def body(state, k):
            k1, k2 = jax.random.split(k)
            obs, state, r, term, trunc, _ = venv.step(k2, state, jax.random.randint(k1, (E,), 0, venv.spec.num_actions))
            done = jnp.logical_or(term, trunc).reshape(E // ratio, ratio)
            return state, (obs.sum(), done.sum(1))

        return jax.lax.scan(body, state, jax.random.split(key, T))[1]

    return jax.jit(jax.vmap(one))


for ratio in (int(r) for r in args.ratios.split(",")):
    venv = make_vec_env(args.env, E, reset_ratio=ratio)
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    t = time.perf_counter()
    compiled = program(venv, ratio).lower(keys).compile()
    comp = time.perf_counter() - t
    jax.block_until_ready(compiled(keys))
    times, ends = [], []
    for i in range(3):
        keys = jax.random.split(jax.random.PRNGKey(1 + i), args.seeds)
        t = time.perf_counter()
        _, per_group = jax.block_until_ready(compiled(keys))
        times.append(time.perf_counter() - t)
        ends.append(np.asarray(per_group))
    ends = np.concatenate([e.reshape(-1) for e in ends])
    print(
        f"reset_ratio {ratio}: {args.seeds} seeds x {E} envs: env-steps/s {args.seeds * E * T / sorted(times)[1]:.0f} "
        f"(median of 3), compile {comp:.1f} s; episode ends per env-step {ends.sum() / (ends.size * ratio):.4f}; "
        f"group-steps with >1 end: {(ends > 1).mean():.4f}",
        flush=True,
    )
