"""Training throughput of purejaxppo versus the limits set by the environment.

Prints, in one process, for one env and config:
  * compile seconds of the whole training (one ``jax.jit`` of ``train``),
  * training env-steps/s (median of ``--repeats`` runs after compile),
  * the limits: env-only stepping with random actions, and env + actor forward
    (sampling included), each as a ``lax.scan`` of the same length and batch,
  * ratios of training to those limits.

Example:  python benchmarks/throughput.py --env CartPole-v1   (or: python -m purejaxppo bench ...)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from purejaxppo.cli.devices import set_devices
from purejaxppo.cli.flags import strict_int


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num-envs", type=strict_int, default=4)
    p.add_argument("--num-steps", type=strict_int, default=128)
    p.add_argument("--total-timesteps", type=strict_int, default=500_000)
    p.add_argument("--seeds", type=strict_int, default=1, help="vmapped seeds (aggregate steps/s reported)")
    p.add_argument(
        "--devices",
        type=strict_int,
        default=1,
        help="host CPU devices to split seeds over (sets XLA_FLAGS before JAX starts)",
    )
    p.add_argument("--repeats", type=strict_int, default=3)
    p.add_argument("--rollout-rng", default="threefry", help="PRNG of the rollout (training AND the limits)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p.parse_args(argv)


def _timed(fn, *a):
    import jax

    t = time.perf_counter()
    out = fn(*a)
    jax.block_until_ready(out)
    return time.perf_counter() - t, out


def _train_figures(args, cfg, ppo, keys) -> dict:
    """Compile seconds, the times of ``--repeats`` trainings after compile, steps/s and final returns."""
    import jax
    import numpy as np

    from purejaxppo.parallel.sharding import shard_runs

    if args.devices > 1:
        train = shard_runs(ppo.train, num_devices=args.devices)
        keys = train.place(keys)[0]  # the compiled program takes inputs laid out over the devices
    elif args.seeds > 1:
        train = jax.jit(jax.vmap(ppo.train))
    else:
        train = jax.jit(lambda k: ppo.train(k[0]))
    t0 = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    times, outs = [], None
    for _ in range(args.repeats):
        dt, outs = _timed(compiled, keys)
        times.append(dt)
    steps = cfg.num_updates * cfg.batch_size * args.seeds
    ret = np.asarray(outs[1]["episode_return"]).reshape(args.seeds, -1)
    final = np.array([np.nanmean(r[-max(1, r.shape[0] // 20) :]) for r in ret])
    return {"compile_s": compile_s, "times": times, "train_sps": steps / statistics.median(times), "final": final}


def _stepping(cfg, ppo, act):
    """A function of a key: a scan of the training's env steps with actions from ``act(key, obs) -> (action, extra)``."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.step.train import rollout_key

    venv, n_iter = ppo.venv, cfg.num_updates * cfg.num_steps

    def run(key):
        obs, state = venv.reset(key)
        key = rollout_key(key, cfg.rollout_rng)

        def body(c, k):
            state, obs = c
            k1, k2 = jax.random.split(k)
            a, extra = act(k1, obs)
            obs, state, r, *_ = venv.step(k2, state, a)
            # the observation is part of the output: with only the reward (constant in some envs,
            # e.g. Brax's inverted_pendulum) XLA would drop the physics and report a false limit
            seen = sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(obs))
            return (state, obs), jnp.sum(r + extra) + seen

        return jax.lax.scan(body, (state, obs), jax.random.split(key, n_iter), unroll=cfg.rollout_unroll)[1].sum()

    return run


def _limits(args, cfg, ppo, keys) -> dict:
    """Env steps/s of env-only stepping (random actions) and of env + actor forward (sampling included)."""
    import jax
    import jax.numpy as jnp

    venv, agent = ppo.venv, ppo.agent
    params = ppo.init(jax.random.PRNGKey(0)).train.params

    def random_action(key, obs):
        if venv.spec.discrete:
            a = jax.random.randint(key, (cfg.num_envs,), 0, venv.spec.num_actions)
        else:
            a = jax.random.normal(key, (cfg.num_envs,) + venv.spec.action_shape)
        return a, 0.0

    def actor_action(key, obs):
        _, d, _ = agent.act(params, agent.initial_carry(cfg.num_envs), obs, jnp.zeros((cfg.num_envs,), bool))
        a = agent.dist.sample(key, d)
        return a, agent.dist.log_prob(d, a)  # used in the output so it is not optimised away

    limit_steps = cfg.num_updates * cfg.num_steps * cfg.num_envs
    limits = {}
    for name, act in (("env_only", random_action), ("env_actor", actor_action)):
        fn = _stepping(cfg, ppo, act)
        f = jax.jit(jax.vmap(fn)) if args.seeds > 1 else jax.jit(fn)
        k = keys if args.seeds > 1 else keys[0]
        f(k).block_until_ready()
        ts = [_timed(f, k)[0] for _ in range(args.repeats)]
        limits[name] = limit_steps * args.seeds / statistics.median(ts)
    return limits


def main(argv=None):
    args = _parse(argv)
    set_devices(args.devices)  # before JAX starts: it reads XLA_FLAGS once

    import jax
    import numpy as np

    from purejaxppo import PPOConfig, make_ppo

    cfg = PPOConfig(
        env_name=args.env,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        rollout_rng=args.rollout_rng,
    )
    ppo = make_ppo(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    tr = _train_figures(args, cfg, ppo, keys)
    limits = _limits(args, cfg, ppo, keys)  # same number of env steps, same batch
    train_sps, final = tr["train_sps"], tr["final"]
    res = {
        "env": args.env,
        "rollout_rng": cfg.rollout_rng,
        "num_envs": cfg.num_envs,
        "num_steps": cfg.num_steps,
        "total_timesteps": cfg.total_timesteps,
        "seeds": args.seeds,
        "devices": args.devices,
        "compile_s": round(tr["compile_s"], 2),
        "train_steps_per_s": round(train_sps),
        "train_times_s": [round(t, 3) for t in tr["times"]],
        "env_only_steps_per_s": round(limits["env_only"]),
        "env_actor_steps_per_s": round(limits["env_actor"]),
        "ratio_train_to_env_only": round(train_sps / limits["env_only"], 3),
        "ratio_train_to_env_actor": round(train_sps / limits["env_actor"], 3),
        "final_return_mean": float(np.mean(final)),
        "final_return_min": float(np.min(final)),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }
    w = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:<{w}}  {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
