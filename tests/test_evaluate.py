"""Evaluation under jit: known returns, mode vs sampling, obs statistics, GIF, plots."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.distributions import CATEGORICAL
from purejaxppo.evaluate import episode_states, find_obs_stats, make_evaluator, save_gif, summarize
from purejaxppo.networks import Network


def _constant_policy(logits):
    """A network whose actor ignores the observation and returns fixed logits."""
    logits = jnp.asarray(logits, jnp.float32)
    actor = lambda params, obs: jnp.broadcast_to(logits + 0 * params["b"], obs.shape[:-1] + logits.shape)
    critic = lambda params, obs: jnp.zeros(obs.shape[:-1])
    return Network(lambda k: {"b": jnp.zeros(())}, actor, critic, lambda p, o: (actor(p, o), critic(p, o)), CATEGORICAL)


def test_mountain_car_returns_are_minus_the_time_limit():
    # -1 per step and always pushing right cannot reach the goal in 50 steps: return is exactly -50
    cfg = PPOConfig(env_name="MountainCar-v0", max_episode_steps=50)
    net = _constant_policy([-5.0, -5.0, 5.0])
    ret, length = make_evaluator(cfg, net, num_episodes=7)(jax.random.PRNGKey(0), {"b": jnp.zeros((2,))})
    np.testing.assert_array_equal(ret, -50.0)
    np.testing.assert_array_equal(length, 50)
    assert ret.shape == (2, 7)


def test_mode_policy_is_deterministic_and_sampling_is_not():
    cfg = PPOConfig(env_name="CartPole-v1")
    params = {"b": jnp.zeros((1,))}
    flat, left = _constant_policy([0.0, 0.0]), _constant_policy([3.0, -3.0])
    key = jax.random.PRNGKey(1)
    det_flat, _ = make_evaluator(cfg, flat, 64)(key, params)
    det_left, _ = make_evaluator(cfg, left, 64)(key, params)
    np.testing.assert_array_equal(det_flat, det_left)  # mode of both is action 0 (argmax)
    assert det_left.max() <= 12  # always pushing left, the pole falls within a few steps
    sto, _ = make_evaluator(cfg, flat, 64, deterministic=False)(key, params)
    assert np.mean(sto) > np.mean(det_flat) + 5  # a random policy balances longer (~22 steps)


def test_find_obs_stats_and_summary():
    from purejaxppo.normalize import ObsNormState, init_stats

    stats = init_stats((3,))
    state = ObsNormState(("inner", 1), stats)
    assert find_obs_stats(state) is stats and find_obs_stats(("a", (1, 2))) is None
    s = summarize(np.array([[1.0, 3.0], [np.nan, 5.0]]))
    assert (s["episodes"], s["mean"], s["min"], s["max"]) == (3, 3.0, 1.0, 5.0)
    assert s["per_seed_mean"] == [2.0, 5.0]


def test_gif_has_one_frame_per_step(tmp_path):
    cfg = PPOConfig(env_name="CartPole-v1")
    net = _constant_policy([3.0, -3.0])
    key = jax.random.PRNGKey(0)
    _, _, seq, cum = episode_states(cfg, net, {"b": jnp.zeros(())}, key)
    assert len(seq) == len(cum) and cum == list(range(1, len(seq) + 1))  # CartPole: +1 per step
    out = str(tmp_path / "ep.gif")
    assert save_gif(out, cfg, net, {"b": jnp.zeros(())}, key) == len(seq)
    with open(out, "rb") as f:
        assert f.read(4) == b"GIF8"


def test_plot_draws_mean_and_band(tmp_path):
    from purejaxppo.plot import _ffill, load_curves, plot_runs

    run = tmp_path / "run"
    run.mkdir()
    rows = ["seed,update,env_steps,episode_return"]
    for s in range(2):
        for u in range(4):
            rows.append(f"{s},{u},{(u + 1) * 10},{'nan' if u == 1 else s * 10 + u}")
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    (c,) = load_curves(str(run))
    np.testing.assert_array_equal(c["env_steps"], [10, 20, 30, 40])
    np.testing.assert_array_equal(_ffill(c["values"]), [[0, 0, 2, 3], [10, 10, 12, 13]])
    out = plot_runs([str(run)], str(tmp_path / "c.png"))
    assert os.path.getsize(out) > 1000
    with pytest.raises(KeyError, match="no metric 'nope'"):
        load_curves(str(run), "nope")
