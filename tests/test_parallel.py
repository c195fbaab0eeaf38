"""Multi-device PPO on CPU: population sharding and data-parallel training.

JAX reads ``XLA_FLAGS`` once, when it initialises, so the checks run in a subprocess
(``tests/_parallel_worker.py``) started with 4 forced host devices; the main pytest
process is unaffected. Each check prints measured differences that are asserted here
against the single-device reference (``jax.jit(jax.vmap(train))`` / ``make_ppo``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "_parallel_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_worker(check: str) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run([sys.executable, WORKER, check], env=env, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"worker {check} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_population_sharded_equals_unsharded():
    r = run_worker("population")
    assert r["finite"]
    assert r["out_devices"] == 2, "outputs should stay sharded over the devices"
    # same per-run programs on each device: equal to float tolerance (vmap batch size differs)
    assert r["pop_vs_ref"] < 1e-5, r
    assert r["shardmap_vs_ref"] < 1e-5, r
    assert r["members_differ"] > 1e-3, "members with different lr should differ (else the test proves nothing)"


def test_data_parallel_equals_single_device():
    r = run_worker("data_parallel")
    for k, v in r.items():
        if k.endswith(("_params", "_metrics")) and k != "other_key_params":
            assert v < 1e-5, (k, r)
        if k.endswith("_obs"):
            assert v == 0.0, (k, r)  # the env rollout is exactly the single-device one
    assert r["env_state_sharded_over"] == 2
    assert r["other_key_params"] > 1e-3, "a different key must change the result (sensitivity)"


def test_clear_errors():
    r = run_worker("errors")
    assert "num_envs=6 cannot be split over 4 devices" in r["uneven_envs"]
    assert "xla_force_host_platform_device_count=8" in r["too_many_devices"]
    assert "3 runs cannot be split evenly over 4 devices" in r["uneven_runs"]


def test_cli_sweep_on_two_devices_equals_one_device():
    r = run_worker("sweep_cli")
    assert r["rc_d1"] == 0 and r["rc_d2"] == 0, r
    assert r["parallel_calls"] == [2], "only the --devices 2 sweep should shard (population_parallel_train)"
    assert "on 2 device(s)" in r["log_d2"] and "on 1 device(s)" in r["log_d1"]
    assert r["same_header"] and r["rows"] == 2 * 2 * 3  # members x seeds x updates
    assert r["metrics_diff"] < 1e-5, r
    assert r["same_table"], r
    assert r["members_differ"] > 1e-3, "members with different lr should differ (else the test proves nothing)"


def test_stack_configs_rejects_structural_differences():
    from purejaxppo import PPOConfig
    from purejaxppo.config import ConfigError
    from purejaxppo.parallel import stack_configs

    stacked = stack_configs([PPOConfig(lr=1e-3), PPOConfig(lr=2e-3)])
    assert stacked.lr.shape == (2,) and float(stacked.lr[1]) == pytest.approx(2e-3)
    with pytest.raises(ConfigError, match="num_envs"):
        stack_configs([PPOConfig(), PPOConfig(num_envs=8)])
