"""The JaxMARL adapter against JaxMARL stepped by hand (skipped without the ``[marl]`` extra).

The reference is a Python loop over envs and steps through JaxMARL's dict API: ``step_env``
per env with the key the adapter gives it (the env's first agent row's key, split into
step/reset keys exactly as JaxMARL's own ``step`` splits it), a reset by hand where
``dones["__all__"]``, the episode's length counted here. The adapter must give the same
per-agent rewards and observations, the pre-reset observation as ``final_observation``,
``truncated`` exactly at the env's real length (MPE: 26 steps = ``max_steps + 1``) and masks
of the post-reset state.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jaxmarl", reason="the [marl] extra (jaxmarl) is not installed")

from purejaxppo.config import ConfigError
from purejaxppo.envs import jaxmarl_suite
from purejaxppo.envs.observation import CriticObs, MaskedObs
from purejaxppo.envs.registry import make_vec_env


def _reference(name, num_envs, key, steps, actions, **env_kwargs):
    """Hand-stepped JaxMARL: per step, lists over envs of (obs rows, final obs rows, rewards,
    done, length, avail rows after the reset)."""
    env = jaxmarl_suite._make(name, env_kwargs)
    agents, n = env.agents, len(env.agents)
    e = num_envs // n
    reset_keys = jax.random.split(key, num_envs)[::n]
    states, obs = [], []
    for i in range(e):
        o, s = env.reset(reset_keys[i])
        states.append(s)
        obs.append(o)
    lengths = [0] * e
    out = []
    for t in range(steps):
        k = jax.random.fold_in(key, t + 1)
        env_keys = jax.random.split(k, num_envs)[::n]
        row = []
        for i in range(e):
            k_step, k_reset = jax.random.split(env_keys[i])
            act = {a: actions[t][i * n + j] for j, a in enumerate(agents)}
            o, s, r, d, _ = env.step_env(k_step, states[i], act)
            lengths[i] += 1
            final = np.stack([np.asarray(o[a]) for a in agents])
            done = bool(d["__all__"])
            length = lengths[i]
            if done:
                o, s = env.reset(k_reset)
                lengths[i] = 0
            states[i] = s
            avail = (
                np.stack([np.asarray(v) for v in (env.get_avail_actions(s)[a] for a in agents)])
                if name == "3m"
                else None
            )
            row.append(
                (
                    np.stack([np.asarray(o[a]) for a in agents]),
                    final,
                    np.array([float(r[a]) for a in agents]),
                    done,
                    length,
                    avail,
                    o,
                )
            )
        out.append(row)
    return out


def _run_adapter(venv, key, steps, actions):
    obs, state = venv.reset(key)
    out = []
    step = jax.jit(venv.step)
    for t in range(steps):
        obs, state, reward, term, trunc, info = step(jax.random.fold_in(key, t + 1), state, jnp.asarray(actions[t]))
        out.append((obs, info["final_observation"], reward, term, trunc))
    return out


@pytest.mark.slow  # ~30 s: 60 hand-stepped steps
def test_mpe_final_observations_truncation_at_26_steps_and_per_agent_rewards():
    name, rows, steps = "MPE_simple_spread_v3", 6, 60  # 2 envs x 3 agents; episodes end at steps 26 and 52
    key = jax.random.PRNGKey(7)
    actions = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (steps, rows), 0, 5))
    venv = make_vec_env(f"jaxmarl:{name}", rows)
    assert venv.num_envs == rows and venv.spec.num_agents == 3 and venv.spec.max_episode_steps == 26
    ref = _reference(name, rows, key, steps, actions)
    got = _run_adapter(venv, key, steps, actions)
    ends = 0
    for t in range(steps):
        obs, final, reward, term, trunc = got[t]
        for i in range(2):
            r_obs, r_final, r_rew, r_done, r_len, _, _ = ref[t][i]
            sl = slice(3 * i, 3 * i + 3)
            np.testing.assert_allclose(np.asarray(reward[sl]), r_rew, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(final[sl]), r_final, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(obs[sl]), r_obs, rtol=1e-6, atol=1e-6)
            # MPE ends only by its time limit: truncated, never terminated, at exactly 26 steps
            assert r_done == (r_len == 26)
            assert list(np.asarray(trunc[sl])) == [r_done] * 3 and not np.any(np.asarray(term[sl]))
            ends += r_done
            if r_done:  # the final observation is NOT the next episode's first one
                assert not np.allclose(np.asarray(final[sl]), np.asarray(obs[sl]))
    assert ends == 4


def test_max_episode_steps_is_the_real_length():
    venv = make_vec_env("jaxmarl:MPE_simple_spread_v3", 3, max_episode_steps=5)
    assert venv.spec.max_episode_steps == 5
    _, state = venv.reset(jax.random.PRNGKey(0))
    step = jax.jit(venv.step)
    ends = []
    for t in range(11):
        _, state, _, _, trunc, _ = step(jax.random.PRNGKey(t), state, jnp.zeros(3, jnp.int32))
        ends.append(bool(trunc[0]))
    assert ends == [t in (4, 9) for t in range(11)]


@pytest.mark.slow  # ~35 s
def test_smax_masks_of_the_post_reset_state_termination_and_truncation():
    name, rows, steps = "3m", 6, 60
    key = jax.random.PRNGKey(3)
    limit = 18  # episodes truncated at 18 steps unless a team dies first (random play: about 16)
    venv = make_vec_env(f"jaxmarl:{name}", rows, max_episode_steps=limit)
    assert venv.spec.action_mask and venv.spec.num_actions == 8  # 5 moves + 3 enemies to shoot
    # legal random actions: the first legal action after a random rotation, from the reference's masks
    env = jaxmarl_suite._make(name, {"max_steps": limit - 1})
    rng = np.random.default_rng(0)
    obs, state = venv.reset(key)
    step = jax.jit(venv.step)
    actions, got = [], []
    for t in range(steps):
        mask = np.asarray(obs.action_mask)
        a = np.array([rng.choice(np.flatnonzero(m)) for m in mask])
        actions.append(a)
        obs, state, reward, term, trunc, info = step(jax.random.fold_in(key, t + 1), state, jnp.asarray(a))
        got.append((obs, info["final_observation"], reward, term, trunc))
    ref = _reference(name, rows, key, steps, actions, max_steps=limit - 1)
    saw_term = saw_trunc = False
    for t in range(steps):
        obs, final, reward, term, trunc = got[t]
        for i in range(2):
            r_obs, r_final, r_rew, r_done, r_len, r_avail, _ = ref[t][i]
            sl = slice(3 * i, 3 * i + 3)
            np.testing.assert_allclose(np.asarray(reward[sl]), r_rew, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(final.obs[sl]), r_final, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(obs.obs[sl]), r_obs, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(np.asarray(obs.action_mask[sl]), r_avail.astype(bool))  # post-reset state
            is_trunc = r_done and r_len == limit
            assert list(np.asarray(trunc[sl])) == [is_trunc] * 3
            assert list(np.asarray(term[sl])) == [r_done and not is_trunc] * 3
            saw_term |= r_done and not is_trunc
            saw_trunc |= is_trunc
    assert saw_term and saw_trunc
    del env


def test_global_state_mpe_is_every_agents_observation_plus_id():
    venv = make_vec_env("jaxmarl:MPE_simple_spread_v3", 3, global_state=True, agent_ids=True)
    obs, _ = venv.reset(jax.random.PRNGKey(0))
    assert isinstance(obs, CriticObs) and venv.spec.global_state_shape == (3 * 18 + 3,)
    plain = np.asarray(obs.obs)[:, :18]
    assert np.array_equal(np.asarray(obs.obs)[:, 18:], np.eye(3))  # agent ids on the actor's input
    for j in range(3):
        np.testing.assert_array_equal(
            np.asarray(obs.global_state[j]), np.concatenate([plain.reshape(-1), np.eye(3)[j]])
        )


def test_smax_global_state_is_world_state_plus_id():
    venv = make_vec_env("jaxmarl:3m", 3, global_state=True)
    obs, _ = venv.reset(jax.random.PRNGKey(0))
    env = jaxmarl_suite._make("3m", {})
    ref, _ = env.reset(jax.random.split(jax.random.PRNGKey(0), 3)[0])
    assert isinstance(obs.obs, MaskedObs)
    for j in range(3):
        np.testing.assert_array_equal(
            np.asarray(obs.global_state[j]), np.concatenate([np.asarray(ref["world_state"]), np.eye(3)[j]])
        )


def test_rows_must_be_a_multiple_of_the_agents():
    with pytest.raises(ConfigError, match=r"num_envs=4 must be a multiple of the 3 agents.*--num-envs 3 \(1 envs\)"):
        make_vec_env("jaxmarl:MPE_simple_spread_v3", 4)
    with pytest.raises(ConfigError, match="different observation shapes"):
        make_vec_env("jaxmarl:MPE_simple_adversary_v3", 3)


def test_episode_return_is_the_team_return_on_every_agent_row():
    from purejaxppo.envs import episode_statistics

    venv = episode_statistics(make_vec_env("jaxmarl:MPE_simple_spread_v3", 6, max_episode_steps=4))
    _, state = venv.reset(jax.random.PRNGKey(0))
    step = jax.jit(venv.step)
    rewards = []
    for t in range(4):
        _, state, reward, _, _, info = step(jax.random.PRNGKey(t), state, jnp.full(6, t % 5, jnp.int32))
        rewards.append(np.asarray(reward))
    team = np.sum(rewards, axis=0).reshape(2, 3).sum(axis=1)  # per env: every step, every agent
    assert np.all(np.asarray(info["episode_done"]))
    np.testing.assert_allclose(np.asarray(info["episode_return"]), np.repeat(team, 3), rtol=1e-5)
    assert len(set(np.round(rewards[0], 5))) > 1  # agents' rewards differ: a per-agent sum would not pass
