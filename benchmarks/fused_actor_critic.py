"""Lever of issue 11, measured: actor and critic MLPs fused into one batched matmul per layer.

On XLA:CPU a default CartPole update is ~15.6k gradient steps on 128-transition minibatches,
each costing about 0.2 ms, mostly per-op overhead rather than arithmetic
(`benchmarks/profile_step.py`). The library's actor and critic are two separate MLPs, so every
layer is two small matmuls forward and four backward, and Adam walks twice as many leaves. Here
the two torsos' weights are stacked on a leading axis of 2 (``[2, in, out]``) and each layer is
one ``einsum`` over both: half the dot ops and half the parameter leaves, the same function
(each torso still has its own weights, each initialised as the library's: orthogonal, gain
sqrt(2); heads 0.01 and 1).

It plugs into the unchanged training step through ``make_train(config, network=...)`` and is
timed against the library's network in the same process, rounds interleaved, same config and
seed, compile apart from run. Discrete actions only (CartPole and MinAtar rows).

    python benchmarks/fused_actor_critic.py                       # default CartPole, 1 seed
    python benchmarks/fused_actor_critic.py --seeds 16 --rounds 2

Measured on the 2-core x86_64 CPU, machine otherwise idle (2026-12-01), the lever LOSES and is not
in the library: 1 seed 0.87x (79.8k vs 91.6k env-steps/s, 3 rounds,
`results/fused_actor_critic_1seed.json`); 16 seeds 0.69x (78.8k vs 114.1k, 2 rounds at 125k steps
per seed, `results/fused_actor_critic_16seeds.json`). Fewer ops do not pay for XLA:CPU lowering a
batched ``einsum`` to a loop of small dots instead of one plain GEMM per torso. Compile is 5-10%
shorter. Returns are equal (500 and 500; 286 and 279 at the shorter 16-seed budget).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import hardware  # noqa: E402

from purejaxppo import envs as envs_lib  # noqa: E402
from purejaxppo.config import PPOConfig  # noqa: E402
from purejaxppo.agents.networks import ACTIVATION_FNS, Network, distribution_for, orthogonal  # noqa: E402
from purejaxppo.step.train import make_train  # noqa: E402


def fused_network(spec, hidden_sizes=(64, 64), activation="tanh") -> Network:
    """Actor and critic torsos with stacked weights ``[2, in, out]`` (0 = actor, 1 = critic)."""
    if not spec.discrete or spec.action_mask:
        raise ValueError("fused_network: plain Discrete actions only")
    act = ACTIVATION_FNS[activation]
    in_dim = int(np.prod(spec.obs_shape))

    def init(key):
        sizes = (in_dim,) + tuple(hidden_sizes)
        keys = jax.random.split(key, 2 * len(hidden_sizes) + 2)
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = jnp.stack([orthogonal(math.sqrt(2))(keys[2 * i + s], (a, b)) for s in range(2)])
            layers.append({"w": w, "b": jnp.zeros((2, b))})
        h = sizes[-1]
        return {"layers": layers,
                "pi": {"w": orthogonal(0.01)(keys[-2], (h, spec.num_actions)), "b": jnp.zeros(spec.num_actions)},
                "v": {"w": orthogonal(1.0)(keys[-1], (h, 1)), "b": jnp.zeros(1)}}

    def flat(obs):
        return obs.reshape(obs.shape[: obs.ndim - len(spec.obs_shape)] + (in_dim,))

    def torso(params, x, s):  # one torso alone (the rollout's actor; the critic after the scan)
        for layer in params["layers"]:
            x = act(x @ layer["w"][s] + layer["b"][s])
        return x

    def actor(params, obs):
        return torso(params, flat(obs), 0) @ params["pi"]["w"] + params["pi"]["b"]

    def critic(params, obs):
        return (torso(params, flat(obs), 1) @ params["v"]["w"] + params["v"]["b"])[..., 0]

    def apply(params, obs):  # both torsos in one batched matmul per layer (the loss)
        x = flat(obs)
        batch = x.shape[:-1]
        first, *rest = params["layers"]
        b = lambda layer: layer["b"].reshape((2,) + (1,) * len(batch) + layer["b"].shape[-1:])
        h = act(jnp.einsum("...i,sio->s...o", x, first["w"]) + b(first))
        for layer in rest:
            h = act(jnp.einsum("s...i,sio->s...o", h, layer["w"]) + b(layer))
        logits = h[0] @ params["pi"]["w"] + params["pi"]["b"]
        value = (h[1] @ params["v"]["w"] + params["v"]["b"])[..., 0]
        return logits, value

    return Network(init=init, actor=actor, critic=critic, apply=apply, dist=distribution_for(spec))


def _program(config: PPOConfig, seeds: int, network):
    train = make_train(config, network=network) if network is not None else make_train(config)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    fn = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(lambda k: train(k[0]))
    t = time.perf_counter()
    compiled = fn.lower(keys).compile()
    return compiled, keys, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--out", default="benchmarks/results/fused_actor_critic.json")
    args = p.parse_args()
    config = PPOConfig(env_name=args.env, total_timesteps=args.total_timesteps)
    spec = envs_lib.make_vec_env(args.env, 1).spec
    sides = {"library": None, "fused": fused_network(spec, config.hidden_sizes, config.activation)}
    programs = {name: _program(config, args.seeds, net) for name, net in sides.items()}
    steps = config.num_updates * config.num_envs * config.num_steps * args.seeds
    runs = {name: [] for name in sides}
    finals = {}
    for _ in range(args.rounds):  # interleaved: both sides see the same machine state
        for name, (compiled, keys, _) in programs.items():
            t = time.perf_counter()
            _, metrics = compiled(keys)
            jax.block_until_ready(metrics)
            runs[name].append(steps / (time.perf_counter() - t))
            ret = np.asarray(metrics["episode_return"])  # [..., updates]
            finals[name] = float(np.nanmean(ret[..., -max(1, ret.shape[-1] // 20):]))
    result = {"hardware": hardware(), "env": args.env, "seeds": args.seeds, "env_steps_per_run": steps,
              "sides": {name: {"steps_per_s": runs[name], "median_steps_per_s": float(np.median(runs[name])),
                               "compile_s": programs[name][2], "final_return": finals[name]} for name in sides}}
    result["ratio_fused_over_library"] = result["sides"]["fused"]["median_steps_per_s"] / \
        result["sides"]["library"]["median_steps_per_s"]
    for name, r in result["sides"].items():
        print(f"{name:8s} env-steps/s {' '.join(f'{x / 1e3:.1f}k' for x in r['steps_per_s'])} "
              f"(median {r['median_steps_per_s'] / 1e3:.1f}k)  compile {r['compile_s']:.1f} s  "
              f"final return {r['final_return']:.1f}")
    print(f"fused / library: {result['ratio_fused_over_library']:.2f}x")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
