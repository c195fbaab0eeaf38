"""Running statistics against NumPy; no act/train mismatch under normalisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.envs import episode_statistics, make_vec_env
from purejaxppo.stages.normalize import (
    apply_stats,
    init_reward_scale,
    init_stats,
    normalize_observation,
    scale_rewards,
    update_stats,
)
from purejaxppo.stages.rollout import collect, stateless


@pytest.mark.parametrize("sizes", [[1] * 50, [3, 1, 7, 2, 64, 5], [1000]])
def test_running_stats_equal_numpy_over_the_stream(sizes):
    rng = np.random.default_rng(0)
    batches = [
        rng.normal(3.0, 2.0, size=(n, 4)).astype(np.float32) * np.array([1, 10, 0.1, 1], np.float32) for n in sizes
    ]
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
        seen.append(np.asarray(obs_r))
        normed.append(np.asarray(obs_n))
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


def _numpy_reward_scale(reward, done, gamma, clip=10.0, ret=None, history=None):
    """Reference: discounted return per env, reset at episode end; rewards divided by the std
    of ALL returns seen so far (stream over steps and envs); clipped."""
    ret = np.zeros(reward.shape[1]) if ret is None else ret
    history = [] if history is None else history
    out = []
    for r, d in zip(reward.astype(np.float64), done):
        ret = ret * gamma + r
        history.append(ret.copy())
        std = np.concatenate(history).std()
        out.append(np.clip(r / np.sqrt(std**2 + 1e-8), -clip, clip))
        ret = np.where(d, 0.0, ret)
    return np.stack(out), ret, history


def _rewards_and_dones(h=20, e=3, seed=0):
    rng = np.random.default_rng(seed)
    reward = (rng.normal(1.0, 2.0, (h, e)) * np.array([1.0, 5.0, 0.2])).astype(np.float32)
    done = rng.random((h, e)) < 0.2
    assert done.any() and not done.all(axis=0).any()
    return reward, done


def test_reward_scale_uses_std_of_discounted_return_reset_at_episode_end():
    reward, done = _rewards_and_dones()
    gammas = np.array([0.9, 0.5], np.float32)
    # the discount is traced: one vmapped call scales each member with its own gamma
    scale = jax.jit(jax.vmap(lambda g: scale_rewards(init_reward_scale(3), jnp.asarray(reward), jnp.asarray(done), g)))
    states, scaled = scale(jnp.asarray(gammas))
    for i, g in enumerate(gammas):
        want, ret, history = _numpy_reward_scale(reward, done, float(g))
        np.testing.assert_allclose(scaled[i], want, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(states.discounted_return[i], ret, rtol=1e-5, atol=1e-6)
        assert float(states.return_stats.count[i]) == reward.size
        np.testing.assert_allclose(states.return_stats.var[i], np.concatenate(history).var(), rtol=1e-4)
    assert not np.allclose(scaled[0], scaled[1])  # gamma matters
    # without resetting the return at episode ends the numbers differ (the test has teeth)
    no_reset, _, _ = _numpy_reward_scale(reward, np.zeros_like(done), 0.9)
    assert not np.allclose(scaled[0], no_reset, rtol=1e-3)


def test_reward_scale_state_carries_over_rollouts_clip_and_frozen():
    reward, done = _rewards_and_dones(h=24)
    gamma = 0.95
    # two rollouts of 12 steps, the state carried over, equal one of 24 (and the reference)
    s, a = scale_rewards(init_reward_scale(3), jnp.asarray(reward[:12]), jnp.asarray(done[:12]), gamma, clip=1.5)
    s, b = scale_rewards(s, jnp.asarray(reward[12:]), jnp.asarray(done[12:]), gamma, clip=1.5)
    want, ret, _ = _numpy_reward_scale(reward, done, gamma, clip=1.5)
    np.testing.assert_allclose(np.concatenate([a, b]), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(s.discounted_return, ret, rtol=1e-5, atol=1e-6)
    assert np.any(np.abs(want) == 1.5)  # the clip was exercised
    # frozen: the statistics stay; rewards are divided by their fixed std
    f, c = scale_rewards(s, jnp.asarray(reward[:5]), jnp.asarray(done[:5]), gamma, frozen=True)
    assert float(f.return_stats.count) == float(s.return_stats.count)
    np.testing.assert_allclose(c, np.clip(reward[:5] / np.sqrt(float(s.return_stats.var) + 1e-8), -10, 10), rtol=1e-5)


def test_update_stats_with_axis_name_merges_the_global_batch():
    rng = np.random.default_rng(1)
    prior = rng.normal(-1.0, 3.0, (5, 3)).astype(np.float32)
    batch = (rng.normal(2.0, 1.0, (8, 3)) * np.array([1.0, 4.0, 0.5])).astype(np.float32)
    batch[4:] += 3.0  # the two shares have different moments: a per-share merge would be wrong
    stats = update_stats(init_stats((3,)), jnp.asarray(prior))
    shares = jnp.asarray(batch.reshape(2, 4, 3))
    merged = jax.vmap(lambda b: update_stats(stats, b, axis_name="d"), axis_name="d")(shares)
    whole = update_stats(stats, jnp.asarray(batch))
    stream = np.concatenate([prior, batch]).astype(np.float64)
    for field in ("count", "mean", "var"):
        got = np.asarray(getattr(merged, field))
        np.testing.assert_allclose(got[0], got[1])  # identical on every member of the axis
        np.testing.assert_allclose(got[0], getattr(whole, field), rtol=1e-5, atol=1e-6, err_msg=field)
    assert float(merged.count[0]) == len(stream)
    np.testing.assert_allclose(merged.mean[0], stream.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(merged.var[0], stream.var(0), rtol=1e-4)
    local = update_stats(stats, shares[0])  # what merging only this share would give
    assert not np.allclose(local.mean, merged.mean[0], atol=1e-2)


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
    _, tr = collect(jax.random.PRNGKey(1), stateless(policy), venv.step, st, obs, 50)
    np.testing.assert_allclose(tr.log_prob, np.sum(np.asarray(tr.obs) * [1, 3, 5, 7], -1), rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(tr.obs)).max() <= 10.0 and np.std(np.asarray(tr.obs)) > 0.3  # normalised scale


def _structured_masked_venv(num_envs):
    """A toy env observing ``MaskedObs({"x": [3] floats, "t": raw step counter}, mask)``."""
    from purejaxppo.envs.core import EnvSpec, auto_reset_vec_env, discrete_action_fields
    from purejaxppo.envs.observation import MaskedObs

    def obs_of(s, t):
        return MaskedObs(
            {"x": jnp.stack([s, 5.0 * s - 2.0, jnp.sin(3.0 * s)]), "t": t.astype(jnp.float32) * 50.0},
            jnp.array([True, s > 0.5, False]),
        )

    def reset1(key):
        s = jax.random.uniform(key)
        return obs_of(s, jnp.zeros((), jnp.int32)), (s, jnp.zeros((), jnp.int32))

    def step1(key, st, a):
        s, t = st
        s2 = (s + 0.37 * a + jax.random.uniform(key) * 0.1) % 1.0
        return obs_of(s2, t + 1), (s2, t + 1), s2, t + 1 >= 7, jnp.asarray(False)

    structure = {"x": jax.ShapeDtypeStruct((3,), jnp.float32), "t": jax.ShapeDtypeStruct((), jnp.float32)}
    spec = EnvSpec(
        "toy-structured",
        (4,),
        max_episode_steps=7,
        obs_structure=structure,
        action_mask=True,
        **discrete_action_fields(3),
    )
    return auto_reset_vec_env(spec, num_envs, reset1, step1)


def test_structured_masked_observations_are_normalised_per_leaf_and_the_mask_kept():
    """Each leaf of a structured observation has its own running statistics (NumPy over the raw
    stream, leaf by leaf); the action mask passes unchanged; and the run trains on it."""
    raw = episode_statistics(_structured_masked_venv(4))
    norm = normalize_observation(raw)
    obs_n, st_n = jax.jit(norm.reset)(jax.random.PRNGKey(0))
    obs_r, st_r = jax.jit(raw.reset)(jax.random.PRNGKey(0))
    seen = {"x": [np.asarray(obs_r.obs["x"])], "t": [np.asarray(obs_r.obs["t"])]}
    step_n, step_r = jax.jit(norm.step), jax.jit(raw.step)
    a = jnp.array([0, 1, 0, 1])
    for i in range(12):
        k = jax.random.PRNGKey(i + 1)
        obs_n, st_n, *_, info_n = step_n(k, st_n, a)
        obs_r, st_r, *_, info_r = step_r(k, st_r, a)
        for leaf in ("x", "t"):
            seen[leaf].append(np.asarray(obs_r.obs[leaf]))
            stream = np.concatenate(seen[leaf]).astype(np.float64)
            for got, src in ((obs_n, obs_r), (info_n["final_observation"], info_r["final_observation"])):
                ref = (np.asarray(src.obs[leaf]) - stream.mean(0)) / np.sqrt(stream.var(0) + 1e-8)
                np.testing.assert_allclose(got.obs[leaf], np.clip(ref, -10, 10), rtol=1e-3, atol=1e-3, err_msg=leaf)
        np.testing.assert_array_equal(obs_n.action_mask, obs_r.action_mask)
        assert obs_n.action_mask.dtype == jnp.bool_
    # the raw counter reaches 300 and the x leaf stays near 1: one shared scale could not fit both
    assert float(np.max(np.concatenate(seen["t"]))) >= 300 and float(np.max(np.abs(obs_n.obs["t"]))) < 3
    cfg = PPOConfig(
        env_name="toy-structured",
        num_envs=4,
        num_steps=8,
        total_timesteps=4 * 8 * 2,
        update_epochs=1,
        num_minibatches=1,
        hidden_sizes=(8,),
        normalize_obs=True,
    )
    ppo = make_ppo(cfg, venv=norm)
    runner, metrics = jax.jit(ppo.run)(ppo.init(jax.random.PRNGKey(0)))
    assert all(np.isfinite(np.asarray(v)).all() for k, v in metrics.items() if not k.startswith("episode_"))
    assert float(runner.env_state.obs_stats["t"].count) == 4 * (1 + 8 * 2)
