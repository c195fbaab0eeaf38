"""Rollout records termination and truncation apart; targets bootstrap correctly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo, ppo_loss_fn
from purejaxppo.envs import episode_statistics, make_vec_env
from purejaxppo.stages.gae import gae
from purejaxppo.stages.rollout import collect, critic_values, stateless
from purejaxppo.step.device_split import DeviceSplit
from purejaxppo.step.phases import StepParts, collect_rollout, compute_targets

LIMIT = 12


def _random_policy(key, obs):
    return jax.random.randint(key, obs.shape[:1], 0, 2), jnp.full(obs.shape[:1], -np.log(2.0))


def _rollout(num_steps=200, num_envs=8):
    venv = episode_statistics(make_vec_env("CartPole-v1", num_envs, max_episode_steps=LIMIT))
    obs, state = venv.reset(jax.random.PRNGKey(0))
    (_, last_obs, carry, last_done), tr = collect(
        jax.random.PRNGKey(1), stateless(_random_policy), venv.step, state, obs, num_steps
    )
    assert carry == () and tr.record == ()  # a stateless policy carries and records nothing
    return jax.device_get(tr), np.asarray(last_obs), np.asarray(last_done)


def test_flags_and_final_observation():
    tr, last_obs, last_done = _rollout()
    term, trunc = tr.terminated, tr.truncated
    assert trunc.any() and term.any(), "the short time limit must produce both kinds of ends"
    # a truncated step is exactly one that ended at the time limit
    lengths = tr.info["episode_length"]
    assert np.all(lengths[trunc & ~term] == LIMIT)
    assert np.all(lengths[term] <= LIMIT)
    # the stored next state is the pre-reset observation: it continues the trajectory where the
    # episode did not end, and differs from the (reset) observation stored at t+1 where it ended
    done = term | trunc
    np.testing.assert_array_equal(tr.next_obs[:-1][~done[:-1]], tr.obs[1:][~done[:-1]])
    assert not np.allclose(tr.next_obs[:-1][done[:-1]], tr.obs[1:][done[:-1]])
    np.testing.assert_array_equal(tr.next_obs[-1][~done[-1]], last_obs[~done[-1]])
    # CartPole terminal states are outside the thresholds; truncated ones (mostly) are not
    x, theta = tr.next_obs[..., 0], tr.next_obs[..., 2]
    outside = (np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)
    assert np.all(outside[term]) and not np.any(outside[trunc & ~term])


def test_reset_flag_is_the_previous_steps_done():
    tr, _, last_done = _rollout(num_steps=60)
    done = tr.terminated | tr.truncated
    assert done[:-1].any() and not done.all()
    # reset_t = done_{t-1}, True at a fresh start; the returned done is the last step's
    np.testing.assert_array_equal(tr.reset[0], True)
    np.testing.assert_array_equal(tr.reset[1:], done[:-1])
    np.testing.assert_array_equal(last_done, done[-1])


def test_carry_and_done_are_threaded_through_the_policy():
    venv = make_vec_env("CartPole-v1", 3, max_episode_steps=5)
    obs, state = venv.reset(jax.random.PRNGKey(0))

    def counting(key, carry, obs, reset):  # carry counts steps since the last reset
        carry = jnp.where(reset, 0, carry) + 1
        return carry, jnp.zeros(obs.shape[:1], jnp.int32), jnp.zeros(obs.shape[:1]), carry

    start_done = jnp.array([False, True, False])
    (_, _, carry, done), tr = collect(
        jax.random.PRNGKey(1), counting, venv.step, state, obs, 12, carry=jnp.array([10, 10, 3]), done=start_done
    )
    tr = jax.device_get(tr)
    # Python reference: the count restarts after every episode end (and where done was passed in)
    ref, count, prev = [], np.array([10, 10, 3]), np.asarray(start_done)
    for t in range(12):
        count = np.where(prev, 0, count) + 1
        ref.append(count)
        prev = tr.terminated[t] | tr.truncated[t]
    np.testing.assert_array_equal(tr.record, np.stack(ref))
    np.testing.assert_array_equal(carry, ref[-1])
    np.testing.assert_array_equal(done, prev)
    np.testing.assert_array_equal(tr.reset[0], start_done)
    assert tr.truncated.any()


def test_truncated_bootstraps_from_final_observation_terminated_from_zero():
    tr, _, _ = _rollout()
    w = np.array([0.3, -1.2, 2.0, 0.7], np.float32)
    critic = lambda o: jnp.tanh(o @ w) + 2.0  # any nonzero function of the observation
    values, next_values = critic_values(critic, tr)
    gamma = 0.9
    adv, _ = gae(
        jnp.asarray(tr.reward), values, next_values, jnp.asarray(tr.terminated), jnp.asarray(tr.truncated), gamma, 0.0
    )
    adv, values = np.asarray(adv), np.asarray(values)
    f = lambda o: np.tanh(o @ w) + 2.0
    trunc_only = tr.truncated & ~tr.terminated
    # truncated: r + gamma * V(final observation) - V(s)
    np.testing.assert_allclose(
        adv[trunc_only], (tr.reward + gamma * f(tr.next_obs) - f(tr.obs))[trunc_only], rtol=1e-5, atol=1e-5
    )
    # ...which is NOT the value of the reset observation stored at t+1
    t_idx, e_idx = np.nonzero(trunc_only[:-1])
    wrong = tr.reward[t_idx, e_idx] + gamma * f(tr.obs[t_idx + 1, e_idx]) - f(tr.obs[t_idx, e_idx])
    assert not np.allclose(adv[t_idx, e_idx], wrong)
    # terminated: r - V(s)
    np.testing.assert_allclose(adv[tr.terminated], (tr.reward - f(tr.obs))[tr.terminated], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, f(tr.obs), rtol=1e-5, atol=1e-5)


def test_critic_values_against_numpy_vmapped_and_pytree_obs():
    """V(s_t) and V(s'_t) are the critic of every observation and of every true next state
    (the pre-reset final observation where an episode ended), against NumPy; the same under
    vmap over rollouts whose episodes end at different steps, and for a pytree observation."""
    tr, _, _ = _rollout()
    assert (tr.truncated & ~tr.terminated).sum() > 8 and tr.terminated.any()
    w = np.array([0.3, -1.2, 2.0, 0.7], np.float32)
    f = lambda o: np.tanh(o @ w) + 2.0
    critic = lambda o: jnp.tanh(o @ w) + 2.0
    values, next_values = jax.jit(critic_values, static_argnums=0)(critic, tr)
    np.testing.assert_allclose(values, f(tr.obs), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(next_values, f(tr.next_obs), rtol=1e-6, atol=1e-6)

    # a second rollout whose episodes end elsewhere: the first one reversed in time, truncations moved
    tr2 = tr._replace(
        obs=tr.obs[::-1],
        next_obs=tr.next_obs[::-1],
        terminated=tr.terminated[::-1],
        truncated=np.roll(tr.truncated, 5, axis=0),
    )
    both = jax.tree.map(lambda a, b: np.stack([a, b]), tr, tr2)
    vv, nv = jax.jit(jax.vmap(lambda t: critic_values(critic, t)))(both)
    for i, t in enumerate((tr, tr2)):
        np.testing.assert_allclose(vv[i], f(t.obs), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(nv[i], f(t.next_obs), rtol=1e-6, atol=1e-6)

    tree = tr._replace(
        obs={"a": tr.obs[..., :2], "b": tr.obs[..., 2:]},
        next_obs={"a": tr.next_obs[..., :2], "b": tr.next_obs[..., 2:]},
    )
    tree_critic = lambda o: critic(jnp.concatenate([o["a"], o["b"]], axis=-1))
    tv, tn = critic_values(tree_critic, tree)
    np.testing.assert_allclose(tv, values, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tn, next_values, rtol=1e-6, atol=1e-6)


def test_critic_values_without_final_states_one_pass_of_h_e_plus_e():
    """``final_states=False`` (every end terminal): V(s_t) as before, V(s'_t) = V(s_{t+1})
    wherever step t did not end an episode and at the horizon, from ONE critic pass over
    ``H*E + E`` observations; GAE with ends terminal then equals GAE on the full pass."""
    tr, last_obs, last_done = _rollout()
    h, e = tr.reward.shape
    w = np.array([0.3, -1.2, 2.0, 0.7], np.float32)
    f = lambda o: np.tanh(o @ w) + 2.0
    sizes = []

    def critic(o):
        sizes.append(o.shape[0])
        return jnp.tanh(o @ w) + 2.0

    values, next_values = critic_values(critic, tr, final_states=False)
    assert sizes == [h + 1]  # one pass: [H + 1, E] observations
    values, next_values = np.asarray(values), np.asarray(next_values)
    done = tr.terminated | tr.truncated
    np.testing.assert_allclose(values, f(tr.obs), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(next_values[~done], f(tr.next_obs)[~done], rtol=1e-6, atol=1e-6)
    assert not last_done.all()  # the horizon bootstrap is exercised
    np.testing.assert_allclose(next_values[-1][~done[-1]], f(last_obs)[~done[-1]], rtol=1e-6, atol=1e-6)
    ends = jnp.asarray(done)  # bootstrap_truncated=False: the GAE sees every end as terminal
    for lam in (0.0, 0.95):
        adv, _ = gae(jnp.asarray(tr.reward), values, next_values, ends, jnp.asarray(tr.truncated), 0.9, lam)
        ref, _ = gae(
            jnp.asarray(tr.reward),
            jnp.asarray(f(tr.obs)),
            jnp.asarray(f(tr.next_obs)),
            ends,
            jnp.asarray(tr.truncated),
            0.9,
            lam,
        )
        np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)


def test_continuous_actions_clipped_only_for_the_env():
    venv = make_vec_env("Pendulum-v1", 2)
    obs, state = venv.reset(jax.random.PRNGKey(0))
    big = jnp.array([[5.0], [-5.0]])  # bounds are [-2, 2]
    _, s1, r1, *_ = venv.step(jax.random.PRNGKey(1), state, big)
    _, s2, r2, *_ = venv.step(jax.random.PRNGKey(1), state, jnp.array([[2.0], [-2.0]]))
    np.testing.assert_allclose(r1, r2)  # the env saw the clipped action


@pytest.mark.parametrize("network", ["mlp", "gru"])
@pytest.mark.parametrize("bootstrap", [True, False])
def test_step_targets_against_a_numpy_gae(network, bootstrap):
    """The step's advantages (``compute_targets``) against a NumPy GAE loop over the critic's
    values of every observation and every TRUE next state: truncations bootstrap from the final
    state's value with ``bootstrap_truncated``, and are terminal without it (where the step
    skips the final states' pass: a wrong skip fails the first case)."""
    cfg = PPOConfig(
        network=network,
        num_envs=8,
        num_steps=48,
        max_episode_steps=12,
        total_timesteps=8 * 48,
        bootstrap_truncated=bootstrap,
        gamma=0.9,
        gae_lambda=0.8,
    )
    ppo = make_ppo(cfg)
    parts = StepParts(cfg, ppo.venv, ppo.agent, ppo_loss_fn, DeviceSplit(None, 1, cfg.num_envs, cfg.num_envs))
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    params = runner.train.params

    @jax.jit
    def targets(runner):
        _, traj = collect_rollout(parts, params, runner, jax.random.PRNGKey(1))
        batch = compute_targets(parts, params, traj, runner.reward_scale, cfg)[0]
        return traj, batch, ppo.agent.values(params, traj)  # the full pass: V(s_t), V(s'_t)

    traj, batch, (v, nv) = jax.device_get(targets(runner))
    term, trunc = traj.terminated, traj.truncated
    assert (trunc & ~term).any() and term.any()
    ends = (term | trunc) if not bootstrap else term
    adv, running = np.zeros_like(v), np.zeros_like(v[0])
    for t in reversed(range(cfg.num_steps)):
        delta = traj.reward[t] + cfg.gamma * (1.0 - ends[t]) * nv[t] - v[t]
        running = delta + cfg.gamma * cfg.gae_lambda * (1.0 - (term[t] | trunc[t])) * running
        adv[t] = running
    np.testing.assert_allclose(batch.advantage, adv, rtol=1e-4, atol=1e-5)
