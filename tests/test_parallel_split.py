"""One agent's envs split over devices (data-parallel PPO: the same step with an axis name)
equals the single-device program, with every option that changes the step. The two parts run
in their own subprocesses with 4 forced host devices (``tests/_multidevice.py``), so they can
run in parallel test workers."""

import pytest
from _multidevice import run_worker


@pytest.mark.slow
def test_split_envs_equals_one_device_default_and_critic_lr_target_kl_batch_adv():
    r = run_worker("split_envs:a")
    for name in ("default", "critic_lr_target_kl_batch_adv"):  # tolerance: 1 vs 2 devices (pmean'd gradients)
        assert r[f"{name}_metrics"] < 1e-4, (name, r)
        assert r[f"{name}_params"] < 1e-5, (name, r)
        assert r[f"{name}_obs"] < 1e-5, (name, r)  # the env rollout is the single-device one
    assert r["target_kl_min_taken"] < 4, "target KL must stop some update early (else it is not exercised)"
    assert r["chunked_params"] < 1e-5 and r["vmapped_seeds_params"] < 1e-5, r  # tolerance: chunks / vmap vs one call
    assert r["env_state_sharded_over"] == 2
    assert r["other_key_params"] > 1e-3, "a different key must change the result (sensitivity)"


@pytest.mark.slow
def test_split_envs_equals_one_device_unsafe_rbg_normalisers_and_gru():
    r = run_worker("split_envs:b")
    for name in ("unsafe_rbg_normalize_obs_reward", "gru_pendulum_norm"):  # tolerance: 1 vs 2 devices
        assert r[f"{name}_metrics"] < 1e-4, (name, r)
        assert r[f"{name}_params"] < 1e-5, (name, r)
        assert r[f"{name}_obs"] < 1e-5, (name, r)
