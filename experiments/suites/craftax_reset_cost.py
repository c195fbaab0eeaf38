"""Env-only Craftax-Classic-Symbolic, ONE run (no seed vmap), 32 envs x 128 steps, random actions:
the committed auto-reset (resets computed only on steps where some episode ended) vs the former one
(every env's reset computed on every step), in one process."""

import sys
import time
import jax
import jax.numpy as jnp
from purejaxppo.envs import core, make_vec_env
import purejaxppo.envs.craftax_suite as cs

E, T = 32, 128


def former(spec, num_envs, reset1, step1, env_keys=None):
    env_keys = env_keys or core.default_env_keys(num_envs)

    def reset(key):
        return jax.vmap(lambda k: reset1(core.raw_key(k)))(env_keys(key))

    def one(key, state, action):
        k_step, k_reset = jax.random.split(key)
        obs, state, reward, term, trunc = step1(core.raw_key(k_step), state, action)
        obs0, state0 = reset1(core.raw_key(k_reset))
        done = jnp.logical_or(term, trunc)
        pick = lambda new, old: jnp.where(done, new, old)
        return (
            jax.tree.map(pick, obs0, obs),
            jax.tree.map(pick, state0, state),
            reward.astype(jnp.float32),
            term,
            trunc,
            obs,
        )

    def step(key, state, action):
        obs, state, reward, term, trunc, final = jax.vmap(one)(env_keys(key), state, action)
        return obs, state, reward, term, trunc, {"final_observation": final}

    return core.VecEnv(spec, num_envs, reset, step)


def program(venv):
    def f(key):
        obs, state = venv.reset(key)

        def body(state, k):
            k1, k2 = jax.random.split(k)
            obs, state, r, *_ = venv.step(k2, state, jax.random.randint(k1, (E,), 0, venv.spec.num_actions))
            return state, (r, obs)

        return jax.lax.scan(body, state, jax.random.split(key, T))[1]

    return jax.jit(f)


which = sys.argv[1]
if which == "former":
    cs.auto_reset_vec_env = former
venv = make_vec_env("craftax:Craftax-Classic-Symbolic-v1", E)
t = time.perf_counter()
c = program(venv).lower(jax.random.PRNGKey(0)).compile()
comp = time.perf_counter() - t
jax.block_until_ready(c(jax.random.PRNGKey(1)))
ts = []
for i in range(3):
    t = time.perf_counter()
    jax.block_until_ready(c(jax.random.PRNGKey(2 + i)))
    ts.append(time.perf_counter() - t)
print(which, "compile s", round(comp, 1), "env-steps/s", round(E * T / sorted(ts)[1]), flush=True)
