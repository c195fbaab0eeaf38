"""CLI: train / interrupt / resume / eval / plot, and user errors without tracebacks."""

import json
import os

import pytest

import purejaxppo.driver as driver
from purejaxppo.cli import main

TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", str(4 * 32 * 8),
        "--update-epochs", "2", "--num-minibatches", "2", "--seeds", "2", "--devices", "1", "--chunk", "2", "--quiet"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("cli") / "straight")
    assert main(["train", *TINY, "--run-dir", run]) == 0
    return run


def test_interrupted_run_resumes_to_identical_metrics(straight, tmp_path, monkeypatch, capsys):
    run = str(tmp_path / "run")
    calls = {"n": 0}
    original = driver.MetricsWriter.write

    def write_then_interrupt(self, metrics, first_update):
        calls["n"] += 1
        if calls["n"] == 3:  # Ctrl-C while the 3rd chunk's rows are being written
            raise KeyboardInterrupt
        return original(self, metrics, first_update)

    monkeypatch.setattr(driver.MetricsWriter, "write", write_then_interrupt)
    assert main(["train", *TINY, "--run-dir", run]) == 130
    err = capsys.readouterr().err
    assert "update_00000004" in err and f"--resume {run}" in err and "Traceback" not in err
    monkeypatch.undo()
    assert main(["train", "--resume", run, "--quiet"]) == 0
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


@pytest.mark.parametrize("argv,needle", [
    (["train", "--resume", "/nonexistent/run"], "does not exist"),
    (["eval", "/nonexistent/run"], "does not exist"),
    (["plot", "/nonexistent/run"], "no metrics.csv"),
    (["train", "--resume", "RUN", "--lr", "0.1"], "--lr"),
    (["train", "--seeds", "0"], "--seeds"),
    (["train", "--seeds", "2", "--devices", "3"], "--devices"),
    (["eval", "RUN", "--episodes", "0"], "--episodes"),
    (["plot", "RUN", "--metric", "nope"], "no metric 'nope'"),
    (["train", "--run-dir", "RUN"], "already holds a run"),
])
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
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    out = subprocess.run([sys.executable, "-m", "purejaxppo", "train", "--seeds", "2", "--devices", "2", "--quiet"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "XLA_FLAGS forces 1 host device" in out.stderr and "Traceback" not in out.stderr, out.stderr
