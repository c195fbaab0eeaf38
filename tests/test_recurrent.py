"""Recurrent (GRU) PPO: resets at episode boundaries, ratio 1 on the first minibatch,
whole-sequence minibatches, vmap/determinism, options, and a short learning check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import ConfigError, PPOConfig, make_ppo, ppo_loss_fn
from purejaxppo.agents import recurrent as rec
from purejaxppo.stages.gae import gae
from purejaxppo.stages.rollout import Batch, collect
from purejaxppo.step.train import rollout_key
from purejaxppo.stages.update import shuffle_split

SMALL = PPOConfig(
    network="gru",
    num_envs=4,
    num_steps=16,
    total_timesteps=4 * 16 * 3,
    update_epochs=2,
    num_minibatches=2,
    gru_size=16,
    hidden_sizes=(16,),
    max_episode_steps=9,
)
ROLL = SMALL.replace(num_envs=8, num_steps=48, max_episode_steps=12, total_timesteps=8 * 48)


def _np(tree):
    return jax.tree.map(np.asarray, jax.device_get(tree))


def _network(ppo):
    """The agent's GRU network, built on its own (same module, so the same params fit)."""
    cfg = ppo.config
    return rec.make_recurrent_network(ppo.venv.spec, cfg.gru_size, cfg.hidden_sizes, cfg.activation)


def _policy(agent, params):
    """The step's policy: act, sample, log-prob (as in ``train.make_ppo``)."""

    def policy(key, carry, obs, reset):
        carry, dist_params, record = agent.act(params, carry, obs, reset)
        action = agent.dist.sample(key, dist_params)
        return carry, action, agent.dist.log_prob(dist_params, action), record

    return policy


def _collect(ppo, key, runner):
    params = runner.train.params
    return collect(
        key,
        _policy(ppo.agent, params),
        ppo.venv.step,
        runner.env_state,
        runner.obs,
        ppo.config.num_steps,
        runner.carry,
        runner.done,
    )


def _units(ppo, params, traj, carry0):
    """The step's batch (no advantage normalisation) laid out as the agent's units."""
    cfg = ppo.config
    values, next_values = ppo.agent.values(params, traj)
    adv, ret = gae(traj.reward, values, next_values, traj.terminated, traj.truncated, cfg.gamma, cfg.gae_lambda)
    return ppo.agent.units(Batch(traj.obs, traj.action, traj.log_prob, values, adv, ret), carry0, traj.reset)


def _rollout(cfg, seed=0):
    """Fresh runner -> one rollout with its initial params: ``(ppo, params, runner, traj, (carry, done))``."""
    ppo = make_ppo(cfg)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(seed))
    params = runner.train.params
    (_, _, carry, done), traj = jax.jit(lambda r: _collect(ppo, jax.random.PRNGKey(seed + 1), r))(runner)
    return ppo, params, runner, traj, (carry, done)


def test_hidden_state_is_reset_exactly_at_episode_boundaries():
    # CartPole with a 12-step time limit: episodes end by termination AND truncation inside the rollout
    cfg = ROLL
    ppo, params, runner, traj, (last_carry, last_done) = _rollout(cfg)
    net = _network(ppo)
    tr = _np(traj)
    done = tr.terminated | tr.truncated
    assert tr.truncated.any() and tr.terminated.any() and not done.all()
    # the reset flag is the PREVIOUS step's done (True at the very start)
    expected_reset = np.concatenate([np.ones((1, cfg.num_envs), bool), done[:-1]])
    np.testing.assert_array_equal(np.asarray(traj.reset), expected_reset)
    np.testing.assert_array_equal(np.asarray(last_done), done[-1])
    # independent reference: a Python loop that zeroes the carry itself (never asks the network to)
    step = jax.jit(lambda c, o: net.step(params, c, o, jnp.zeros(o.shape[:1], bool)))
    h = np.zeros((cfg.num_envs, cfg.gru_size), np.float32)
    prev_done = np.ones(cfg.num_envs, bool)
    carries, values, carries_no_reset = [], [], []
    for t in range(cfg.num_steps):
        h_in = np.where(prev_done[:, None], 0.0, h)
        carries_no_reset.append(np.asarray(step(h, tr.obs[t])[0]))  # what a missing reset would give
        h, _, v = (np.asarray(x) for x in step(h_in, tr.obs[t]))
        carries.append(h), values.append(v)
        prev_done = done[t]
    carries, carries_no_reset = np.stack(carries), np.stack(carries_no_reset)
    value, carry_out = tr.record
    np.testing.assert_allclose(carry_out, carries, atol=1e-5)
    np.testing.assert_allclose(value, np.stack(values), atol=1e-5)
    np.testing.assert_allclose(np.asarray(last_carry), carries[-1], atol=1e-5)
    # the test has teeth: where a reset happened (t > 0), skipping it changes the carry noticeably
    gap = np.abs(carries - carries_no_reset).max(-1)
    assert np.all(gap[1:][expected_reset[1:]] > 1e-3) and np.all(gap[~expected_reset] == 0)
    # the training pass (network.apply from the stored initial carry, same resets) reproduces them
    final, _, v = net.apply(params, runner.carry, traj.obs, traj.reset)
    np.testing.assert_allclose(np.asarray(final), carries[-1], atol=1e-5)
    np.testing.assert_allclose(np.asarray(v), np.stack(values), atol=1e-5)


def test_next_state_values_use_the_pre_reset_carry():
    cfg = ROLL
    ppo, params, _, traj, _ = _rollout(cfg)
    net = _network(ppo)
    tr = _np(traj)
    done = tr.terminated | tr.truncated
    nv = np.asarray(rec.next_values(net, params, traj))
    value, carry_out = tr.record
    # the agent's values are the recorded V(s_t) and these V(s'_t)
    v_agent, nv_agent = ppo.agent.values(params, traj)
    np.testing.assert_array_equal(np.asarray(v_agent), value)
    np.testing.assert_allclose(np.asarray(nv_agent), nv, atol=1e-6)
    # ordinary steps: V(s'_t) is exactly V_{t+1} (same carry, same observation, no reset)
    np.testing.assert_allclose(nv[:-1][~done[:-1]], value[1:][~done[:-1]], atol=1e-5)
    # episode ends: one GRU step from the carry after step t (NOT a zero carry) on the final observation
    t, e = np.nonzero(done)
    ref = lambda c: np.asarray(
        net.step(params, jnp.asarray(c), jnp.asarray(tr.next_obs[t, e]), jnp.zeros(len(t), bool))[2]
    )
    np.testing.assert_allclose(nv[t, e], ref(carry_out[t, e]), atol=1e-5)
    assert np.abs(nv[t, e] - ref(np.zeros_like(carry_out[t, e]))).max() > 1e-4


def test_values_without_final_states_read_the_recorded_next_values():
    """``final_states=False``: V(s'_t) is the recorded V(s_{t+1}) where step t did not end an
    episode, and one GRU step on the last step's next state at the horizon; equal (two
    programs: 1e-5) to the full computation wherever the step reads it."""
    ppo, params, _, traj, _ = _rollout(ROLL)
    tr = _np(traj)
    done = tr.terminated | tr.truncated
    assert done[:-1].any() and not done[-1].all()
    v_full, nv_full = ppo.agent.values(params, traj)
    v, nv = ppo.agent.values(params, traj, final_states=False)
    np.testing.assert_array_equal(np.asarray(v), np.asarray(v_full))
    np.testing.assert_allclose(np.asarray(nv)[~done], np.asarray(nv_full)[~done], atol=1e-5)
    np.testing.assert_allclose(np.asarray(nv)[:-1], tr.record[0][1:], atol=0)  # read from the record
    assert np.isfinite(np.asarray(nv)).all()


@pytest.mark.slow
@pytest.mark.parametrize("env,kw", [("CartPole-v1", {}), ("Pendulum-v1", dict(max_episode_steps=7))])
def test_first_minibatch_ratio_is_one(env, kw):
    cfg = SMALL.replace(env_name=env, num_steps=32, total_timesteps=4 * 32, **kw)
    ppo, params, runner, traj, _ = _rollout(cfg, seed=3)
    assert np.asarray(traj.reset)[1:].any()  # episodes end inside the rollout
    batch = _units(ppo, params, traj, runner.carry)
    mb = jax.tree.map(lambda x: x[0], shuffle_split(jax.random.PRNGKey(0), batch, cfg.num_minibatches))
    assert mb.obs.shape[:2] == (cfg.num_envs // cfg.num_minibatches, cfg.num_steps)
    dist_params, values = ppo.agent.evaluate(params, mb)
    logp = ppo.agent.dist.log_prob(dist_params, mb.action)
    np.testing.assert_allclose(np.asarray(logp), np.asarray(mb.log_prob), atol=2e-5)
    np.testing.assert_allclose(np.asarray(values), np.asarray(mb.value), atol=2e-5)
    _, metrics = ppo_loss_fn(ppo.agent, params, mb, cfg)
    assert float(metrics["approx_kl"]) < 1e-8 and float(metrics["clip_frac"]) == 0.0
    # ... and it would not be 1 if the training pass ignored the stored resets
    no_resets = mb._replace(context=mb.context._replace(reset=jnp.zeros_like(mb.context.reset)))
    logp_bad = ppo.agent.dist.log_prob(ppo.agent.evaluate(params, no_resets)[0], mb.action)
    assert np.abs(np.asarray(logp_bad) - np.asarray(mb.log_prob)).max() > 1e-4


def test_minibatches_are_whole_env_sequences():
    cfg = SMALL.replace(num_envs=6, num_minibatches=3)
    seen = []

    def spy_loss(agent, params, mb, c):
        jax.debug.callback(
            lambda *xs: seen.append(tuple(np.asarray(x) for x in xs)),
            mb.context.init_carry,
            mb.obs,
            mb.action,
            mb.context.reset,
        )
        return ppo_loss_fn(agent, params, mb, c)

    ppo = make_ppo(cfg, loss_fn=spy_loss)
    runner = jax.jit(ppo.step)(ppo.init(jax.random.PRNGKey(0)))[0]  # nonzero carries from here on
    seen.clear()
    jax.block_until_ready(jax.jit(ppo.step)(runner))
    # the same rollout, reproduced outside the step (same key derivation)
    _, k_roll, _ = jax.random.split(runner.rng, 3)
    params = runner.train.params
    _, traj = _collect(ppo, rollout_key(k_roll, cfg.rollout_rng), runner)
    batch = _np(_units(ppo, params, traj, runner.carry))
    assert np.abs(batch.context.init_carry).min(-1).max() > 0  # carries are not all zero
    # grad evaluation may call the callback more than once per minibatch; dedupe identical records
    unique = {tuple(a.tobytes() for a in r): r for r in seen}.values()
    assert len(unique) >= cfg.update_epochs  # at least one distinct split per epoch
    rows_per_mb = cfg.num_envs // cfg.num_minibatches
    counts = np.zeros(cfg.num_envs, int)
    for init_carry, obs, action, reset in unique:
        assert obs.shape == (rows_per_mb, cfg.num_steps) + batch.obs.shape[2:]
        for i in range(rows_per_mb):
            match = [e for e in range(cfg.num_envs) if np.array_equal(obs[i], batch.obs[e])]
            assert len(match) == 1, "each minibatch row is exactly one env's whole sequence"
            e = match[0]
            np.testing.assert_array_equal(init_carry[i], batch.context.init_carry[e])
            np.testing.assert_array_equal(action[i], batch.action[e])
            np.testing.assert_array_equal(reset[i], batch.context.reset[e])
            counts[e] += 1
    assert len(unique) == cfg.update_epochs * cfg.num_minibatches
    np.testing.assert_array_equal(counts, cfg.update_epochs)  # every env once per epoch


def test_determinism_and_vmap_over_seeds_and_stacked_configs():
    ppo = make_ppo(SMALL)
    as_arrays = lambda c: jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), c)
    cfgs = [SMALL.replace(lr=1e-3, clip_eps=0.1), SMALL.replace(lr=3e-4, gamma=0.9)]
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    train = jax.jit(ppo.train)  # one compile: numeric config fields are traced leaves
    single = [_np(train(k, as_arrays(c))[1]) for k, c in zip(keys, cfgs)]
    again = _np(train(keys[0], as_arrays(cfgs[0]))[1])
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
    assert expected <= set(again) and all(v.shape == (SMALL.num_updates,) for v in again.values())
    for k in again:
        np.testing.assert_array_equal(again[k], single[0][k], err_msg=k)  # exact: one executable, same inputs twice
    assert not np.array_equal(single[0]["actor_loss"], single[1]["actor_loss"])
    # vmap over seeds AND stacked configs at once equals the separate runs
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *map(as_arrays, cfgs))
    batched = _np(jax.jit(jax.vmap(ppo.train))(keys, stacked)[1])
    for i in range(2):
        for k in single[i]:
            # tolerance: vmapped and single are two programs (a few float32 roundings over the run)
            np.testing.assert_allclose(batched[k][i], single[i][k], rtol=2e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(batched["lr"][:, 0], [1e-3, 3e-4], rtol=1e-6)


def test_options_continuous_target_kl_batch_norm_no_value_clip_critic_lr():
    cfg = SMALL.replace(
        env_name="Pendulum-v1",
        max_episode_steps=20,
        target_kl=1e-4,
        adv_norm="batch",
        clip_value=False,
        anneal_lr=False,
        activation="relu",
        hidden_sizes=(8, 8),
        lr=3e-3,
        critic_lr=1e-3,
        update_epochs=4,
    )
    m = _np(jax.jit(make_ppo(cfg).train)(jax.random.PRNGKey(0))[1])
    for k, v in m.items():
        assert np.all(np.isfinite(v)) or k in ("episode_return", "episode_length"), k
    # target-KL early stopping skips minibatches; the first one is always taken (KL 0 there)
    assert np.all(m["minibatches_taken"] >= 1) and np.any(m["minibatches_taken"] < 8)
    np.testing.assert_allclose(m["lr"], 3e-3, rtol=1e-6)
    np.testing.assert_allclose(m["critic_lr"], 1e-3, rtol=1e-6)
    with pytest.raises(ConfigError, match="num_envs"):
        make_ppo(SMALL.replace(num_envs=6, num_minibatches=4, num_steps=32))


@pytest.mark.slow
@pytest.mark.optimised  # a learning check: its time is run time
def test_gru_beats_mlp_on_position_only_cartpole():
    """A GRU can infer the hidden velocities; a reactive MLP cannot. Same budget, 2 seeds each."""
    base = PPOConfig(
        env_name="CartPole-v1",
        obs_keep=(0, 2),
        num_envs=16,
        num_steps=64,
        total_timesteps=16 * 64 * 50,
        update_epochs=4,
        num_minibatches=4,
        lr=3e-3,
        hidden_sizes=(32,),
        gru_size=32,
        ent_coef=0.01,
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    final = {}
    for net in ("gru", "mlp"):
        ret = np.asarray(jax.jit(jax.vmap(make_ppo(base.replace(network=net)).train))(keys)[1]["episode_return"])
        final[net] = np.nanmean(ret[:, -10:], axis=1)  # per seed, last 10 updates
    # measured: GRU ~150-200, MLP ~48 (its ceiling without velocities is low)
    assert final["gru"].min() > final["mlp"].max() + 40, final
