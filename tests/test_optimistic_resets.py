"""``reset_ratio`` ("optimistic" resets) of the shared auto-reset, against a NumPy loop.

The toy env's start state records a number drawn from its reset key, so which key made an env's
new start is visible. The reference is a plain loop over envs that applies the documented rule:
per group of R consecutive envs, the first env whose episode ended is reset with its own reset key
and every other finished env of the group gets a copy of that start.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.envs import EnvSpec, auto_reset_vec_env, discrete_action_fields, make_vec_env

N, T, MAX_LEN = 8, 40, 4


def reset1(key):
    k_len, k_id = jax.random.split(key)
    state = (
        jnp.zeros((), jnp.int32),
        jax.random.randint(k_len, (), 1, MAX_LEN + 1),
        jax.random.randint(k_id, (), 0, 1_000_000),
    )
    return obs_of(state), state


def obs_of(state):
    t, _, start_id = state
    return jnp.stack([t, start_id]).astype(jnp.float32)


def step1(key, state, action):
    t, length, start_id = state
    new = (t + 1, length, start_id)
    return obs_of(new), new, jnp.float32(1.0), t + 1 >= length, jnp.asarray(False)


SPEC = EnvSpec("toy-counter", (2,), max_episode_steps=None, **discrete_action_fields(2))


def reference(key, steps, ratio):
    """A plain loop: the documented rule, with the env's own reset for fresh starts."""
    keys = jax.random.split(key, steps + 1)
    states = [tuple(np.asarray(x) for x in reset1(k)[1]) for k in jax.random.split(keys[0], N)]
    obs_out, final_out, overflow = [], [], 0
    for k in keys[1:]:
        k_reset = [jax.random.split(ke)[1] for ke in jax.random.split(k, N)]
        stepped = [(t + 1, length, sid) for t, length, sid in states]
        done = [t >= length for t, length, _ in stepped]
        final_out.append([[t, sid] for t, _, sid in stepped])
        new = list(stepped)
        for g in range(0, N, ratio):
            finished = [i for i in range(g, g + ratio) if done[i]]
            overflow += len(finished) > 1
            if finished:
                fresh = tuple(np.asarray(x) for x in reset1(k_reset[finished[0]])[1])
                for i in finished:
                    new[i] = fresh
        states = new
        obs_out.append([[t, sid] for t, _, sid in states])
    return np.asarray(obs_out, np.float32), np.asarray(final_out, np.float32), overflow


def run(venv, key, steps):
    keys = jax.random.split(key, steps + 1)
    obs, state = venv.reset(keys[0])
    step = jax.jit(venv.step)
    obs_out, final_out = [], []
    for k in keys[1:]:
        obs, state, _, _, _, info = step(k, state, jnp.zeros((N,), jnp.int32))
        obs_out.append(obs)
        final_out.append(info["final_observation"])
    return np.asarray(obs_out), np.asarray(final_out)


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_reset_ratio_follows_the_documented_rule(ratio):
    key = jax.random.PRNGKey(7)
    venv = auto_reset_vec_env(SPEC, N, reset1, step1, reset_ratio=ratio)
    obs, final = run(venv, key, T)
    ref_obs, ref_final, overflow = reference(key, T, ratio)
    # exact: the toy env's numbers are small integers (float32 holds them exactly in any program)
    np.testing.assert_array_equal(final, ref_final)  # the pre-reset observation, always
    np.testing.assert_array_equal(obs, ref_obs)
    if ratio > 1:
        assert overflow > 0  # groups did finish two episodes on one step: the copies were exercised
        exact_obs, _, _ = reference(key, T, 1)
        assert not np.array_equal(obs, exact_obs)  # ... and there the numbers differ from ratio 1


def test_optimistic_resets_equal_exact_ones_while_one_episode_per_group_ends():
    """Episodes of fixed, staggered lengths: never two ends per group on one step."""

    def reset_staggered(key):
        obs, (t, _, sid) = reset1(key)
        return obs, (t, jnp.int32(4), sid)

    def step_staggered(key, state, action):
        return step1(key, state, action)

    def venv(ratio):
        v = auto_reset_vec_env(SPEC, N, reset_staggered, step_staggered, reset_ratio=ratio)

        # envs start at different counters so that, in every group of 4, they end on different steps
        def reset(key):
            obs, (t, length, sid) = v.reset(key)
            t = jnp.arange(N, dtype=jnp.int32) % 4
            return obs, (t, length, sid)

        return v._replace(reset=reset)

    key = jax.random.PRNGKey(3)
    exact = run(venv(1), key, T)
    for ratio in (2, 4):
        np.testing.assert_array_equal(run(venv(ratio), key, T)[0], exact[0])  # exact: integer-valued observations


def test_vmapped_seeds_give_the_same_numbers_as_one_at_a_time():
    """Under vmap the reset's cond is taken where any member needs it; the rule must not change."""
    venv = auto_reset_vec_env(SPEC, N, reset1, step1, reset_ratio=4)
    keys = jax.random.split(jax.random.PRNGKey(11), 3)
    singles = [run(venv, k, 12)[0] for k in keys]

    def many(key):
        ks = jax.random.split(key, 13)
        obs, state = venv.reset(ks[0])

        def body(state, k):
            obs, state, *_ = venv.step(k, state, jnp.zeros((N,), jnp.int32))
            return state, obs

        return jax.lax.scan(body, state, ks[1:])[1]

    # exact although two programs: integer-valued observations, no float rounding anywhere
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(many))(keys)), np.stack(singles))


def test_reset_stays_a_branch_under_nested_vmap_with_the_same_numbers():
    """Sweeps x seeds (two vmaps): the reset is still a ``cond`` (not a select of both branches)
    and every member's numbers equal the member run alone."""
    venv = auto_reset_vec_env(SPEC, N, reset1, step1)
    keys = jax.random.split(jax.random.PRNGKey(5), 6).reshape(2, 3, 2)
    obs, state = jax.vmap(jax.vmap(venv.reset))(keys)
    step = jax.vmap(jax.vmap(venv.step))
    act = jnp.zeros((2, 3, N), jnp.int32)
    assert "stablehlo.case" in jax.jit(step).lower(keys, state, act).as_text()  # a branch, not a select
    singles = [[run(venv, keys[i, j], 12) for j in range(3)] for i in range(2)]

    def many(key):
        ks = jax.random.split(key, 13)
        obs, state = venv.reset(ks[0])

        def body(state, k):
            obs, state, _, _, _, info = venv.step(k, state, jnp.zeros((N,), jnp.int32))
            return state, (obs, info["final_observation"])

        return jax.lax.scan(body, state, ks[1:])[1]

    got = jax.jit(jax.vmap(jax.vmap(many)))(keys)
    for i in range(2):
        for j in range(3):  # exact: integer-valued observations
            np.testing.assert_array_equal(np.asarray(got[0][i, j]), singles[i][j][0])
            np.testing.assert_array_equal(np.asarray(got[1][i, j]), singles[i][j][1])


def test_bad_reset_ratio_is_a_clear_error():
    with pytest.raises(ConfigError, match="reset_ratio=3 must be a positive int dividing the 8 envs"):
        auto_reset_vec_env(SPEC, N, reset1, step1, reset_ratio=3)
    with pytest.raises(ConfigError, match="reset_ratio=4 must divide num_envs=6"):
        validate(
            PPOConfig(env_name="craftax:Craftax-Classic-Symbolic-v1", num_envs=6, num_minibatches=2, reset_ratio=4)
        )
    with pytest.raises(ConfigError, match="gymnax's own step resets CartPole-v1"):
        make_vec_env("CartPole-v1", 4, reset_ratio=2)
