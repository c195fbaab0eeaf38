"""IPPO and MAPPO on JaxMARL through the one training step (skipped without the ``[marl]`` extra).

* IPPO is the single-agent step fed the folded batch: training on ``jaxmarl:NAME`` equals
  training on a VecEnv written here from JaxMARL's OWN ``step`` (its auto-reset, its dict API,
  agents stacked by hand) under ``bootstrap_truncated=False``, where the final observation
  JaxMARL drops is never read.
* MAPPO's critic reads the global state alone, and the value a truncation bootstraps from is
  that of the FINAL global state, built here by hand from the agents' final observations.
* Masked actions are never sampled (SMAX: dead agents and enemies out of range).
* A resumed run equals the uninterrupted one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jaxmarl", reason="the [marl] extra (jaxmarl) is not installed")

from _equality import STATE_TOL, assert_same_state  # noqa: E402

from purejaxppo import PPOConfig, make_ppo  # noqa: E402
from purejaxppo.agents.networks import make_network  # noqa: E402
from purejaxppo.agents.recurrent import make_recurrent_network  # noqa: E402
from purejaxppo.envs import episode_statistics, jaxmarl_suite  # noqa: E402
from purejaxppo.envs.core import VecEnv  # noqa: E402
from purejaxppo.envs.observation import CriticObs  # noqa: E402
from purejaxppo.step.device_split import DeviceSplit  # noqa: E402
from purejaxppo.step.phases import StepParts, collect_rollout, ppo_loss_fn  # noqa: E402

MPE = "MPE_simple_spread_v3"


def _jaxmarl_step_venv(name, rows, spec):
    """A VecEnv over JaxMARL's own ``reset``/``step`` (which resets inside itself): rows
    ``e*N + i`` stacked by hand; the per-env keys are the first agent row's of the split."""
    env = jaxmarl_suite._make(name, {})
    agents, n = env.agents, len(env.agents)
    e = rows // n

    def stack(d):
        return jnp.stack([d[a] for a in agents], axis=1).reshape((rows,) + d[agents[0]].shape[1:])

    def reset(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, rows)[::n])
        return stack(obs), state

    def step(key, state, action):
        act = action.reshape(e, n)
        obs, state, reward, dones, _ = jax.vmap(env.step)(
            jax.random.split(key, rows)[::n], state, {a: act[:, i] for i, a in enumerate(agents)}
        )
        done = jnp.repeat(dones["__all__"], n)
        obs = stack(obs)
        return obs, state, stack(reward), done, jnp.zeros_like(done), {"final_observation": obs}

    return VecEnv(spec, rows, reset, step)


@pytest.mark.slow  # ~35 s: two programs of 3 updates each
def test_ippo_equals_the_step_on_jaxmarls_own_step_folded_by_hand():
    cfg = PPOConfig(
        env_name=f"jaxmarl:{MPE}",
        num_envs=6,
        num_steps=13,
        total_timesteps=6 * 13 * 3,
        num_minibatches=2,
        bootstrap_truncated=False,
    )
    ours = make_ppo(cfg)
    theirs = make_ppo(cfg, venv=episode_statistics(_jaxmarl_step_venv(MPE, 6, ours.venv.spec)))
    key = jax.random.PRNGKey(4)
    a, ma = jax.jit(ours.train)(key)
    b, mb = jax.jit(theirs.train)(key)
    # 3 updates over 39 steps: the 26-step episodes end once, at the end of the 2nd rollout
    assert int(np.asarray(ma["episodes"]).sum()) == 6
    for x, y in zip(jax.tree.leaves(a.train.params), jax.tree.leaves(b.train.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **STATE_TOL)
    np.testing.assert_allclose(np.asarray(ma["episode_return"][1]), np.asarray(mb["episode_return"][1]), rtol=1e-5)


def _rollout(cfg, key):
    ppo = make_ppo(cfg)
    runner = ppo.init(key)
    parts = StepParts(cfg, ppo.venv, ppo.agent, ppo_loss_fn, DeviceSplit(None, 1, cfg.num_envs, cfg.num_envs))
    params = runner.train.params
    _, traj = jax.jit(lambda p, r, k: collect_rollout(parts, p, r, k))(params, runner, key)
    return ppo, params, traj


def _actor_critic(network, cfg, spec):
    """``(actor(params, obs), critic(params, obs))`` of the agent's network, built again here."""
    if network == "mlp":
        net = make_network(spec, cfg.hidden_sizes, cfg.activation)
        return net.actor, net.critic
    rnet = make_recurrent_network(spec, cfg.gru_size, cfg.hidden_sizes, cfg.activation)
    one = lambda p, o: rnet.step(p, rnet.initial_carry(o.obs.shape[0]), o, jnp.ones(o.obs.shape[0], bool))
    return (lambda p, o: one(p, o)[1]), (lambda p, o: one(p, o)[2])


@pytest.mark.parametrize("network", ["mlp", "gru"])
def test_mappo_critic_reads_the_global_state_and_bootstraps_from_the_final_one(network):
    cfg = PPOConfig(
        env_name=f"jaxmarl:{MPE}",
        num_envs=3,
        num_steps=30,
        total_timesteps=90,
        num_minibatches=1,
        agent_critic="centralised",
        network=network,
        gru_size=16,
    )
    ppo, params, traj = _rollout(cfg, jax.random.PRNGKey(0))
    actor, critic = _actor_critic(network, cfg, ppo.venv.spec)
    obs0 = jax.tree.map(lambda x: x[0], traj.obs)
    # the critic reads the global state alone; the actor the agent's own observation alone
    noise = jnp.full_like(obs0.obs, 3.0)
    np.testing.assert_array_equal(critic(params, CriticObs(noise, obs0.global_state)), critic(params, obs0))
    np.testing.assert_array_equal(actor(params, CriticObs(obs0.obs, obs0.global_state * 0 + 5)), actor(params, obs0))
    assert not np.allclose(critic(params, CriticObs(obs0.obs, obs0.global_state + 1)), critic(params, obs0))
    # MPE episodes end by truncation at step 26 (t = 25): V(s'_25) is the FINAL global state's value
    _, next_values = ppo.agent.values(params, traj)
    t = 25
    assert np.all(np.asarray(traj.truncated[t])) and not np.any(np.asarray(traj.truncated[:t]))
    final = np.asarray(traj.next_obs.obs[t])  # the agents' final observations [3, 18]
    by_hand = np.stack([np.concatenate([final.reshape(-1), np.eye(3)[j]]) for j in range(3)])
    expect = critic(params, CriticObs(jnp.asarray(final), jnp.asarray(by_hand)))
    np.testing.assert_allclose(np.asarray(next_values[t]), np.asarray(expect), rtol=1e-6, atol=1e-6)
    restart = critic(params, jax.tree.map(lambda x: x[t + 1], traj.obs))  # the next episode's first state
    assert not np.allclose(np.asarray(next_values[t]), np.asarray(restart))


def test_masked_actions_are_never_sampled():
    cfg = PPOConfig(env_name="jaxmarl:3m", num_envs=6, num_steps=48, total_timesteps=6 * 48, num_minibatches=2)
    _, _, traj = _rollout(cfg, jax.random.PRNGKey(1))
    mask = np.asarray(traj.obs.action_mask)  # [H, E, A]
    action = np.asarray(traj.action)
    assert mask.mean() < 0.7  # many illegal actions to avoid (dead agents, enemies out of range)
    assert np.all(np.take_along_axis(mask, action[..., None], axis=-1))


def test_gru_resume_equals_uninterrupted(tmp_path):
    from purejaxppo.programs.runs import resume_run, train_chunked

    cfg = PPOConfig(
        env_name=f"jaxmarl:{MPE}",
        num_envs=6,
        num_steps=16,
        total_timesteps=6 * 16 * 4,
        num_minibatches=2,
        network="gru",
        gru_size=16,
        hidden_sizes=(16,),
        agent_ids=True,
    )
    ref = train_chunked(cfg, seed=2, num_seeds=2, chunk_updates=2)
    run = str(tmp_path / "run")
    part = train_chunked(cfg, seed=2, num_seeds=2, run_dir=run, chunk_updates=2, stop_after=2)
    assert not part.finished
    res = resume_run(run)
    assert res.finished
    assert_same_state(jax.device_get(ref.runner_state), jax.device_get(res.runner_state))
    n = np.asarray(res.metrics["episode_return"]).shape[1]
    np.testing.assert_array_equal(
        np.asarray(res.metrics["episode_return"]), np.asarray(ref.metrics["episode_return"])[:, -n:]
    )


@pytest.mark.slow  # a subprocess with 4 forced host devices
def test_mappo_split_over_two_devices_equals_one():
    from _multidevice import run_worker

    r = run_worker("split_envs:marl")  # tolerance: 1 vs 2 devices (pmean'd gradients), as the single-agent split
    assert r["marl_mappo_metrics"] < 1e-4 and r["marl_mappo_params"] < 1e-5 and r["marl_mappo_obs"] < 1e-5, r


def test_observation_normaliser_keeps_masks_and_normalises_the_global_state():
    from purejaxppo.stages.normalize import apply_obs_stats, init_obs_stats, update_obs_stats

    cfg = PPOConfig(env_name="jaxmarl:3m", num_envs=6, agent_critic="centralised")
    ppo = make_ppo(cfg)
    obs, _ = ppo.venv.reset(jax.random.PRNGKey(0))
    stats = update_obs_stats(init_obs_stats(obs), obs)
    out = apply_obs_stats(stats, obs)
    np.testing.assert_array_equal(np.asarray(out.obs.action_mask), np.asarray(obs.obs.action_mask))  # kept bool
    g = np.asarray(obs.global_state, np.float64)
    expect = np.clip((g - g.mean(0)) / np.sqrt(g.var(0) + 1e-8), -10, 10)  # numpy: mean/var over the 6 rows
    np.testing.assert_allclose(np.asarray(out.global_state), expect, rtol=1e-3, atol=1e-3)


def test_eval_plays_team_episodes_and_reports_each_team_return_once():
    """``eval --episodes K`` on a JaxMARL env: K envs of N agent rows, K team returns (any K, not only
    multiples of N); each equals the sum over the episode and the agents of the rewards, stepped here
    by hand with the mode action (MPE: every episode lasts 26 steps)."""
    from purejaxppo.step.evaluate import make_episodes
    from purejaxppo.step.train import make_env

    cfg = PPOConfig(env_name=f"jaxmarl:{MPE}", num_envs=6, num_steps=8, hidden_sizes=(8,))
    ppo = make_ppo(cfg)
    params = ppo.agent.init(jax.random.PRNGKey(3))
    key = jax.random.PRNGKey(4)
    ret, length = jax.jit(make_episodes(cfg, ppo.agent, 2))(key, params)
    assert ret.shape == length.shape == (2,)
    np.testing.assert_array_equal(np.asarray(length), [26, 26])
    venv = make_env(cfg)  # 6 rows = the 2 envs eval plays, same keys
    k_reset, k_run = jax.random.split(key)
    obs, state = venv.reset(k_reset)
    total = np.zeros(6)
    for k in jax.random.split(k_run, 26):
        _, dist_params, _ = ppo.agent.act(params, (), obs, jnp.zeros(6, bool))
        obs, state, reward, *_ = venv.step(jax.random.split(k)[1], state, ppo.agent.dist.mode(dist_params))
        total += np.asarray(reward)
    np.testing.assert_allclose(np.asarray(ret), total.reshape(2, 3).sum(1), rtol=1e-5)
