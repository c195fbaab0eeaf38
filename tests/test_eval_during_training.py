"""Evaluation during training (``--eval-every N --eval-episodes K``).

The evaluations in ``metrics.csv`` are checked against a hand evaluation of the checkpointed
params of the same update (``evaluate.make_episodes`` called per run, with the key derived by
hand from the run's seed key); the training numbers and the whole final state must be
bit-identical to the same run without evaluation (its keys never come from training's stream).
GRU agents and observation statistics: the compiled evaluation against the same hand path.
"""

import json
import os

import jax
import numpy as np
import pytest

import purejaxppo.cli.plot as plot_mod
from purejaxppo.run.checkpoint import list_checkpoints
from purejaxppo.cli import main
from purejaxppo.step.evaluate import make_episodes
from purejaxppo.run.run_folder import load_run, read_metrics

# test_cli.py's sweep (2 members x 2 seeds, 6 updates in chunks of 2: the same compiled training
# chunk, shared through the session's compile cache)
SWEEP = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "4",
    "--num-steps",
    "16",
    "--total-timesteps",
    str(4 * 16 * 6),
    "--update-epochs",
    "1",
    "--num-minibatches",
    "2",
    "--seeds",
    "2",
    "--devices",
    "1",
    "--chunk",
    "2",
    "--quiet",
    "--sweep",
    "lr=1e-3,3e-3",
]
K = 3


def eval_key(seed_key, update):
    return jax.random.fold_in(jax.random.fold_in(seed_key, 0xE7A1), update)


def hand_eval(play, params, stats, seed_keys, update):
    """``[R]``: run ``r`` plays ``play`` (``evaluate.make_episodes``) with its own params,
    statistics and key fold_in(fold_in(its seed key, 0xE7A1), update); mean finished return."""
    out = []
    params, stats = jax.device_get((params, stats))  # sliced in NumPy, not by one compiled op per slice
    for r in range(len(seed_keys)):
        one = lambda tree: None if tree is None else jax.tree.map(lambda x: x[r], tree)
        ret = np.asarray(play(eval_key(seed_keys[r], update), one(params), one(stats))[0])
        out.append(ret[np.isfinite(ret)].mean())
    return np.array(out)


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaltrain")
    with_eval, without = str(root / "with"), str(root / "without")
    assert (
        main(
            [
                "train",
                *SWEEP,
                "--eval-every",
                "2",
                "--eval-episodes",
                str(K),
                "--checkpoint-every",
                "1",
                "--run-dir",
                with_eval,
            ]
        )
        == 0
    )
    assert main(["train", *SWEEP, "--run-dir", without]) == 0
    return with_eval, without


def test_training_is_bit_identical_with_and_without_evaluation(sweep_runs):
    with_eval, without = sweep_runs
    a, b = read_metrics(with_eval), read_metrics(without)
    assert set(a) - set(b) == {"eval_return", "eval_episodes"}
    for k in b:  # exact: both runs go through the same training chunks (6 updates in 2s); evaluation is apart
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    sa, sb = load_run(with_eval)[2], load_run(without)[2]  # final state: params, env states, PRNG keys
    for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # exact: same chunks, same state
    info = json.load(open(os.path.join(with_eval, "config.json")))
    assert info["eval_every"] == 2 and info["eval_episodes"] == K


def test_eval_returns_equal_a_hand_evaluation(sweep_runs):
    with_eval, _ = sweep_runs
    m = read_metrics(with_eval)
    ret, count = m["eval_return"], m["eval_episodes"]  # [R=4, U=6]
    assert np.isnan(ret[:, 0::2]).all() and np.isnan(count[:, 0::2]).all()  # only after updates 2, 4, 6
    np.testing.assert_array_equal(count[:, 1::2], K)  # exact: episode counts
    seed_keys = np.tile(np.asarray(jax.random.split(jax.random.PRNGKey(0), 2)), (2, 1))  # run m*S+s: seed key s
    checkpoints = dict(list_checkpoints(os.path.join(with_eval, "checkpoints")))
    play = None
    for update in (4, 6):  # the two checkpoints kept
        config, _, runner, ppo = load_run(with_eval, checkpoints[update])
        play = play or jax.jit(make_episodes(config, ppo.agent, K))
        want = hand_eval(play, runner.train.params, None, seed_keys, update)
        # tolerance: the compiled evaluation over runs vs one run at a time are two programs (the
        # returns are sums of CartPole's 1s, so only the float mean over episodes can round differently)
        np.testing.assert_allclose(ret[:, update - 1], want, rtol=1e-6, err_msg=f"update {update}")
    assert not np.allclose(ret[:, 3], ret[:, 5])  # sensitivity: the params (or keys) of each update are used


def test_gru_with_observation_normalisation():
    """The compiled evaluation over runs of a GRU agent with running observation statistics,
    against the same params played one run at a time with the statistics given by hand."""
    from purejaxppo import PPOConfig
    from purejaxppo.programs.eval_program import EvalProgram
    from purejaxppo.stages.normalize import ObsNormState, RunningStats
    from purejaxppo.step.train import RunnerState, make_agent, make_env
    from purejaxppo.stages.update import TrainState

    cfg = PPOConfig(
        env_name="CartPole-v1",
        network="gru",
        gru_size=8,
        hidden_sizes=(8,),
        num_envs=2,
        num_steps=4,
        num_minibatches=1,
        total_timesteps=2 * 4 * 3,
        normalize_obs=True,
    )
    agent = make_agent(cfg, make_env(cfg).spec)
    seed_keys = jax.random.split(jax.random.PRNGKey(3), 2)
    rng = np.random.default_rng(4)  # random params of the agent's shapes (no init to compile)
    shapes = jax.eval_shape(jax.vmap(agent.init), seed_keys)
    params = jax.tree.map(lambda x: (0.5 * rng.normal(size=x.shape)).astype(x.dtype), shapes)
    stats = RunningStats(
        np.full((2,), 100.0, np.float32),
        (0.3 * rng.normal(size=(2, 4))).astype(np.float32),
        rng.uniform(0.05, 2.0, size=(2, 4)).astype(np.float32),
    )
    runner = RunnerState(TrainState(params, ()), ObsNormState((), stats), None, None, None)  # what evaluation reads
    got = EvalProgram(cfg, agent, every=1, episodes=4)(seed_keys, 3, runner)
    play = jax.jit(make_episodes(cfg, agent, 4))
    want = hand_eval(play, params, stats, seed_keys, 3)
    np.testing.assert_allclose(got["eval_return"], want, rtol=1e-6)  # tolerance: two programs (sums of 1s, then a mean)
    np.testing.assert_array_equal(got["eval_episodes"], 4)  # exact: a count
    # sensitivity: with identity statistics (raw observations) the greedy returns differ
    identity = stats._replace(mean=np.zeros_like(stats.mean), var=np.ones_like(stats.var))
    assert not np.allclose(hand_eval(play, params, identity, seed_keys, 3), want)


def test_plot_draws_the_evaluation(sweep_runs, tmp_path, monkeypatch):
    with_eval, _ = sweep_runs
    drawn, draw = [], plot_mod._draw
    monkeypatch.setattr(
        plot_mod,
        "_draw",
        lambda ax, x, v, label, *a, **k: drawn.append((label, x, v)) or draw(ax, x, v, label, *a, **k),
    )
    out = plot_mod.plot_runs([with_eval], str(tmp_path / "c.png"))
    assert os.path.getsize(out) > 1000
    evals = [(x, v) for label, x, v in drawn if "greedy eval" in label]
    assert len(evals) == 2  # one per member
    m = read_metrics(with_eval)
    x, v = evals[1]  # member 1: runs 2, 3
    keep = np.isfinite(v).any(0)
    np.testing.assert_array_equal(
        x[keep], [2 * 64, 4 * 64, 6 * 64]
    )  # exact: integer env steps per run after updates 2, 4, 6
    np.testing.assert_array_equal(v, m["eval_return"][2:4])  # exact: the plot draws the file's numbers
    assert main(["plot", with_eval, "--metric", "eval_return", "-o", str(tmp_path / "e.png")]) == 0


def test_progress_bar_shows_the_latest_evaluation(capsys):
    from purejaxppo.run.progress import progress_bar

    on_chunk, close = progress_bar(False, "x")
    info = {
        "updates": 2,
        "num_updates": 4,
        "env_steps": 128,
        "steps_per_s": 1.0,
        "compile_s": 0.0,
        "metrics": {"episode_return": np.array([[10.0], [20.0]])},
    }  # what the chunk loop passes
    on_chunk(dict(info, evaluated={"eval_return": np.array([30.0, 50.0])}))
    on_chunk(dict(info, updates=3, evaluated=None))  # kept until the next evaluation
    close()
    assert "eval 40.0" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--eval-every", "0"], "--eval-every=0 must be >= 1"),
        (["--eval-every", "2", "--eval-episodes", "0"], "--eval-episodes=0 must be >= 1"),
        (["--eval-every", "2", "--eval-episodes", "100001"], "--eval-episodes=100001 must be between 1 and 100,000"),
        (["--eval-episodes", "5"], "--eval-episodes needs --eval-every"),
        (["--eval-every", "5"], "more than the run's 4 updates"),
        # PBT evaluates during training too (tests/test_pbt_options.py); its flags get the same checks
        (["--eval-every", "5", "--pbt", "2", "--search", "lr=loguniform:1e-5:1e-2"], "more than the run's 4 updates"),
    ],
)
def test_bad_eval_flags_exit_2_before_any_work(argv, needle, tmp_path, capsys):
    run = str(tmp_path / "r")
    tiny = [
        "--env",
        "CartPole-v1",
        "--num-envs",
        "4",
        "--num-steps",
        "16",
        "--total-timesteps",
        str(4 * 16 * 4),
        "--devices",
        "1",
        "--quiet",
        "--run-dir",
        run,
    ]
    assert main(["train", *tiny, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err, err
    assert not os.path.exists(run)


def test_resume_keeps_the_runs_evaluation_settings(sweep_runs, capsys):
    with_eval, _ = sweep_runs
    assert main(["train", "--resume", with_eval, "--eval-every", "1"]) == 2
    assert "--eval-every" in capsys.readouterr().err


def test_library_resume_with_other_evaluation_settings_is_refused(sweep_runs):
    from purejaxppo.config import ConfigError
    from purejaxppo.programs.runs import resume_run

    with_eval, without = sweep_runs
    with pytest.raises(ConfigError, match="eval_every=2"):
        resume_run(with_eval, eval_every=None)
    with pytest.raises(ConfigError, match="eval_every=None"):
        resume_run(without, eval_every=3)
