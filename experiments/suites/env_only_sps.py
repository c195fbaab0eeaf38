"""Env-only stepping limit of a suite env: one jitted lax.scan of make_vec_env(name, num_envs).step
with uniformly random actions (masks ignored), vmapped over --seeds like the training runs.

    python experiments/suites/env_only_sps.py --env navix:Navix-Empty-5x5-v0 --num-envs 16 --seeds 4 --steps 256

Prints compile seconds and env-steps/s (all seeds together; median of --repeats timed calls).
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from purejaxppo.envs import make_vec_env

p = argparse.ArgumentParser()
p.add_argument("--env", required=True)
p.add_argument("--num-envs", type=int, default=16)
p.add_argument("--seeds", type=int, default=4)
p.add_argument("--steps", type=int, default=256, help="scan length (steps per env)")
p.add_argument("--repeats", type=int, default=3)
a = p.parse_args()

venv = make_vec_env(a.env, a.num_envs)
spec = venv.spec


def run(key):
    obs, state = venv.reset(key)

    def body(state, k):
        k1, k2 = jax.random.split(k)
        if spec.discrete:
            act = jax.random.randint(k1, (a.num_envs,), 0, spec.num_actions)
        else:
            act = jax.random.uniform(k1, (a.num_envs,) + tuple(spec.action_shape), minval=-1.0, maxval=1.0)
        obs, state, r, *_ = venv.step(k2, state, act)
        # the observation goes into the output too, so XLA cannot drop the physics when the reward is
        # constant (brax inverted_pendulum: reward 1 every step; purejaxppo.cli.bench's env-only limit is
        # optimised away there)
        o = sum(jnp.sum(jnp.asarray(x, jnp.float32)) for x in jax.tree_util.tree_leaves(obs))
        return state, jnp.sum(r) + o

    return jax.lax.scan(body, state, jax.random.split(key, a.steps))[1].sum()


f = jax.jit(jax.vmap(run))
keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
t = time.perf_counter()
f(keys).block_until_ready()
compile_s = time.perf_counter() - t
ts = []
for _ in range(a.repeats):
    t = time.perf_counter()
    f(keys).block_until_ready()
    ts.append(time.perf_counter() - t)
sps = a.steps * a.num_envs * a.seeds / statistics.median(ts)
print(
    f"env={a.env} num_envs={a.num_envs} seeds={a.seeds} steps={a.steps} "
    f"compile_plus_first_s={compile_s:.1f} env_only_steps_per_s={sps:.0f}"
)
