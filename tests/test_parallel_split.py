"""One agent's envs split over devices (data-parallel PPO: the same step with an axis name)
equals the single-device program, with every option that changes the step. Each part runs in
its own subprocess with 4 forced host devices (``tests/_multidevice.py``), so the parts can run
in parallel test workers."""

import pytest

from _multidevice import run_worker

OPTIONS = ("default", "critic_lr_target_kl_batch_adv", "unsafe_rbg_normalize_obs_reward", "gru_pendulum_norm")


@pytest.mark.parametrize("name", OPTIONS)
def test_split_envs_equals_one_device(name):
    r = run_worker(f"split_envs:{name}")
    assert r[f"{name}_metrics"] < 1e-4, (name, r)
    assert r[f"{name}_params"] < 1e-5, (name, r)
    assert r[f"{name}_obs"] < 1e-5, (name, r)  # the env rollout is the single-device one
    if "target_kl" in name:
        assert r["target_kl_min_taken"] < 4, "target KL must stop some update early (else it is not exercised)"


def test_split_envs_chunked_vmapped_and_sensitive_to_the_key():
    r = run_worker("split_envs:rest")
    assert r["chunked_params"] < 1e-5 and r["vmapped_seeds_params"] < 1e-5, r
    assert r["env_state_sharded_over"] == 2
    assert r["other_key_params"] > 1e-3, "a different key must change the result (sensitivity)"
