"""Multi-device PPO on CPU: runs (seeds, sweep members, PBT members) sharded over devices, and
the clear errors of every multi-device path. Each check runs in a subprocess with 4 forced host
devices (``tests/_multidevice.py``) and is asserted against the single-device reference."""

import pytest

from _multidevice import run_worker


@pytest.mark.slow
def test_runs_sharded_over_devices_equal_one_device():
    r = run_worker("runs")
    assert r["finite"]
    assert r["out_devices"] == 2, "outputs should stay sharded over the devices"
    # tolerance: the same per-run program on each device, but the vmap batch differs (4 vs 8 runs):
    # two programs; the worker's max |a-b|/(1+|b|) over 3 updates
    assert r["runs_vs_ref"] < 1e-5, r
    assert r["members_differ"] > 1e-3, "members with different lr should differ (else the test proves nothing)"


@pytest.mark.slow
def test_pbt_members_on_two_devices_equal_one_device():
    """The exploit over an all_gather: same lineage, same numbers."""
    r = run_worker("pbt")
    assert r["pbt_copies"] > 0 and r["pbt_same_parents"], r  # exact: integer lineage
    assert r["pbt_params"] < 1e-5 and r["pbt_metrics"] < 1e-4 and r["pbt_out_devices"] == 2, (
        r
    )  # tolerance: 1 vs 2 devices


def test_clear_errors():
    r = run_worker("errors")
    assert "num_envs=6 cannot be split over 4 devices" in r["uneven_envs"]
    assert "cannot be split over 2 devices" in r["uneven_minibatch"] and "env sequences" in r["uneven_minibatch"]
    assert "xla_force_host_platform_device_count=8" in r["too_many_devices"]
    assert "3 runs cannot be split evenly over 4 devices" in r["uneven_runs"]
    # PBT lays its members out with the same function (sharding.place_runs), in its own words
    assert (
        "3 members cannot be split evenly over 4 devices; use a multiple of 4 members (e.g. 4) or a "
        "device count dividing 3" in r["uneven_members"]
    ), r["uneven_members"]


def test_stack_configs_rejects_structural_differences():
    from purejaxppo import PPOConfig
    from purejaxppo.config import ConfigError
    from purejaxppo.parallel.sharding import stack_configs

    stacked = stack_configs([PPOConfig(lr=1e-3), PPOConfig(lr=2e-3)])
    assert stacked.lr.shape == (2,) and float(stacked.lr[1]) == pytest.approx(2e-3)
    with pytest.raises(ConfigError, match="num_envs"):
        stack_configs([PPOConfig(), PPOConfig(num_envs=8)])
