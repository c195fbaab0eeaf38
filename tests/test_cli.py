"""CLI: train / interrupt / resume / eval / plot, and user errors without tracebacks."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo.run.sinks as sinks
from purejaxppo import PPOConfig, make_ppo
from purejaxppo.cli import main
from purejaxppo.run.run_folder import load_run, read_metrics

from _equality import METRIC_TOL, assert_close_metrics, assert_close_state, assert_same_state

# the CLI's promises (bitwise-equal resumes, sweeps equal to one call) hold at the optimisation users get
pytestmark = pytest.mark.optimised

TINY = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "4",
    "--num-steps",
    "32",
    "--total-timesteps",
    str(4 * 32 * 8),
    "--update-epochs",
    "2",
    "--num-minibatches",
    "2",
    "--seeds",
    "2",
    "--devices",
    "1",
    "--chunk",
    "2",
    "--quiet",
]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("cli") / "straight")
    assert main(["train", *TINY, "--run-dir", run]) == 0
    return run


def test_interrupted_run_resumes_to_identical_metrics(straight, tmp_path, monkeypatch, capsys):
    run = str(tmp_path / "run")
    calls = {"n": 0}
    original = sinks.CSVLogger.write

    def write_then_interrupt(self, metrics, first_update):
        calls["n"] += 1
        if calls["n"] == 3:  # Ctrl-C while the 3rd chunk's rows are being written
            raise KeyboardInterrupt
        return original(self, metrics, first_update)

    monkeypatch.setattr(sinks.CSVLogger, "write", write_then_interrupt)
    assert main(["train", *TINY, "--run-dir", run]) == 130
    err = capsys.readouterr().err
    assert "update_00000004" in err and f"--resume {run}" in err and "Traceback" not in err
    monkeypatch.undo()
    assert main(["train", "--resume", run, "--quiet"]) == 0
    # exact: the same command's chunks (--chunk 2) on the restored state
    assert open(os.path.join(run, "metrics.csv")).read() == open(os.path.join(straight, "metrics.csv")).read()


def test_eval_and_plot(straight, tmp_path, capsys):
    assert main(["eval", straight, "--episodes", "5", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["episodes"] == 10 and s["update"] == 8 and s["min"] <= s["mean"] <= s["max"]
    assert main(["eval", straight, "--episodes", "5"]) == 0
    out = capsys.readouterr().out
    assert "mean" in out and "std" in out and "min" in out and "max" in out
    png = str(tmp_path / "c.png")
    assert main(["plot", straight, straight, "-o", png]) == 0 and os.path.getsize(png) > 1000


def test_eval_gymnax_blines_protocol(straight, capsys, monkeypatch):
    """gymnax-blines' batch_evaluate: 164 episodes per seed with sampled actions. The evaluator
    is stubbed (its sampled and mode policies are tested in test_evaluate.py): this checks what
    the protocol asks of it."""
    import purejaxppo.step.evaluate as evaluate

    calls = []

    def fake(config, agent, runner, key, num_episodes, deterministic):
        calls.append((num_episodes, deterministic))
        return np.full((2, num_episodes), -3.0), np.ones((2, num_episodes), np.int32)

    monkeypatch.setattr(evaluate, "evaluate_runner", fake)
    assert main(["eval", straight, "--protocol", "gymnax-blines", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert calls == [(164, False)]
    assert (s["protocol"], s["episodes_per_seed"], s["episodes"], s["policy"]) == (
        "gymnax-blines",
        164,
        328,
        "stochastic",
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "--resume", "/nonexistent/run"], "does not exist"),
        (["eval", "/nonexistent/run"], "does not exist"),
        (["plot", "/nonexistent/run"], "no metrics.csv"),
        (["train", "--resume", "RUN", "--lr", "0.1"], "--lr"),
        (["train", "--seeds", "0"], "--seeds"),
        (["train", "--seeds", "2", "--devices", "3"], "--devices"),
        (["eval", "RUN", "--episodes", "0"], "--episodes"),
        (["plot", "RUN", "--metric", "nope"], "no metric 'nope'"),
        (["train", "--run-dir", "RUN"], "already holds a run"),
    ],
)
def test_user_errors_exit_2_with_message(argv, needle, straight, capsys):
    argv = [straight if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


def test_resume_with_a_changed_config_is_refused(straight, tmp_path, capsys):
    import shutil

    run = str(tmp_path / "copy")
    shutil.copytree(straight, run)
    info = json.load(open(os.path.join(run, "config.json")))
    info["config"]["hidden_sizes"] = [32, 32]
    json.dump(info, open(os.path.join(run, "config.json"), "w"))
    assert main(["train", "--resume", run, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "hidden_sizes" in err and "different setup" in err and "Traceback" not in err


def test_bad_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval"])
    assert e.value.code == 2 and "RUN_DIR" in capsys.readouterr().err


def test_more_devices_than_xla_flags_force_is_a_user_error():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    out = subprocess.run(
        [sys.executable, "-m", "purejaxppo", "train", "--seeds", "2", "--devices", "2", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "XLA_FLAGS forces 1 host device" in out.stderr and "Traceback" not in out.stderr, out.stderr


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


@pytest.mark.slow
def test_sweep_stopped_and_resumed_equals_uninterrupted(tmp_path, capsys):
    """``--sweep`` goes through the chunk loop: --stop-after then --resume gives the metrics.csv
    and final state of the same sweep run without a stop, bit for bit, and the metrics and
    final params of ONE jitted vmapped train call over its 2 x 2 runs to float tolerance."""
    straight = str(tmp_path / "straight")
    assert main(["train", *SWEEP, "--run-dir", straight]) == 0
    run = str(tmp_path / "sweep")
    assert main(["train", *SWEEP, "--stop-after", "4", "--run-dir", run]) == 0
    out = capsys.readouterr().out
    assert f"--resume {run}" in out and not os.path.exists(os.path.join(run, "results.md"))
    info = json.load(open(os.path.join(run, "config.json")))
    assert info["members"] == [{"lr": 1e-3}, {"lr": 3e-3}] and info["split"] == "seeds"
    assert main(["train", "--resume", run, "--quiet"]) == 0
    _, _, runner, _ = load_run(run)
    # exact: the same command's chunks (--chunk 2), resumed from the checkpoint at update 4
    assert open(os.path.join(run, "metrics.csv")).read() == open(os.path.join(straight, "metrics.csv")).read()
    assert_same_state(load_run(straight)[2], runner)  # exact: same chunks; every leaf of the final state
    # reference: runs m*S + s = member m (lr), seed key s of jax.random.split(PRNGKey(0), 2)
    cfg = PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=1, num_minibatches=2)
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(0), 2), (2, 1))
    cfgs = [cfg.replace(lr=lr) for lr in (1e-3, 3e-3) for _ in range(2)]
    stacked = jax.tree.map(lambda *xs: jnp.asarray(xs, jnp.float32), *cfgs)
    ref_state, ref = jax.device_get(jax.jit(jax.vmap(make_ppo(cfg).train))(keys, stacked))
    assert_close_metrics(read_metrics(run), ref)  # tolerance: one train call is another program
    assert_close_state(ref_state.train.params, runner.train.params)  # tolerance: another program
    table = open(os.path.join(run, "results.md")).read().splitlines()
    means = [float(line.split("|")[3]) for line in table[2:]]
    assert len(means) == 2 and means[0] >= means[1]
    assert not np.allclose(ref["actor_loss"][0], ref["actor_loss"][2], **METRIC_TOL)  # sensitivity: the members differ


def test_train_flags_reach_the_loop(monkeypatch, tmp_path):
    """--split/--devices/--sweep/--seed wiring (no compile): the CLI hands them to the chunk loop.
    The 2-device numbers of --split envs and of a sweep are checked in tests/test_parallel.py."""
    import purejaxppo.programs.runs as loop

    calls = []

    def fake_train_chunked(config, **kw):
        calls.append(kw)
        runs = kw["num_seeds"] * (len(kw["members"]) if kw["members"] else 1)
        return loop.RunResult(config, kw["run_dir"], None, {}, 0.0, 1.0, 0, np.zeros(runs), members=kw["members"])

    monkeypatch.setattr(loop, "train_chunked", fake_train_chunked)
    assert (
        main(["train", "--devices", "1", "--split", "envs", "--seed", "5", "--quiet", "--run-dir", str(tmp_path / "a")])
        == 0
    )
    prog = calls[-1]["program"]
    assert prog.split == "envs" and prog.num_devices == 1 and calls[-1]["seed"] == 5
    assert calls[-1]["members"] is None
    assert (
        main(
            [
                "train",
                "--devices",
                "1",
                "--seeds",
                "3",
                "--sweep",
                "lr=1e-3,2e-3",
                "--sweep",
                "clip_eps=0.1,0.3",
                "--quiet",
                "--run-dir",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert calls[-1]["program"].split == "seeds" and calls[-1]["num_seeds"] == 3
    assert calls[-1]["members"] == [
        {"lr": 1e-3, "clip_eps": 0.1},
        {"lr": 1e-3, "clip_eps": 0.3},
        {"lr": 2e-3, "clip_eps": 0.1},
        {"lr": 2e-3, "clip_eps": 0.3},
    ]
    assert (tmp_path / "b" / "results.md").read_text().count("\n") == 2 + 4  # header, rule, 4 members


@pytest.mark.slow
@pytest.mark.optimised(False)  # checks flags only: little optimisation (tests/conftest.py)
def test_bench_subcommand_takes_its_own_flags(tmp_path, capsys):
    """`python -m purejaxppo bench --env ...` reaches the benchmark with its flags (argparse's
    REMAINDER used to drop a leading option: "unrecognized arguments: --env")."""
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--env",
                "CartPole-v1",
                "--num-envs",
                "2",
                "--num-steps",
                "8",
                "--total-timesteps",
                "64",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    res = json.load(open(out))
    assert (res["env"], res["num_envs"], res["num_steps"], res["total_timesteps"]) == ("CartPole-v1", 2, 8, 64)
    assert res["train_steps_per_s"] > 0 and res["env_only_steps_per_s"] > 0
    assert "train_steps_per_s" in capsys.readouterr().out
