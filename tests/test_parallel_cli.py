"""The CLI on two devices: ``--split envs`` (feed-forward and GRU) and a sweep sharded over
devices write the metrics.csv of ``--devices 1``, and their config.json says they used 2
devices. Each part runs in its own subprocess with 4 forced host devices
(``tests/_multidevice.py``)."""

import pytest
from _multidevice import run_worker


@pytest.mark.slow
def test_cli_split_envs_and_sweep_on_two_devices_equal_one_device():
    r = run_worker("cli:default")
    assert r["rc"] == [0, 0], r["log"]
    assert r["used"] == [2, "envs"] and r["diff"] < 1e-3, r  # tolerance: 1 vs 2 devices, through the CSV
    assert r["sweep_rc"] == [0, 0], r["sweep_log"]
    assert r["sweep_used"] == [2, "seeds"], r
    assert r["sweep_same_header"] and r["sweep_rows"] == 2 * 2 * 3  # members x seeds x updates
    assert r["sweep_diff"] < 1e-5, r  # tolerance: runs sharded over 2 devices vs 1 (vmap batch differs)


@pytest.mark.slow
def test_cli_split_envs_of_a_gru_agent_equals_one_device():
    r = run_worker("cli:gru")
    assert r["rc"] == [0, 0], r["log"]
    assert r["used"] == [2, "envs"] and r["diff"] < 1e-3, r  # tolerance: 1 vs 2 devices, through the CSV
