"""Running statistics against NumPy; no act/train mismatch under normalisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.envs import episode_statistics, make_vec_env
from purejaxppo.normalize import apply_stats, init_stats, normalize_observation, scale_reward, update_stats
from purejaxppo.rollout import collect


@pytest.mark.parametrize("sizes", [[1] * 50, [3, 1, 7, 2, 64, 5], [1000]])
def test_running_stats_equal_numpy_over_the_stream(sizes):
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)).astype(np.float32) * np.array([1, 10, 0.1, 1], np.float32)
               for n in sizes]
    stats = init_stats((4,))
    update = jax.jit(update_stats)
    for b in batches:
        stats = update(stats, jnp.asarray(b))
    stream = np.concatenate(batches).astype(np.float64)
    assert float(stats.count) == len(stream)
    np.testing.assert_allclose(stats.mean, stream.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.var, stream.var(0), rtol=1e-4)


def test_apply_stats_formula_and_clip():
    stats = init_stats((2,))._replace(mean=jnp.array([1.0, -1.0]), var=jnp.array([4.0, 0.25]))
    x = jnp.array([[3.0, -1.5], [1.0, 100.0]])
    out = np.asarray(apply_stats(stats, x, clip=5.0))
    np.testing.assert_allclose(out, [[1.0, -1.0], [0.0, 5.0]], rtol=1e-6)


def test_observation_wrapper_statistics_follow_raw_stream():
    raw = episode_statistics(make_vec_env("CartPole-v1", 4))
    norm = normalize_observation(raw)
    key = jax.random.PRNGKey(0)
    obs_n, st_n = norm.reset(key)
    obs_r, st_r = raw.reset(key)
    seen, normed = [np.asarray(obs_r)], [np.asarray(obs_n)]
    a = jnp.array([0, 1, 1, 0])
    for i in range(30):
        k = jax.random.PRNGKey(i + 1)
        obs_n, st_n, *_, info_n = norm.step(k, st_n, a)
        obs_r, st_r, *_, info_r = raw.step(k, st_r, a)
        seen.append(np.asarray(obs_r)); normed.append(np.asarray(obs_n))
        stream = np.concatenate(seen).astype(np.float64)
        ref = (np.asarray(obs_r) - stream.mean(0)) / np.sqrt(stream.var(0) + 1e-8)
        np.testing.assert_allclose(obs_n, np.clip(ref, -10, 10), rtol=1e-3, atol=1e-3)
        ref_final = (np.asarray(info_r["final_observation"]) - stream.mean(0)) / np.sqrt(stream.var(0) + 1e-8)
        np.testing.assert_allclose(info_n["final_observation"], np.clip(ref_final, -10, 10), rtol=1e-3, atol=1e-3)


def test_frozen_statistics_do_not_move():
    norm = normalize_observation(make_vec_env("CartPole-v1", 2), frozen=True)
    obs, st = norm.reset(jax.random.PRNGKey(0))
    obs2, st2, *_ = norm.step(jax.random.PRNGKey(1), st, jnp.array([0, 1]))
    assert float(st2.obs_stats.count) == 0.0
    np.testing.assert_array_equal(st2.obs_stats.mean, 0.0)


def test_reward_scale_uses_std_of_discounted_return_reset_at_episode_end():
    gamma = 0.9
    venv = episode_statistics(make_vec_env("CartPole-v1", 3, max_episode_steps=7))
    scaled = scale_reward(venv, gamma)
    key = jax.random.PRNGKey(0)
    _, st = scaled.reset(key)
    ret, history = np.zeros(3), []
    for i in range(20):
        _, st, r, term, trunc, _ = scaled.step(jax.random.PRNGKey(i), st, jnp.array([0, 1, 0]))
        ret = ret * gamma + 1.0  # CartPole pays 1 per step
        history.append(ret.copy())
        std = np.concatenate(history).std()
        np.testing.assert_allclose(r, np.clip(1.0 / np.sqrt(std ** 2 + 1e-8), -10, 10), rtol=1e-4)
        ret = np.where(np.asarray(term | trunc), 0.0, ret)


@pytest.mark.parametrize("kw", [dict(normalize_obs=True), dict(normalize_obs=True, normalize_reward=True)])
def test_no_act_train_mismatch_first_minibatch_ratio_is_one(kw):
    # one epoch, one minibatch: the loss's log-probs, recomputed from the STORED observations,
    # must equal the behaviour log-probs computed when acting -> approx KL exactly ~0, no clipping
    cfg = PPOConfig(num_envs=4, num_steps=64, total_timesteps=256, update_epochs=1, num_minibatches=1, **kw)
    ppo = make_ppo(cfg)
    state = ppo.init(jax.random.PRNGKey(0), cfg)
    state, _ = jax.jit(ppo.step)(state, cfg)  # statistics have moved during this rollout
    _, m = jax.jit(ppo.step)(state, cfg)
    assert abs(float(m["approx_kl"])) < 1e-7 and float(m["clip_frac"]) == 0.0


def test_acted_on_observation_is_the_stored_one():
    venv = normalize_observation(episode_statistics(make_vec_env("CartPole-v1", 4)))
    obs, st = venv.reset(jax.random.PRNGKey(0))
    # a policy whose "log-prob" is a fingerprint of the observation it was given
    policy = lambda k, o: (jnp.zeros(o.shape[:1], jnp.int32), jnp.sum(o * jnp.array([1.0, 3.0, 5.0, 7.0]), -1))
    _, tr = collect(jax.random.PRNGKey(1), policy, venv.step, st, obs, 50)
    np.testing.assert_allclose(tr.log_prob, np.sum(np.asarray(tr.obs) * [1, 3, 5, 7], -1), rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(tr.obs)).max() <= 10.0 and np.std(np.asarray(tr.obs)) > 0.3  # normalised scale
