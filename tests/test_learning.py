"""Short learning checks (the long ones live in experiments/)."""

import jax
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.run.run_folder import final_returns

pytestmark = pytest.mark.optimised  # run-bound: compiled as users compile (tests/conftest.py)


def _train(cfg, seeds, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    _, m = jax.jit(jax.vmap(make_ppo(cfg).train))(keys)
    return np.asarray(m["episode_return"])


@pytest.mark.slow
def test_cartpole_default_config_solves():
    ret = _train(PPOConfig(env_name="CartPole-v1", total_timesteps=500_000), seeds=4)
    final = final_returns(ret)
    assert final.mean() >= 450, final
    assert np.nanmean(ret[:, :5]) < 60  # it started from a random policy


@pytest.mark.slow
def test_pendulum_improves_clearly_over_random():
    cfg = PPOConfig(
        env_name="Pendulum-v1",
        gamma=0.9,
        ent_coef=0.0,
        lr=1e-3,
        update_epochs=10,
        num_envs=8,
        num_steps=256,
        num_minibatches=32,
        total_timesteps=200_000,
    )
    ret = _train(cfg, seeds=2)
    first, final = np.nanmean(ret[:, :3]), final_returns(ret, 0.1)
    assert first < -1000  # random Gaussian policy on Pendulum: about -1200
    assert final.mean() > -800, final
