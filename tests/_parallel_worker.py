"""Helper for tests/test_parallel.py: runs in a subprocess with 4 forced host CPU devices.

``XLA_FLAGS`` must be set before JAX initialises, so the main pytest process cannot
get several CPU devices; this script is launched with the flag and prints ONE JSON line
of measured differences, which the test asserts on.

Usage: XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/_parallel_worker.py CHECK
with CHECK in {population, data_parallel, errors, sweep_cli}.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.parallel import (make_data_parallel_ppo, population_keys_configs, population_parallel_train,
                                 seed_parallel_train)


def max_rel_diff(a, b) -> float:
    """Largest |a-b| / (1 + |b|) over all leaves (NaNs must coincide)."""
    worst = 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return float("inf")
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        d = np.abs(np.nan_to_num(x) - np.nan_to_num(y)) / (1.0 + np.abs(np.nan_to_num(y)))
        worst = max(worst, float(d.max(initial=0.0)))
    return worst


SMALL = dict(env_name="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=4, update_epochs=2)


def check_population():
    base = PPOConfig(total_timesteps=8 * 16 * 3, **SMALL)
    members = [base.replace(lr=lr, clip_eps=c) for lr, c in ((1e-3, 0.2), (3e-4, 0.1))]
    keys, configs = population_keys_configs(members, num_seeds=4, seed=1)  # 8 runs
    train = make_ppo(base).train
    ref = jax.jit(jax.vmap(train))(keys, configs)
    # 2 devices: on this 2-core CI host shard_map(vmap(train)) over 4 forced host devices
    # hangs in XLA:CPU (seen with the original seed_parallel_train too); 2 is enough to
    # show that sharding does not change the numbers
    pop = population_parallel_train(train, 2)(keys, configs)
    seeds = seed_parallel_train(train, 2)(keys, configs)
    out_devices = len(jax.tree.leaves(pop)[0].sharding.device_set)
    # sensitivity: two members with different lr really differ (the comparison can fail)
    members_differ = max_rel_diff(ref[0].train.params, jax.tree.map(lambda x: x[::-1], ref[0].train.params))
    return {"pop_vs_ref": max_rel_diff(pop, ref), "shardmap_vs_ref": max_rel_diff(seeds, ref),
            "out_devices": out_devices, "members_differ": members_differ,
            "finite": bool(np.all(np.isfinite(np.asarray(ref[1]["actor_loss"]))))}


def check_data_parallel():
    out = {}
    key = jax.random.PRNGKey(3)
    for adv_norm, devices in (("minibatch", (2, 4)), ("batch", (2,))):
        cfg = PPOConfig(total_timesteps=8 * 16 * 3, adv_norm=adv_norm, **SMALL)
        ref = jax.jit(make_ppo(cfg).train)(key)
        for d in devices:
            dp_train = jax.jit(make_data_parallel_ppo(cfg, d).train)
            got = dp_train(key)
            out[f"{adv_norm}_d{d}_params"] = max_rel_diff(got[0].train.params, ref[0].train.params)
            out[f"{adv_norm}_d{d}_metrics"] = max_rel_diff(got[1], ref[1])
            out[f"{adv_norm}_d{d}_obs"] = max_rel_diff(got[0].obs, ref[0].obs)
        if adv_norm == "minibatch":
            # sensitivity: a different key gives different params (so the equality can fail)
            other = dp_train(jax.random.PRNGKey(4))
            out["other_key_params"] = max_rel_diff(other[0].train.params, ref[0].train.params)
            # init then run in chunks (the driver's way) equals train
            dp = make_data_parallel_ppo(cfg, 2)
            runner = jax.jit(dp.init)(key)
            chunk = jax.jit(lambda r: dp.run(r, cfg, 1))
            for _ in range(3):
                runner, _ = chunk(runner)
            out["chunked_params"] = max_rel_diff(runner.train.params, ref[0].train.params)
            out["env_state_sharded_over"] = len(jax.tree.leaves(runner.env_state)[0].sharding.device_set)
    return out


def check_errors():
    msgs = {}
    cfg = PPOConfig(total_timesteps=8 * 16 * 3, **SMALL)
    for name, fn in {
        "uneven_envs": lambda: make_data_parallel_ppo(cfg.replace(num_envs=6), 4),
        "too_many_devices": lambda: make_data_parallel_ppo(cfg, 8),
        "uneven_runs": lambda: population_parallel_train(make_ppo(cfg).train, 4)(
            *population_keys_configs([cfg], num_seeds=3)),
    }.items():
        try:
            fn()
            msgs[name] = None
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            msgs[name] = f"{type(e).__name__}: {e}"
    return msgs


def check_sweep_cli():
    """``train --sweep`` through the CLI on 2 devices vs 1 device: metrics.csv and results.md."""
    import contextlib
    import io
    import tempfile

    import purejaxppo.parallel as parallel
    from purejaxppo.cli import main

    used = []
    original = parallel.population_parallel_train

    def recording(train, num_devices=None, **kw):
        used.append(num_devices)
        return original(train, num_devices, **kw)

    parallel.population_parallel_train = recording  # cmd_sweep imports it from the module at call time
    tiny = ["train", "--env", "CartPole-v1", "--sweep", "lr=1e-3,3e-3", "--seeds", "2", "--num-envs", "4",
            "--num-steps", "16", "--total-timesteps", str(4 * 16 * 3), "--update-epochs", "2",
            "--num-minibatches", "2"]
    out, files = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("1", "2"):
            run = f"{tmp}/d{d}"
            with contextlib.redirect_stdout(io.StringIO()) as log:
                out[f"rc_d{d}"] = main(tiny + ["--devices", d, "--run-dir", run])
            out[f"log_d{d}"] = log.getvalue()
            files[d] = {name: open(f"{run}/{name}").read() for name in ("metrics.csv", "results.md")}
    parse = lambda text: np.array([[float(x) for x in line.split(",")] for line in text.splitlines()[1:]])
    one, two = parse(files["1"]["metrics.csv"]), parse(files["2"]["metrics.csv"])
    header = files["1"]["metrics.csv"].splitlines()[0]
    loss = header.split(",").index("actor_loss")
    out.update(parallel_calls=used, same_header=header == files["2"]["metrics.csv"].splitlines()[0],
               rows=int(one.shape[0]), metrics_diff=max_rel_diff(two, one),
               same_table=files["1"]["results.md"] == files["2"]["results.md"],
               # sensitivity: the two members (different lr) really train differently
               members_differ=max_rel_diff(one[one[:, 0] == 1, loss], one[one[:, 0] == 0, loss]))
    return out


if __name__ == "__main__":
    check = sys.argv[1]
    assert len(jax.devices()) >= 4, f"expected 4 forced host devices, got {jax.devices()}"
    result = {"population": check_population, "data_parallel": check_data_parallel, "errors": check_errors,
              "sweep_cli": check_sweep_cli}[check]()
    print("RESULT " + json.dumps(result))
