"""purejaxppo's IPPO next to JaxMARL's own ``baselines/IPPO/ippo_ff_mpe.py``, same config, same process.

JaxMARL's baselines are scripts in its repository, not in the pip package; fetch them once:

    git clone https://github.com/FLAIROx/JaxMARL /tmp/JaxMARL      # (commit c793d09 measured)
    pip install "purejaxppo[marl]" distrax                              # jaxmarl 0.2.0
    python benchmarks/vs_jaxmarl.py --script /tmp/JaxMARL/baselines/IPPO/ippo_ff_mpe.py \
        [--env-steps 500000] [--seeds 4] [--rounds 1] [--json OUT.json]

Their ``make_train`` is imported from the script as it is, with two changes: ``hydra`` and
``omegaconf`` (used only by its ``main``) are stubbed when absent, and its ``orthogonal`` initializer
(flax's, a LAPACK QR) is swapped for purejaxppo's LAPACK-free one, the initializer our side uses: the
same distribution, the same matrices up to float rounding. Under ``vmap`` over seeds, jaxlib 0.10.2
runs each batched QR by queueing the batch on XLA:CPU's intra-op pool and blocking a pool thread until
it is done; the program's independent QRs (one per layer) occupy both of a 2-core machine's pool
threads that way and it deadlocks in its first execution (benchmarks/NOTES.md, 2026-12-03, with a
5-line reproduction). Their per-update ``io_callback`` (a ``wandb.log``) is kept with a no-op logger
(their program as written: the ``jaxmarl_ippo_ff_mpe`` row), and a second row drops it
(``jaxmarl_ippo_ff_mpe_nocb``: one host call per update less on their side).

The config is the script's ``ippo_ff_mpe.yaml`` (16 envs x 128 steps, 4 epochs x 4 minibatches,
lr 2.5e-4 annealed, tanh 64x64, ent 0.01, clip 0.2, grad clip 0.5) at ``--env-steps`` env steps,
seeds vmapped on both sides (``jax.vmap(train)(keys)``). Ours is the same config on
``jaxmarl:MPE_simple_spread_v3`` (48 rows = 16 envs x 3 agents), run three times: with truncations
bootstrapped (ours), with ``bootstrap_truncated=False`` (their semantics: every end terminal), and
with ``rollout_rng="unsafe_rbg"`` (action sampling from XLA's RngBitGenerator instead of threefry; env
noise stays per-env threefry; under the seeds' ``vmap`` the seeds' action noise is one batch drawn from
the first seed's key, so a seed's numbers differ from the same seed run alone; ``--no-rbg-row`` skips it).
``--unroll N`` sets our rows' ``rollout_unroll``. ``--host-devices N`` forces N host CPU devices
(``XLA_FLAGS``, the whole process: every row) and adds ``ours_Ndev``: our seeds split over them by
``purejaxppo.parallel.sharding.shard_runs``, what ``python -m purejaxppo train --seeds 4`` does by default
on a 2-core host (the same numbers as ``ours``); their script's ``jax.vmap(train)`` runs on one device,
as written.

Timing: compile (``lower().compile()``) apart, then ``--rounds`` runs per side interleaved,
median. ``--only ROW...`` runs some rows only (e.g. each side in a fresh process);
``--merge A.json B.json ... --json OUT`` prints those runs as one table (they must share the budget
and seeds). ``--sync-dispatch`` runs each program on the calling thread (JAX's CPU async dispatch
off, for both sides). ``XLA_FLAGS`` is recorded in the JSON. Env-steps/s counts ENV steps (an env
step is 3 agent steps) of all seeds together; ``speed_vs_jaxmarl`` is relative to their program as
written, ``speed_vs_jaxmarl_nocb`` to it without the callback.
Returns: the team return (sum over agents = JaxMARL's ``MPELogWrapper`` return, which logs each
agent's reward x 3), mean over the last 10% of updates and over seeds. Theirs is the mean of
``returned_episode_returns`` over each rollout (the last finished episode's return, held
between episodes); ours is the mean over the episodes finished in each rollout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import types

if __name__ == "__main__":  # --host-devices N: set before JAX's CPU backend starts (it reads XLA_FLAGS once)
    _pre = argparse.ArgumentParser(add_help=False)
    _pre.add_argument("--host-devices", type=int, default=1)
    _n = _pre.parse_known_args()[0].host_devices
    if _n > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={_n}"

import jax  # noqa: E402
import numpy as np  # noqa: E402


def _stub(name, **attrs):
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod


def load_their_make_train(path, log=None, keep_callback=True, lapack_free_init=False):
    """``make_train`` of JaxMARL's baseline script at ``path``. ``log(dict)`` receives what the script
    passes to ``wandb.log`` (default: dropped); ``keep_callback=False`` makes its
    ``jax.experimental.io_callback`` a no-op; ``lapack_free_init`` swaps the script's ``orthogonal``
    for purejaxppo's (needed to ``vmap`` its ``train`` over seeds on CPU: module docstring)."""
    from purejaxppo.agents.networks import orthogonal

    _stub("hydra", main=lambda **kw: lambda f: f)
    _stub("omegaconf", OmegaConf=types.SimpleNamespace(to_container=lambda c: c))
    _stub("wandb", log=lambda *a, **k: None, init=lambda *a, **k: None)
    spec = importlib.util.spec_from_file_location("jaxmarl_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.wandb = types.SimpleNamespace(log=log or (lambda *a, **k: None))  # the callback's logger
    if lapack_free_init and hasattr(
        mod, "orthogonal"
    ):  # resolved when their networks are called: the swap reaches them
        mod.orthogonal = orthogonal
    if not keep_callback:
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
    p.add_argument("--script", default=None, help="JaxMARL's baselines/IPPO/ippo_ff_mpe.py")
    p.add_argument("--env-steps", type=int, default=500_000)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--unroll", type=int, default=1, help="rollout_unroll of our rows (lax.scan unroll)")
    p.add_argument("--no-rbg-row", action="store_true", help="skip our rollout_rng=unsafe_rbg row")
    p.add_argument("--only", nargs="+", default=None, metavar="ROW", help="run only these rows (one process per side)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="print and merge --only runs' JSONs")
    p.add_argument(
        "--host-devices",
        type=int,
        default=1,
        help="N > 1: XLA_FLAGS forces N host CPU devices (every row's process) and a row ours_Ndev shards our seeds over them",
    )
    p.add_argument(
        "--sync-dispatch", action="store_true", help="jax_cpu_enable_async_dispatch=False (both sides; see Timing)"
    )
    a = p.parse_args()
    if a.sync_dispatch:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if a.merge:
        return merge(a.merge, a.json)

    from purejaxppo import PPOConfig, make_ppo

    cfg_theirs = dict(THEIR_CONFIG, TOTAL_TIMESTEPS=a.env_steps)
    theirs = lambda **kw: (
        load_their_make_train(a.script, lapack_free_init=True, **kw)(dict(cfg_theirs)) if a.script else None
    )
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
    their_returns = lambda out: np.asarray(out["metrics"]["returned_episode_returns"])
    sides = {
        "jaxmarl_ippo_ff_mpe": (theirs(), their_returns),
        "jaxmarl_ippo_ff_mpe_nocb": (theirs(keep_callback=False), their_returns),
        "ours": (make_ppo(ours_cfg).train, lambda out: np.asarray(out[1]["episode_return"])),
        "ours_noboot": (
            make_ppo(ours_cfg.replace(bootstrap_truncated=False)).train,
            lambda out: np.asarray(out[1]["episode_return"]),
        ),
    }
    if a.host_devices > 1:  # the CLI's default layout: seeds split over the host devices (shard_runs)
        from purejaxppo.parallel.sharding import shard_runs

        if len(jax.devices()) < a.host_devices or a.seeds % a.host_devices:
            sys.exit(
                f"error: --host-devices {a.host_devices}: needs that many devices and a divisor of --seeds {a.seeds}"
            )
        sides[f"ours_{a.host_devices}dev"] = (
            shard_runs(make_ppo(ours_cfg).train, a.host_devices),
            lambda out: np.asarray(out[1]["episode_return"]),
        )
    if not a.no_rbg_row:  # env noise stays per-env threefry; action sampling from XLA's RngBitGenerator
        sides["ours_unsafe_rbg"] = (
            make_ppo(ours_cfg.replace(rollout_rng="unsafe_rbg")).train,
            lambda out: np.asarray(out[1]["episode_return"]),
        )
    if a.only:
        unknown = sorted(set(a.only) - set(sides))
        if unknown:
            sys.exit(f"error: --only {' '.join(unknown)}: no such row; choose from {' '.join(sides)}")
        sides = {k: v for k, v in sides.items() if k in a.only}
    if any(fn is None for fn, _ in sides.values()):
        sys.exit("error: the jaxmarl_ippo_ff_mpe rows need --script JaxMARL/baselines/IPPO/ippo_ff_mpe.py")
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    compiled, args, rows = {}, {}, {}
    for name, (fn, _) in sides.items():
        sharded = hasattr(fn, "place")  # shard_runs: its own jit over the mesh, inputs laid out on it
        t0 = time.perf_counter()
        compiled[name] = fn.lower(keys).compile() if sharded else jax.jit(jax.vmap(fn)).lower(keys).compile()
        rows[name] = {"compile_s": time.perf_counter() - t0, "run_s": []}
        args[name] = fn.place(keys) if sharded else (keys,)
    updates = a.env_steps // (16 * 128)
    env_steps = updates * 16 * 128 * a.seeds
    for _ in range(a.rounds):
        for name, (_, returns) in sides.items():
            t0 = time.perf_counter()
            out = jax.block_until_ready(compiled[name](*args[name]))
            rows[name]["run_s"].append(time.perf_counter() - t0)
            ret = returns(out)  # [seeds, updates]
            tail = max(1, ret.shape[1] // 10)
            final = np.nanmean(ret[:, -tail:], axis=1)
            rows[name]["final_return_per_seed"] = final.tolist()
            rows[name]["final_return_mean"] = float(final.mean())
    for r in rows.values():
        r["run_s_median"] = statistics.median(r["run_s"])
        r["env_steps_per_s"] = env_steps / r["run_s_median"]
    meta = {
        "jax": jax.__version__,
        "devices": len(jax.devices()),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "sync_dispatch": a.sync_dispatch,
    }
    report({"env_steps_per_seed": updates * 16 * 128, "seeds": a.seeds, "rows": rows, **meta}, a.json)


def report(result: dict, path=None):
    """Print the rows (with their speed relative to JaxMARL's when its row is there) and write the JSON."""
    rows, base_nocb = result["rows"], "jaxmarl_ippo_ff_mpe_nocb"
    for name, r in rows.items():
        for key, base in (("speed_vs_jaxmarl", "jaxmarl_ippo_ff_mpe"), ("speed_vs_jaxmarl_nocb", base_nocb)):
            if base in rows:
                r[key] = r["env_steps_per_s"] / rows[base]["env_steps_per_s"]
        print(
            f"{name:24s} compile {r['compile_s']:6.1f}s  run {r['run_s_median']:7.1f}s  "
            f"{r['env_steps_per_s']:9,.0f} env-steps/s ({r.get('speed_vs_jaxmarl', float('nan')):.2f}x, "
            f"{r.get('speed_vs_jaxmarl_nocb', float('nan')):.2f}x w/o their callback)  "
            f"final team return {r['final_return_mean']:.2f} {np.round(r['final_return_per_seed'], 2).tolist()}"
        )
    if path:
        json.dump(result, open(path, "w"), indent=1)


def merge(paths, out=None):
    """One table from ``--only`` runs (each side in a fresh process); they must share the budget."""
    parts = [json.load(open(p)) for p in paths]
    same = {(r["env_steps_per_seed"], r["seeds"]) for r in parts}
    if len(same) > 1:
        sys.exit(f"error: --merge {' '.join(paths)}: runs of different budgets/seeds {sorted(same)}")
    rows = {k: v for r in parts for k, v in r["rows"].items()}
    report({**parts[0], "rows": rows, "fresh_process_per_file": list(paths)}, out)


if __name__ == "__main__":
    main()
