"""Evaluation under jit: known returns, mode vs sampling, recurrent policies, obs statistics, GIF, plots."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.stages.distributions import CATEGORICAL
from purejaxppo.step.evaluate import episode_states, find_obs_stats, make_evaluator, save_gif, summarize
from purejaxppo.agents.agent import feed_forward
from purejaxppo.agents.networks import Network


def _constant_policy(logits):
    """An agent whose actor ignores the observation and returns fixed logits."""
    logits = jnp.asarray(logits, jnp.float32)
    actor = lambda params, obs: jnp.broadcast_to(logits + 0 * params["b"], obs.shape[:-1] + logits.shape)
    critic = lambda params, obs: jnp.zeros(obs.shape[:-1])
    return feed_forward(
        Network(lambda k: {"b": jnp.zeros(())}, actor, critic, lambda p, o: (actor(p, o), critic(p, o)), CATEGORICAL)
    )


def test_mountain_car_returns_are_minus_the_time_limit():
    # -1 per step and always pushing right cannot reach the goal in 50 steps: return is exactly -50
    cfg = PPOConfig(env_name="MountainCar-v0", max_episode_steps=50)
    agent = _constant_policy([-5.0, -5.0, 5.0])
    ret, length = make_evaluator(cfg, agent, num_episodes=7)(jax.random.PRNGKey(0), {"b": jnp.zeros((2,))})
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
    np.testing.assert_array_equal(
        det_flat, det_left
    )  # exact: the same actions, so the same integer lengths; mode of both is action 0
    assert det_left.max() <= 12  # always pushing left, the pole falls within a few steps
    sto, _ = make_evaluator(cfg, flat, 64, deterministic=False)(key, params)
    assert np.mean(sto) > np.mean(det_flat) + 5  # a random policy balances longer (~22 steps)


def _gru(cfg):
    """``(agent, network)``: the agent training builds for ``cfg``, and its GRU network built
    on its own for the reference loop (same module, so the same params fit both)."""
    from purejaxppo.agents.recurrent import make_recurrent_network
    from purejaxppo.step.train import make_agent, make_env

    spec = make_env(cfg).spec
    return make_agent(cfg, spec), make_recurrent_network(spec, cfg.gru_size, cfg.hidden_sizes, cfg.activation)


def _gru_loop(cfg, net, params, key, num_episodes, deterministic, memory=True):
    """Reference for the jitted GRU evaluator: a plain Python loop over single steps with
    the evaluator's keys, the GRU carry zeroed by hand after each copy's episode end (or,
    ``memory=False``, before every step) and returns summed here. ``([S, N], [S, N])``."""
    from purejaxppo.step.train import make_env

    venv = make_env(cfg.replace(num_envs=num_episodes))
    env_step, gru_step = jax.jit(venv.step), jax.jit(net.step)
    no_reset = np.zeros(num_episodes, bool)  # the loop resets the carry itself
    rets, lens = [], []
    for s, k_seed in enumerate(jax.random.split(key, jax.tree.leaves(params)[0].shape[0])):
        p = jax.tree.map(lambda x: x[s], params)
        k_reset, k_run = jax.random.split(k_seed)
        obs, state = venv.reset(k_reset)
        carry = np.zeros((num_episodes, cfg.gru_size), np.float32)
        done = np.ones(num_episodes, bool)  # "the previous step ended an episode" before the first step
        total, steps = np.zeros(num_episodes, np.float32), np.zeros(num_episodes, np.int32)
        first_ret, first_len = np.full(num_episodes, np.nan, np.float32), np.zeros(num_episodes, np.int32)
        for k in jax.random.split(k_run, venv.spec.max_episode_steps):
            k_act, k_env = jax.random.split(k)
            carry = np.where((done if memory else ~no_reset)[:, None], 0.0, carry)
            carry, dist_params, _ = gru_step(p, carry, obs, no_reset)
            action = net.dist.mode(dist_params) if deterministic else net.dist.sample(k_act, dist_params)
            obs, state, reward, term, trunc, _ = env_step(k_env, state, action)
            done = np.asarray(term | trunc)
            total, steps = total + np.asarray(reward, np.float32), steps + 1
            ended = done & np.isnan(first_ret)
            first_ret[ended], first_len[ended] = total[ended], steps[ended]
            total, steps = np.where(done, 0, total).astype(np.float32), np.where(done, 0, steps)
        rets.append(first_ret)
        lens.append(first_len)
    return np.stack(rets), np.stack(lens)


@pytest.mark.slow
@pytest.mark.parametrize("env_name,deterministic,limit", [("CartPole-v1", True, 30), ("Pendulum-v1", False, 12)])
def test_gru_evaluator_equals_a_step_by_step_loop(env_name, deterministic, limit):
    # short time limits; CartPole copies also terminate early, at different steps
    cfg = PPOConfig(env_name=env_name, network="gru", gru_size=8, hidden_sizes=(16,), max_episode_steps=limit)
    agent, net = _gru(cfg)
    params = jax.vmap(agent.init)(jax.random.split(jax.random.PRNGKey(0), 2))
    key = jax.random.PRNGKey(5)
    ret, length = make_evaluator(cfg, agent, 6, deterministic)(key, params)
    want_ret, want_len = _gru_loop(cfg, net, params, key, 6, deterministic)
    assert ret.shape == (2, 6) and np.all(np.isfinite(want_ret))
    np.testing.assert_allclose(ret, want_ret, rtol=1e-5)
    np.testing.assert_array_equal(length, want_len)
    # sensitivity: without the carry (memoryless GRU) the returns differ, so the carry is used
    forgetful, _ = _gru_loop(cfg, net, params, key, 6, deterministic, memory=False)
    assert not np.allclose(ret, forgetful, rtol=1e-5)


@pytest.mark.slow
def test_cli_eval_of_a_gru_run(tmp_path, capsys, monkeypatch):
    from purejaxppo.cli import main

    run = str(tmp_path / "gru")
    tiny = [
        "--env",
        "MemoryChain-bsuite",
        "--network",
        "gru",
        "--gru-size",
        "8",
        "--num-envs",
        "4",
        "--num-steps",
        "8",
        "--total-timesteps",
        str(4 * 8 * 2),
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--seeds",
        "2",
        "--devices",
        "1",
        "--run-dir",
        run,
        "--quiet",
    ]
    assert main(["train", *tiny]) == 0
    capsys.readouterr()
    assert main(["eval", run, "--episodes", "3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["episodes"] == 6 and s["update"] == 2
    assert all(np.isfinite([s["mean"], s["std"], s["min"], s["max"], s["mean_length"], *s["per_seed_mean"]]))
    # MemoryChain cannot be drawn by gymnax: --gif fails at once, before any evaluation work
    import purejaxppo.step.evaluate as evaluate

    def no_eval(*a, **k):
        raise AssertionError("evaluation ran before the --gif check")

    monkeypatch.setattr(evaluate, "evaluate_runner", no_eval)
    assert main(["eval", run, "--gif", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err
    assert "cannot render MemoryChain-bsuite" in err and "Traceback" not in err, err


def test_find_obs_stats_and_summary():
    from purejaxppo.stages.normalize import ObsNormState, init_stats

    stats = init_stats((3,))
    state = ObsNormState(("inner", 1), stats)
    assert find_obs_stats(state) is stats and find_obs_stats(("a", (1, 2))) is None
    s = summarize(np.array([[1.0, 3.0], [np.nan, 5.0]]))
    assert (s["episodes"], s["mean"], s["min"], s["max"]) == (3, 3.0, 1.0, 5.0)
    assert s["per_seed_mean"] == [2.0, 5.0]


def test_gif_has_one_frame_per_step(tmp_path):
    cfg = PPOConfig(env_name="CartPole-v1")
    agent = _constant_policy([3.0, -3.0])
    key = jax.random.PRNGKey(0)
    _, _, seq, cum = episode_states(cfg, agent, {"b": jnp.zeros(())}, key)
    assert len(seq) == len(cum) and cum == list(range(1, len(seq) + 1))  # CartPole: +1 per step
    out = str(tmp_path / "ep.gif")
    assert save_gif(out, cfg, agent, {"b": jnp.zeros(())}, key) == len(seq)
    with open(out, "rb") as f:
        assert f.read(4) == b"GIF8"


def test_gru_episode_states_play_one_episode():
    cfg = PPOConfig(env_name="CartPole-v1", network="gru", gru_size=8, hidden_sizes=(16,))
    agent, _ = _gru(cfg)
    _, _, seq, cum = episode_states(cfg, agent, agent.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    assert 1 <= len(seq) == len(cum) and cum == list(range(1, len(seq) + 1))


def test_plot_draws_mean_and_band(tmp_path):
    from purejaxppo.cli.curve_stats import ffill
    from purejaxppo.cli.curves import load_curves
    from purejaxppo.cli.plot import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    rows = ["seed,update,env_steps,episode_return"]
    for s in range(2):
        for u in range(4):
            rows.append(f"{s},{u},{(u + 1) * 10},{'nan' if u == 1 else s * 10 + u}")
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    (c,) = load_curves(str(run))
    np.testing.assert_array_equal(c.env_steps, [10, 20, 30, 40])
    np.testing.assert_array_equal(ffill(c.values), [[0, 0, 2, 3], [10, 10, 12, 13]])
    out = plot_runs([str(run)], str(tmp_path / "c.png"))
    assert os.path.getsize(out) > 1000
    with pytest.raises(KeyError, match="no metric 'nope'"):
        load_curves(str(run), "nope")
