"""The Gymnasium bridge (slow path) against an independent reference: plain gymnasium
envs stepped by hand in Python, with manual resets."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("gymnasium.vector")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxppo import PPOConfig, envs, make_ppo  # noqa: E402
from purejaxppo.config import ConfigError  # noqa: E402
from purejaxppo.envs.gymnasium_bridge import gymnasium_vec_env  # noqa: E402

E, T, MAX = 3, 40, 10


def reference_rollout(env_id, seed, actions, **kw):
    """E single envs stepped by hand; reset where an episode ends (autoreset by hand)."""
    subs = [gym.make(env_id, **kw) for _ in range(E)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(subs)])
    out = []
    for a in actions:
        step = [e.step(np.asarray(ai)) for e, ai in zip(subs, a)]
        final = np.stack([s[0] for s in step]).astype(np.float32)
        rew = np.array([s[1] for s in step], np.float32)
        term = np.array([s[2] for s in step])
        trunc = np.array([s[3] for s in step])
        nxt = final.copy()
        for i, e in enumerate(subs):
            if term[i] or trunc[i]:
                nxt[i] = e.reset()[0]
        out.append((nxt, rew, term, trunc, final))
        obs = nxt
    return obs, [np.stack(x) for x in zip(*out)]


def bridge_rollout(venv, key, actions):
    def body(carry, a):
        state = carry
        obs, state, r, te, tr, info = venv.step(jax.random.PRNGKey(0), state, a)
        return state, (obs, r, te, tr, info["final_observation"])

    @jax.jit
    def run(key, actions):
        obs0, state = venv.reset(key)
        return obs0, jax.lax.scan(body, state, actions)[1]

    return run(key, actions)


def test_matches_hand_stepped_gymnasium_with_truncation():
    venv = gymnasium_vec_env("CartPole-v1", E, max_episode_steps=MAX)
    actions = np.random.default_rng(0).integers(0, 2, size=(T, E))
    key = jax.random.PRNGKey(7)
    obs0, got = bridge_rollout(venv, key, jnp.asarray(actions))
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1 - E, dtype=jnp.int32))
    _, want = reference_rollout("CartPole-v1", seed, actions, max_episode_steps=MAX)
    names = ("obs", "reward", "terminated", "truncated", "final_observation")
    for name, g, w in zip(names, got, want):
        np.testing.assert_array_equal(np.asarray(g), w, err_msg=name)
    trunc = np.asarray(got[3])
    assert trunc.any(), "the test must exercise time-limit truncation"
    # where an episode ended, obs is the reset obs and final_observation the true last one
    ended = np.asarray(got[2]) | trunc
    assert not np.allclose(np.asarray(got[0])[ended], np.asarray(got[4])[ended])
    assert venv.spec.max_episode_steps == MAX and venv.spec.discrete and venv.spec.num_actions == 2


def test_box_actions_are_clipped_like_gymnax():
    venv = gymnasium_vec_env("Pendulum-v1", E)
    assert not venv.spec.discrete and venv.spec.action_shape == (1,)
    actions = np.array([[[5.0], [-5.0], [0.3]]] * 4, np.float32)  # out of [-2, 2] bounds
    key = jax.random.PRNGKey(1)
    _, got = bridge_rollout(venv, key, jnp.asarray(actions))
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1 - E, dtype=jnp.int32))
    _, want = reference_rollout("Pendulum-v1", seed, np.clip(actions, -2, 2))
    np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got[1]), want[1], rtol=1e-6)


def test_trains_through_make_ppo_reproducibly():
    cfg = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 2, update_epochs=1)
    ppo = make_ppo(cfg, venv=envs.episode_statistics(gymnasium_vec_env("CartPole-v1", 4)))
    train = jax.jit(ppo.train)
    _, m1 = train(jax.random.PRNGKey(0))
    _, m2 = train(jax.random.PRNGKey(0))  # reset re-seeds the host env: same run
    _, m3 = train(jax.random.PRNGKey(1))
    assert np.all(np.asarray(m1["episodes"]) > 0)
    assert np.all(np.isfinite(np.asarray(m1["actor_loss"])))
    for k in m1:
        np.testing.assert_array_equal(np.asarray(m1[k]), np.asarray(m2[k]), err_msg=k)  # exact: one executable twice
    assert not np.array_equal(np.asarray(m1["critic_loss"]), np.asarray(m3["critic_loss"]))


def test_vmap_and_stale_state_raise_clear_errors():
    venv = gymnasium_vec_env("CartPole-v1", 2)
    with pytest.raises(ValueError, match="cannot be vmapped"):
        jax.vmap(venv.reset)(jax.random.split(jax.random.PRNGKey(0), 2))
    _, state = venv.reset(jax.random.PRNGKey(0))
    a = jnp.zeros((2,), jnp.int32)
    venv.step(None, state, a)
    with pytest.raises(Exception, match="cannot be rewound"):
        jax.block_until_ready(venv.step(None, state, a))  # the same (now stale) state again


class _DictObs(gym.Env):
    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})
    action_space = gym.spaces.Discrete(2)


class _MultiDiscreteAct(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.MultiDiscrete([2, 3])


@pytest.mark.parametrize(
    "env_cls, match",
    [(_DictObs, "Box observations only.*FlattenObservation"), (_MultiDiscreteAct, "Discrete and 1-D Box actions")],
)
def test_unsupported_spaces(env_cls, match):
    with pytest.raises(ConfigError, match=match):
        gymnasium_vec_env(env_cls, 2)


def test_rejects_vector_env_with_next_step_autoreset():
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)  # NEXT_STEP by default
    with pytest.raises(ConfigError, match="SAME_STEP"):
        gymnasium_vec_env(vec)
