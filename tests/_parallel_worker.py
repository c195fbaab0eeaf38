"""Helper for tests/test_parallel.py: runs in a subprocess with 4 forced host CPU devices.

``XLA_FLAGS`` must be set before JAX initialises, so the main pytest process cannot
get several CPU devices; this script is launched with the flag and prints ONE JSON line
of measured differences, which the test asserts on. The references are single-device
programs (``jax.jit(jax.vmap(train))``, ``jax.jit(make_ppo(cfg).train)``, the CLI with
``--devices 1``), never the code under test.

Usage: XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/_parallel_worker.py CHECK[:PART]
with CHECK in {runs, pbt, split_envs, errors, cli}; a PART runs one piece of a check (one option
of ``split_envs``, one variant of ``cli``), so the pieces can run in parallel test workers.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile

import jax
import numpy as np

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.parallel.sharding import shard_runs, split_envs, stack_configs


def max_rel_diff(a, b) -> float:
    """Largest |a-b| / (1 + |b|) over all leaves (NaNs must coincide)."""
    worst = 0.0
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(la) != len(lb):
        return float("inf")
    for x, y in zip(la, lb):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return float("inf")
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        d = np.abs(np.nan_to_num(x) - np.nan_to_num(y)) / (1.0 + np.abs(np.nan_to_num(y)))
        worst = max(worst, float(d.max(initial=0.0)))
    return worst


SMALL = dict(
    env_name="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=8 * 16 * 3
)
# every option the data-parallel step must honour (issue 10), grouped to share compiles: each
# option changes the numbers, so one that the split path ignored would show as a difference
OPTIONS = {
    "default": {},
    "critic_lr_target_kl_batch_adv": dict(critic_lr=1e-2, target_kl=1e-5, lr=3e-3, adv_norm="batch"),
    "unsafe_rbg_normalize_obs_reward": dict(rollout_rng="unsafe_rbg", normalize_obs=True, normalize_reward=True),
    "gru_pendulum_norm": dict(
        network="gru",
        gru_size=16,
        hidden_sizes=(16,),
        env_name="Pendulum-v1",
        normalize_obs=True,
        normalize_reward=True,
    ),
}


def check_runs():
    base = PPOConfig(**SMALL)
    members = [base.replace(lr=lr, clip_eps=c) for lr, c in ((1e-3, 0.2), (3e-4, 0.1))]
    configs = stack_configs([m for m in members for _ in range(4)])  # 8 runs: member-major
    keys = jax.random.split(jax.random.PRNGKey(1), 8)
    train = make_ppo(base).train
    ref = jax.jit(jax.vmap(train))(keys, configs)
    # 2 devices: on a 2-core host shard_map over 4 forced devices has hung in XLA:CPU
    got = shard_runs(train, 2)(keys, configs)
    return {
        "runs_vs_ref": max_rel_diff(got, ref),
        "out_devices": len(jax.tree.leaves(got)[0].sharding.device_set),
        "members_differ": max_rel_diff(ref[0].train.params, jax.tree.map(lambda x: x[::-1], ref[0].train.params)),
        "finite": bool(np.all(np.isfinite(np.asarray(ref[1]["actor_loss"])))),
    }


def check_pbt():
    """PBT members on 2 devices (exploit over an all_gather) vs the one-device program."""
    from purejaxppo.algorithms.pbt import parse_search, search_space
    from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings
    from purejaxppo.programs.pbt_run import initial_members
    from purejaxppo.run.run_folder import run_inputs

    base = PPOConfig(**SMALL)
    space = search_space(base, parse_search(["lr=loguniform:1e-4:3e-1"]))
    keys, configs = run_inputs(base, 0, 1, initial_members(space, 8, 0))
    out = {}
    for d in (1, 2):
        prog = PBTProgram(base, PBTSettings(space, interval=1, window=1), num_devices=d)
        (state, metrics), finite = prog.chunk(
            base.num_updates, prog.init(*prog.place(keys, configs)), prog.place(configs)[0]
        )
        out[d] = (state, metrics)
    (s1, m1), (s2, m2) = out[1], out[2]
    return {
        "pbt_params": max_rel_diff(s2.runner.train.params, s1.runner.train.params),
        "pbt_metrics": max_rel_diff(
            {k: v for k, v in m2.items() if k != "pbt_score"}, {k: v for k, v in m1.items() if k != "pbt_score"}
        ),
        "pbt_same_parents": bool(np.array_equal(np.asarray(m2["pbt_parent"]), np.asarray(m1["pbt_parent"]))),
        "pbt_copies": int(np.sum(np.asarray(m1["pbt_parent"]) != np.arange(8)[:, None])),
        "pbt_out_devices": len(jax.tree.leaves(s2)[0].sharding.device_set),
    }


# multi-agent (jaxmarl): 12 rows = 4 MPE envs x 3 agents, 2 envs per device; MAPPO's global state
OPTIONS["marl_mappo"] = dict(
    env_name="jaxmarl:MPE_simple_spread_v3", num_envs=12, agent_critic="centralised", total_timesteps=12 * 16 * 3
)
SPLIT_PARTS = {
    "a": ("default", "critic_lr_target_kl_batch_adv"),
    "b": ("unsafe_rbg_normalize_obs_reward", "gru_pendulum_norm"),
    "marl": ("marl_mappo",),
}


def check_split_envs(part):
    """``part`` ``a`` or ``b``: its ``OPTIONS`` (1 vs 2 devices each); ``a`` also checks
    sensitivity to the key, the chunked run and vmapped seeds."""
    out, built = {}, {}
    key = jax.random.PRNGKey(3)
    for name in SPLIT_PARTS[part]:
        kw = OPTIONS[name]
        cfg = PPOConfig(**{**SMALL, **kw})
        ppo, dp = make_ppo(cfg), split_envs(cfg, 2)
        ref = jax.jit(ppo.train)(key)
        got = jax.jit(dp.train)(key)
        built[name] = (ppo, dp, ref)
        out[f"{name}_metrics"] = max_rel_diff(got[1], ref[1])
        out[f"{name}_params"] = max_rel_diff(got[0].train.params, ref[0].train.params)
        out[f"{name}_obs"] = max_rel_diff(got[0].obs, ref[0].obs)
        if "target_kl" in name:
            out["target_kl_min_taken"] = float(np.min(ref[1]["minibatches_taken"]))
    if part != "a":
        return out
    cfg = PPOConfig(**SMALL)
    ppo, dp, ref = built["default"]
    # sensitivity: a different key changes the result (so the equalities can fail)
    out["other_key_params"] = max_rel_diff(
        jax.jit(dp.train)(jax.random.PRNGKey(4))[0].train.params, ref[0].train.params
    )
    # init, then run in chunks (the driver's way), equals train; the env state stays sharded
    runner = jax.jit(dp.init)(key)
    chunk = jax.jit(lambda r: dp.run(r, cfg, 1))
    for _ in range(3):
        runner, _ = chunk(runner)
    out["chunked_params"] = max_rel_diff(runner.train.params, ref[0].train.params)
    out["env_state_sharded_over"] = len(jax.tree.leaves(runner.env_state)[0].sharding.device_set)
    # seeds vmapped on top of the env split equal separate single-device runs (the single-device
    # train compiled above for ``ref``, once per seed key: no further compile)
    keys = jax.random.split(jax.random.PRNGKey(5), 2)
    single = jax.jit(ppo.train)
    seeds_ref = jax.tree.map(lambda *xs: np.stack(xs), *[single(k)[0].train.params for k in keys])
    out["vmapped_seeds_params"] = max_rel_diff(jax.jit(jax.vmap(dp.train))(keys)[0].train.params, seeds_ref)
    return out


def _pbt_place(cfg, members: int, devices: int):
    """A PBT program on ``devices`` laying out ``members`` keys (the runs' check, in PBT's words)."""
    from purejaxppo.algorithms.pbt import parse_search, search_space
    from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings

    space = search_space(cfg, parse_search(["lr=loguniform:1e-4:3e-1"]))
    prog = PBTProgram(cfg, PBTSettings(space, interval=1), num_devices=devices)
    return prog.place(jax.random.split(jax.random.PRNGKey(0), members))


def check_errors():
    msgs = {}
    cfg = PPOConfig(**SMALL)
    for name, fn in {
        "uneven_envs": lambda: split_envs(cfg.replace(num_envs=6, num_minibatches=1), 4),
        "uneven_minibatch": lambda: split_envs(cfg.replace(network="gru", num_minibatches=8), 2),
        "too_many_devices": lambda: split_envs(cfg, 8),
        "uneven_runs": lambda: shard_runs(make_ppo(cfg).train, 4)(
            jax.random.split(jax.random.PRNGKey(0), 3), stack_configs([cfg] * 3)
        ),
        "uneven_members": lambda: _pbt_place(cfg, 3, 4),
    }.items():
        try:
            fn()
            msgs[name] = None
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            msgs[name] = f"{type(e).__name__}: {e}"
    return msgs


def _cli_metrics(argv):
    """Run the CLI; return (exit code, output, metrics.csv as a float array, header, the
    ``(num_devices, split)`` its config.json records)."""
    from purejaxppo.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.redirect_stdout(io.StringIO()) as log, contextlib.redirect_stderr(io.StringIO()) as err:
            rc = main(argv + ["--run-dir", f"{tmp}/run", "--quiet"])
        try:
            text = open(f"{tmp}/run/metrics.csv").read()
            info = json.load(open(f"{tmp}/run/config.json"))
        except OSError:
            return rc, log.getvalue() + err.getvalue(), None, None, None
    rows = np.array([[float(x) for x in line.split(",")] for line in text.splitlines()[1:]])
    return rc, log.getvalue() + err.getvalue(), rows, text.splitlines()[0], [info["num_devices"], info["split"]]


def check_cli(part):
    """The CLI on 2 devices equals ``--devices 1`` in metrics.csv. ``part``: ``default`` (``--split
    envs``, then a 2-member x 2-seed sweep with its runs split over the devices) or ``gru``
    (``--split envs`` of a GRU agent: minibatches of whole env sequences). Every option of the
    split step is checked against one device at library level (``split_envs``); here each run
    also reports the devices and split its config.json records, so a split that silently ran
    on one device fails."""
    tiny = [
        "train",
        "--env",
        "CartPole-v1",
        "--num-envs",
        "8",
        "--num-steps",
        "16",
        "--total-timesteps",
        str(8 * 16 * 3),
        "--update-epochs",
        "2",
        "--num-minibatches",
        "2",
    ]
    extra = {"default": [], "gru": ["--network", "gru", "--gru-size", "16"]}[part]
    rc1, log1, one, _, _ = _cli_metrics(tiny + extra + ["--devices", "1"])
    rc2, log2, two, _, used = _cli_metrics(tiny + extra + ["--devices", "2", "--split", "envs"])
    out = dict(
        rc=[rc1, rc2],
        diff=max_rel_diff(two, one) if one is not None and two is not None else None,
        used=used,
        log=(log1 + log2)[-2000:] if rc1 or rc2 else None,
    )
    if part == "default":
        sweep = tiny + ["--sweep", "lr=1e-3,3e-3", "--seeds", "2"]
        rc1, log1, one, h1, _ = _cli_metrics(sweep + ["--devices", "1"])
        rc2, log2, two, h2, used = _cli_metrics(sweep + ["--devices", "2"])
        out.update(
            sweep_rc=[rc1, rc2],
            sweep_same_header=h1 == h2,
            sweep_used=used,
            sweep_rows=None if one is None else int(one.shape[0]),
            sweep_diff=max_rel_diff(two, one) if one is not None and two is not None else None,
            sweep_log=(log1 + log2)[-2000:] if rc1 or rc2 else None,
        )
    return out


if __name__ == "__main__":
    import os

    if os.environ.get("PUREJAXPPO_CACHE_DIR"):  # the test session's compilation cache (tests/conftest.py)
        from purejaxppo.run.compile_cache import enable

        enable(os.environ["PUREJAXPPO_CACHE_DIR"])
    check, _, part = sys.argv[1].partition(":")
    assert len(jax.devices()) >= 4, f"expected 4 forced host devices, got {jax.devices()}"
    checks = {
        "runs": check_runs,
        "pbt": check_pbt,
        "errors": check_errors,
        "split_envs": check_split_envs,
        "cli": check_cli,
    }
    result = checks[check](part) if part else checks[check]()
    print("RESULT " + json.dumps(result))
