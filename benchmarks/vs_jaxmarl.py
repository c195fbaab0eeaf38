"""purejaxppo's IPPO next to JaxMARL's own ``baselines/IPPO/ippo_ff_mpe.py``, same config, same process.

JaxMARL's baselines are scripts in its repository, not in the pip package; fetch them once:

    git clone https://github.com/FLAIROx/JaxMARL /tmp/JaxMARL      # (commit c793d09 measured)
    pip install "purejaxppo[marl]" distrax                              # jaxmarl 0.2.0
    python benchmarks/vs_jaxmarl.py --script /tmp/JaxMARL/baselines/IPPO/ippo_ff_mpe.py \
        [--env-steps 500000] [--seeds 4] [--rounds 1] [--json OUT.json]

Their ``make_train`` is imported from the script as it is: ``hydra`` and ``omegaconf`` (used
only by its ``main``) are stubbed when absent, and ``wandb.log`` (the script logs every update
through an ``io_callback``) is dropped from the timed program: the callback is replaced by a
no-op (one host call per update less on their side). On 2026-12-03 runs of this script stopped in
their program's first execution, idle, with and without the callback (benchmarks/NOTES.md).

The config is the script's ``ippo_ff_mpe.yaml`` (16 envs x 128 steps, 4 epochs x 4 minibatches,
lr 2.5e-4 annealed, tanh 64x64, ent 0.01, clip 0.2, grad clip 0.5) at ``--env-steps`` env steps,
seeds vmapped on both sides (``jax.vmap(train)(keys)``). Ours is the same config on
``jaxmarl:MPE_simple_spread_v3`` (48 rows = 16 envs x 3 agents), run three times: with truncations
bootstrapped (ours), with ``bootstrap_truncated=False`` (their semantics: every end terminal), and
with ``rollout_rng="unsafe_rbg"`` (action sampling from XLA's RngBitGenerator instead of threefry; env
noise stays per-env threefry; under the seeds' ``vmap`` the seeds' action noise is one batch drawn from
the first seed's key, so a seed's numbers differ from the same seed run alone; ``--no-rbg-row`` skips it).
``--unroll N`` sets our rows' ``rollout_unroll``.

Timing: compile (``lower().compile()``) apart, then ``--rounds`` runs per side interleaved,
median. Env-steps/s counts ENV steps (an env step is 3 agent steps) of all seeds together.
Returns: the team return (sum over agents = JaxMARL's ``MPELogWrapper`` return, which logs each
agent's reward x 3), mean over the last 10% of updates and over seeds. Theirs is the mean of
``returned_episode_returns`` over each rollout (the last finished episode's return, held
between episodes); ours is the mean over the episodes finished in each rollout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import types

import jax
import numpy as np


def _stub(name, **attrs):
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod


def load_their_make_train(path, log=None):
    """``make_train`` of JaxMARL's baseline script at ``path``; ``log(dict)`` receives what the script
    passes to ``wandb.log`` (default: dropped)."""
    _stub("hydra", main=lambda **kw: lambda f: f)
    _stub("omegaconf", OmegaConf=types.SimpleNamespace(to_container=lambda c: c))
    _stub("wandb", log=lambda *a, **k: None, init=lambda *a, **k: None)
    spec = importlib.util.spec_from_file_location("jaxmarl_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.wandb = types.SimpleNamespace(log=log or (lambda *a, **k: None))  # the callback's logger
    if log is None:  # no logger: their per-update io_callback dropped (under vmap on CPU it can deadlock)
        mod.jax = _WithoutIoCallback()
    return mod.make_train


class _WithoutIoCallback:
    """``jax`` for a baseline script whose ``jax.experimental.io_callback`` is a no-op."""

    experimental = types.SimpleNamespace(io_callback=lambda *a, **k: None)

    def __getattr__(self, name):
        return getattr(jax, name)


THEIR_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 16,
    "NUM_STEPS": 128,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "MPE_simple_spread_v3",
    "ENV_KWARGS": {},
    "ANNEAL_LR": True,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True, help="JaxMARL's baselines/IPPO/ippo_ff_mpe.py")
    p.add_argument("--env-steps", type=int, default=500_000)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--unroll", type=int, default=1, help="rollout_unroll of our rows (lax.scan unroll)")
    p.add_argument("--no-rbg-row", action="store_true", help="skip our rollout_rng=unsafe_rbg row")
    a = p.parse_args()

    from purejaxppo import PPOConfig, make_ppo

    cfg_theirs = dict(THEIR_CONFIG, TOTAL_TIMESTEPS=a.env_steps)
    their_train = load_their_make_train(a.script)(cfg_theirs)
    n_agents = 3
    ours_cfg = PPOConfig(
        env_name="jaxmarl:MPE_simple_spread_v3",
        num_envs=16 * n_agents,
        num_steps=128,
        total_timesteps=a.env_steps * n_agents,
        update_epochs=4,
        num_minibatches=4,
        lr=2.5e-4,
        anneal_lr=True,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,
        vf_clip_eps=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        activation="tanh",
        hidden_sizes=(64, 64),
        rollout_unroll=a.unroll,
    )
    sides = {
        "jaxmarl_ippo_ff_mpe": (their_train, lambda out: np.asarray(out["metrics"]["returned_episode_returns"])),
        "ours": (make_ppo(ours_cfg).train, lambda out: np.asarray(out[1]["episode_return"])),
        "ours_noboot": (
            make_ppo(ours_cfg.replace(bootstrap_truncated=False)).train,
            lambda out: np.asarray(out[1]["episode_return"]),
        ),
    }
    if not a.no_rbg_row:  # env noise stays per-env threefry; action sampling from XLA's RngBitGenerator
        sides["ours_unsafe_rbg"] = (
            make_ppo(ours_cfg.replace(rollout_rng="unsafe_rbg")).train,
            lambda out: np.asarray(out[1]["episode_return"]),
        )
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    compiled, rows = {}, {}
    for name, (fn, _) in sides.items():
        t0 = time.perf_counter()
        compiled[name] = jax.jit(jax.vmap(fn)).lower(keys).compile()
        rows[name] = {"compile_s": time.perf_counter() - t0, "run_s": []}
    updates = a.env_steps // (16 * 128)
    env_steps = updates * 16 * 128 * a.seeds
    for _ in range(a.rounds):
        for name, (_, returns) in sides.items():
            t0 = time.perf_counter()
            out = jax.block_until_ready(compiled[name](keys))
            rows[name]["run_s"].append(time.perf_counter() - t0)
            ret = returns(out)  # [seeds, updates]
            tail = max(1, ret.shape[1] // 10)
            final = np.nanmean(ret[:, -tail:], axis=1)
            rows[name]["final_return_per_seed"] = final.tolist()
            rows[name]["final_return_mean"] = float(final.mean())
    for r in rows.values():
        r["run_s_median"] = statistics.median(r["run_s"])
        r["env_steps_per_s"] = env_steps / r["run_s_median"]
    base = rows["jaxmarl_ippo_ff_mpe"]["env_steps_per_s"]
    for name, r in rows.items():
        r["speed_vs_jaxmarl"] = r["env_steps_per_s"] / base
        print(
            f"{name:22s} compile {r['compile_s']:6.1f}s  run {r['run_s_median']:7.1f}s  "
            f"{r['env_steps_per_s']:9,.0f} env-steps/s ({r['speed_vs_jaxmarl']:.2f}x)  "
            f"final team return {r['final_return_mean']:.2f} {np.round(r['final_return_per_seed'], 2).tolist()}"
        )
    if a.json:
        json.dump(
            {"env_steps_per_seed": updates * 16 * 128, "seeds": a.seeds, "rows": rows, "jax": jax.__version__},
            open(a.json, "w"),
            indent=1,
        )


if __name__ == "__main__":
    main()
