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


def test_runs_sharded_over_devices_equal_one_device():
    r = run_worker("runs")
    assert r["finite"]
    assert r["out_devices"] == 2, "outputs should stay sharded over the devices"
    # same per-run programs on each device: equal to float tolerance (vmap batch size differs)
    assert r["runs_vs_ref"] < 1e-5, r
    assert r["members_differ"] > 1e-3, "members with different lr should differ (else the test proves nothing)"
    # PBT: members on 2 devices, the exploit over an all_gather: same lineage, same numbers
    assert r["pbt_copies"] > 0 and r["pbt_same_parents"], r
    assert r["pbt_params"] < 1e-5 and r["pbt_metrics"] < 1e-4 and r["pbt_out_devices"] == 2, r


def test_split_envs_equals_one_device_with_every_option():
    r = run_worker("split_envs")
    for name in ("default", "critic_lr_target_kl_batch_adv", "unsafe_rbg_normalize_obs_reward", "gru_pendulum_norm"):
        assert r[f"{name}_metrics"] < 1e-4, (name, r)
        assert r[f"{name}_params"] < 1e-5, (name, r)
        assert r[f"{name}_obs"] < 1e-5, (name, r)  # the env rollout is the single-device one
    assert r["target_kl_min_taken"] < 4, "target KL must stop some update early (else it is not exercised)"
    assert r["chunked_params"] < 1e-5 and r["vmapped_seeds_params"] < 1e-5, r
    assert r["env_state_sharded_over"] == 2
    assert r["other_key_params"] > 1e-3, "a different key must change the result (sensitivity)"


def test_clear_errors():
    r = run_worker("errors")
    assert "num_envs=6 cannot be split over 4 devices" in r["uneven_envs"]
    assert "cannot be split over 2 devices" in r["uneven_minibatch"] and "env sequences" in r["uneven_minibatch"]
    assert "xla_force_host_platform_device_count=8" in r["too_many_devices"]
    assert "3 runs cannot be split evenly over 4 devices" in r["uneven_runs"]


def test_cli_split_envs_and_sweep_on_two_devices_equal_one_device():
    r = run_worker("cli")
    for name in ("default", "critic_lr_unsafe_rbg_normalize_obs", "gru"):
        assert r[f"{name}_rc"] == [0, 0], (name, r.get(f"{name}_log"))
        assert r[f"{name}_diff"] < 1e-3, (name, r)
    assert r["options_change_metrics"] > 1e-3, "the options must change the numbers (sensitivity)"
    assert r["sweep_rc"] == [0, 0], r.get("sweep_log")
    assert r["sweep_same_header"] and r["sweep_rows"] == 2 * 2 * 3  # members x seeds x updates
    assert r["sweep_diff"] < 1e-5, r


def test_stack_configs_rejects_structural_differences():
    from purejaxppo import PPOConfig
    from purejaxppo.config import ConfigError
    from purejaxppo.parallel import stack_configs

    stacked = stack_configs([PPOConfig(lr=1e-3), PPOConfig(lr=2e-3)])
    assert stacked.lr.shape == (2,) and float(stacked.lr[1]) == pytest.approx(2e-3)
    with pytest.raises(ConfigError, match="num_envs"):
        stack_configs([PPOConfig(), PPOConfig(num_envs=8)])
