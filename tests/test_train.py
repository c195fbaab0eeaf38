"""Determinism, vmap over seeds, chunked driver == one train call, swapping pieces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo, make_train, ppo_loss_fn
from purejaxppo.programs.runs import train_chunked

from _equality import assert_close_metrics, assert_close_state

SMALL = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 6, update_epochs=2, num_minibatches=2)


def _metrics(out):
    return {k: np.asarray(v) for k, v in out[1].items()}


@pytest.fixture(scope="module")
def ppo():
    return make_ppo(SMALL)


def test_same_seed_same_numbers(ppo):
    train = jax.jit(ppo.train)
    a, b = _metrics(train(jax.random.PRNGKey(3))), _metrics(train(jax.random.PRNGKey(3)))
    c = _metrics(train(jax.random.PRNGKey(4)))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # exact: one executable, same key twice
    assert not np.array_equal(a["actor_loss"], c["actor_loss"])


def test_vmap_over_seeds_equals_separate_runs(ppo):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    batched = _metrics(jax.jit(jax.vmap(ppo.train))(keys))
    for i in range(3):
        single = _metrics(jax.jit(ppo.train)(keys[i]))
        for k in single:
            # tolerance: vmapped and single are two programs (a few float32 roundings over 6 updates)
            np.testing.assert_allclose(batched[k][i], single[k], rtol=2e-5, atol=1e-6, err_msg=k)


@pytest.mark.slow
@pytest.mark.optimised  # the chunk loop against one call, compiled as users compile (tests/conftest.py)
def test_chunked_driver_equals_single_train_call(ppo):
    keys = jax.random.split(jax.random.PRNGKey(7), 2)
    whole_state, whole = jax.device_get(jax.jit(jax.vmap(ppo.train))(keys))
    res = train_chunked(SMALL, seed=7, num_seeds=2, chunk_updates=2, ppo=ppo)
    # tolerance: one call and 3 chunks of 2 are two programs, which XLA may round differently
    # (tests/_equality.py; the chunked run's own exactness under resume is tests/test_driver.py's)
    assert_close_metrics(res.metrics, whole)
    assert_close_state(whole_state, res.runner_state)  # tolerance: params, opt state, env states, keys, counter


def test_metrics_are_complete_and_sane(ppo):
    m = _metrics(jax.jit(ppo.train)(jax.random.PRNGKey(0)))
    expected = {
        "actor_loss",
        "critic_loss",
        "entropy",
        "approx_kl",
        "clip_frac",
        "explained_variance",
        "grad_norm",
        "lr",
        "episode_return",
        "episode_length",
        "episodes",
        "minibatches_taken",
    }
    assert expected <= set(m)
    assert all(v.shape == (SMALL.num_updates,) for v in m.values())
    # a random CartPole policy finishes episodes of ~20 steps: returns are their lengths
    np.testing.assert_allclose(m["episode_return"], m["episode_length"], rtol=1e-5)  # tolerance: float sums of 1s
    assert np.all(m["episodes"] > 0) and np.all(m["episode_return"] > 5)
    np.testing.assert_allclose(m["lr"], 2.5e-4 * (1 - np.arange(6) / 6), rtol=1e-5)
    np.testing.assert_array_equal(m["minibatches_taken"], 4)
    assert "env_steps" not in m  # counted on the host (test_counters_past_2_31_are_exact_with_x64_off)


def test_episode_return_is_over_completed_episodes_only():
    # 40-step rollouts, 60-step time limit: episodes end at steps 60, 120, 180 (updates 1, 2, 4)
    cfg = PPOConfig(
        env_name="Pendulum-v1",
        num_envs=2,
        num_steps=40,
        total_timesteps=2 * 40 * 5,
        num_minibatches=2,
        update_epochs=1,
        max_episode_steps=60,
    )
    m = _metrics(jax.jit(make_ppo(cfg).train)(jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(m["episodes"], [0, 2, 2, 0, 2])
    np.testing.assert_array_equal(np.isnan(m["episode_return"]), [True, False, False, True, False])
    np.testing.assert_array_equal(m["episode_length"][[1, 2, 4]], 60)
    assert np.all(m["episode_return"][np.isfinite(m["episode_return"])] < 0)


def test_swap_loss_function(ppo):
    calls = []

    def no_entropy_loss(agent, params, mb, cfg):
        calls.append(1)
        assert mb.obs.shape == (SMALL.minibatch_size, 4)  # feed-forward units: single transitions
        return ppo_loss_fn(agent, params, mb, cfg.replace(ent_coef=0.0))

    custom = make_ppo(SMALL, loss_fn=no_entropy_loss)
    a = _metrics(jax.jit(custom.train)(jax.random.PRNGKey(0)))
    b = _metrics(jax.jit(make_train(SMALL.replace(ent_coef=0.0)))(jax.random.PRNGKey(0)))
    assert calls
    # tolerance: a loss with ent_coef=0 passed in vs the config's own ent_coef=0 are two programs
    np.testing.assert_allclose(a["actor_loss"], b["actor_loss"], rtol=1e-5, atol=1e-7)


def test_structural_config_mismatch_is_refused(ppo):
    from purejaxppo import ConfigError

    state = ppo.init(jax.random.PRNGKey(0))
    for bad in (SMALL.replace(num_steps=16), SMALL.replace(normalize_reward=True)):
        for call in (
            lambda: ppo.init(jax.random.PRNGKey(0), bad),
            lambda: ppo.step(state, bad),
            lambda: ppo.train(jax.random.PRNGKey(0), bad),
        ):
            with pytest.raises(ConfigError, match="structural"):
                call()
    jax.eval_shape(ppo.step, state, SMALL.replace(lr=1e-3, gamma=0.9))  # numeric changes are fine


def test_target_kl_stops_after_one_minibatch_step():
    cfg = SMALL.replace(total_timesteps=4 * 32, target_kl=1e-12)
    ppo = make_ppo(cfg)
    state0 = ppo.init(jax.random.PRNGKey(0), cfg)
    state1, m = jax.jit(ppo.step)(state0, cfg)
    assert int(m["minibatches_taken"]) == 1
    # equal to a run with exactly one minibatch step: K=1 epoch, M=2, first minibatch only
    full = make_ppo(cfg.replace(target_kl=None))
    s_full, m_full = jax.jit(full.step)(state0, cfg.replace(target_kl=None))
    assert int(m_full["minibatches_taken"]) == 4
    moved = [
        np.abs(np.asarray(a) - np.asarray(b)).max()
        for a, b in zip(jax.tree.leaves(state0.train.params), jax.tree.leaves(state1.train.params))
    ]
    assert max(moved) > 0
    # Adam's first step moves every coordinate with nonzero gradient by ~lr (sign of grad)
    assert max(moved) <= 2.5e-4 * 1.01


def test_unsafe_rbg_rollout_is_deterministic_and_differs_from_threefry():
    cfg = SMALL.replace(rollout_rng="unsafe_rbg")
    train = jax.jit(make_ppo(cfg).train)
    a, b = _metrics(train(jax.random.PRNGKey(3))), _metrics(train(jax.random.PRNGKey(3)))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # exact: one executable, same key twice
    c = _metrics(jax.jit(make_ppo(SMALL).train)(jax.random.PRNGKey(3)))
    assert not np.array_equal(a["actor_loss"], c["actor_loss"])


def test_gamma_sweep_with_reward_scaling_equals_separate_runs():
    # the reward scaler uses the TRACED gamma: a population that sweeps gamma scales each
    # member with its own discount, exactly as a separate run of that member does
    base = SMALL.replace(env_name="Pendulum-v1", normalize_reward=True, total_timesteps=4 * 32 * 3)
    gammas = (0.8, 0.99)
    train = jax.jit(make_ppo(base).train)
    as_arrays = lambda c: jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), c)
    key = jax.random.PRNGKey(7)
    separate = [train(key, as_arrays(base.replace(gamma=g)))[1] for g in gammas]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *[as_arrays(base.replace(gamma=g)) for g in gammas])
    _, together = jax.jit(jax.vmap(make_ppo(base).train))(jnp.stack([key, key]), stacked)
    for i in range(2):
        for k, v in separate[i].items():
            # tolerance: the vmapped sweep and a separate run are two programs
            np.testing.assert_allclose(np.asarray(together[k][i]), np.asarray(v), rtol=2e-5, atol=1e-6, err_msg=k)
    # sensitivity: the two discounts really give different critic losses (scaled returns differ)
    assert np.abs(np.asarray(separate[0]["critic_loss"]) - np.asarray(separate[1]["critic_loss"])).max() > 1e-3
    # ... and a scaler fixed at ONE discount (the old behaviour) would not reproduce member 1:
    from purejaxppo.stages.normalize import init_reward_scale, scale_rewards

    r = jnp.ones((20, 2))
    d = jnp.zeros((20, 2), bool)
    s_lo = scale_rewards(init_reward_scale(2), r, d, 0.8)[1]
    s_hi = scale_rewards(init_reward_scale(2), r, d, 0.99)[1]
    assert np.abs(np.asarray(s_lo) - np.asarray(s_hi)).max() > 1e-2


def test_counters_past_2_31_are_exact_with_x64_off(ppo):
    """Update 17,000,000 of a 128-step config: (17,000,000 + 1) * 128 = 2,176,000,128 steps,
    past 2**31, where an int32 reads -2,118,967,168. The state's counter is set there (no
    17M updates run): the step's metrics hold no count that could wrap (each integer metric
    counts within one update), and a program's host counters (what metrics.csv, the sinks
    and RunResult.metrics get) match Python's exact integers."""
    from purejaxppo.programs.program import Program

    first = 17_000_000
    runner = ppo.init(jax.random.PRNGKey(0), SMALL)._replace(update=jnp.asarray(first, jnp.int32))
    new, m = jax.jit(ppo.step)(runner)
    assert int(new.update) == first + 1 and "env_steps" not in m
    per_update = SMALL.batch_size * SMALL.update_epochs
    for k, v in m.items():
        if jnp.issubdtype(v.dtype, jnp.integer):
            assert 0 <= int(v) <= per_update, (k, int(v))
    exact = [(u + 1) * SMALL.batch_size for u in range(first, first + 3)]  # Python ints: no wrap
    assert SMALL.batch_size == 128 and exact[0] == 2_176_000_128 > 2**31
    got = Program(SMALL, ppo=ppo).counters(first, 3)["env_steps"]
    assert got.dtype == np.int64 and got.tolist() == exact


def test_the_loop_puts_the_host_count_in_every_metric_record():
    """A chunked run's metrics (RunResult.metrics, the source of metrics.csv and the sinks) hold
    env_steps as int64: (u + 1) * batch per run and update."""
    res = train_chunked(SMALL, num_seeds=2, chunk_updates=4)
    steps = res.metrics["env_steps"]
    assert steps.dtype == np.int64
    assert steps.tolist() == [[(u + 1) * 128 for u in range(6)]] * 2
