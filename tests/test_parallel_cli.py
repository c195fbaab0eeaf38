"""The CLI on two devices: ``--split envs`` and a sweep sharded over devices write the
metrics.csv of ``--devices 1``. Each part runs in its own subprocess with 4 forced host
devices (``tests/_multidevice.py``)."""

import pytest

from _multidevice import run_worker

VARIANTS = ("default", "critic_lr_unsafe_rbg_normalize_obs", "gru")


@pytest.mark.parametrize("name", VARIANTS)
def test_cli_split_envs_equals_one_device(name):
    r = run_worker(f"cli:{name}")
    assert r["rc"] == [0, 0], (name, r.get("log"))
    assert r["diff"] < 1e-3, (name, r)
    if name != "default":  # the variant's options change the numbers (else equality proves little)
        assert r["options_change_metrics"] > 1e-3, r


def test_cli_sweep_on_two_devices_equals_one_device():
    r = run_worker("cli:sweep")
    assert r["sweep_rc"] == [0, 0], r.get("sweep_log")
    assert r["sweep_same_header"] and r["sweep_rows"] == 2 * 2 * 3  # members x seeds x updates
    assert r["sweep_diff"] < 1e-5, r
