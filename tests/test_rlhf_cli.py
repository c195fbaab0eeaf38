"""Token-level PPO as a run (purejaxppo/programs/rlhf_*.py, purejaxppo/cli/rlhf_cmd.py).

* Resume == uninterrupted, bit for bit: exact by construction (the same compiled chunks fed
  the same restored state), so ``np.array_equal`` on metrics.csv and the final parameters.
* The command line: a run folder with config.json (kind ``rlhf``, the SFT baseline),
  metrics.csv (one row per iteration and seed), samples.txt; a finished run resumes to
  nothing; bad flags get one ``error:`` line; ``--devices 2`` equals ``--devices 1`` (two
  programs: float tolerance) in a subprocess with two forced host devices.
* The NaN stop: an absurd learning rate makes an iteration non-finite; the run stops naming the
  iteration, the metric (non-finite in metrics.csv) and the seed, and keeps the last finite
  state's checkpoint, which a resume continues from.
"""

import csv
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.config import TokenPPOConfig
from purejaxppo.programs.rlhf_program import RLHFProgram, RLHFSettings
from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint
from purejaxppo.run.guards import NonFiniteError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = RLHFSettings(task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1,
                        sft_steps=20, eval_every=2, eval_batch=16)
CONFIG = TokenPPOConfig(batch_size=8, num_iterations=4, update_epochs=1, num_minibatches=2, actor_lr=1e-3)


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.reader(f))


@pytest.mark.slow
def test_resume_equals_uninterrupted_bit_for_bit(tmp_path):
    sft = sft_model(SETTINGS, 0)
    prog = RLHFProgram(CONFIG, SETTINGS, sft[0], sft[1])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    kw = dict(num_seeds=2, chunk_updates=2, sft=sft, program=prog)
    train_rlhf(CONFIG, SETTINGS, run_dir=a, **kw)
    part = train_rlhf(CONFIG, SETTINGS, run_dir=b, stop_after=2, **kw)
    assert not part.finished
    resume_rlhf(b, program=prog)
    assert rows(a) == rows(b) and len(rows(a)) == 1 + 2 * 4  # header + 2 seeds x 4 iterations
    header = rows(a)[0]
    assert {"score", "kl", "eval_score", "eval_exact_match", "clip_frac", "response_length"} <= set(header)
    state_a, _ = restore_checkpoint(latest_checkpoint(os.path.join(a, "checkpoints")), prog.init(prog.place(
        jax.random.split(jax.random.PRNGKey(0), 2))[0]))
    state_b, _ = restore_checkpoint(latest_checkpoint(os.path.join(b, "checkpoints")), state_a)
    for x, y in zip(jax.tree.leaves(state_a), jax.tree.leaves(state_b)):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    summary = json.load(open(os.path.join(a, "summary.json")))  # the final score (last 5% of iterations: the last)
    last = {int(r[0]): float(r[header.index("score")]) for r in rows(a)[1:] if r[header.index("update")] == "3"}
    np.testing.assert_allclose(summary["final_score_per_seed"], [last[0], last[1]], rtol=1e-6)
    info = json.load(open(os.path.join(a, "config.json")))
    assert info["kind"] == "rlhf" and info["sft"]["steps"] == 20 and "eval_exact_match" in info["sft"]
    samples = open(os.path.join(a, "samples.txt")).read()
    assert samples.count("# iteration") == 2 and "->" in samples  # evaluations at iterations 2 and 4


@pytest.mark.slow
def test_non_finite_stops_naming_iteration_metric_and_seed_and_keeps_a_resumable_checkpoint(tmp_path):
    # an absurd actor learning rate: Adam's first step moves every policy weight by about 1e30, so the
    # next iteration's forward pass overflows float32 (e.g. attention scores of 1e30-sized queries
    # and keys) and its losses are NaN. One gradient step per iteration and one iteration per chunk:
    # iteration 0 is finite (its responses come from the SFT model), iteration 1 is not.
    settings = dataclasses.replace(SETTINGS, eval_every=0)
    config = dataclasses.replace(CONFIG, actor_lr=1e30, update_epochs=1, num_minibatches=1)
    sft = sft_model(settings, 0)
    prog = RLHFProgram(config, settings, sft[0], sft[1])
    run = str(tmp_path / "nan")
    with pytest.raises(NonFiniteError) as e:
        train_rlhf(config, settings, run_dir=run, num_seeds=2, chunk_updates=1, sft=sft, program=prog)
    msg = str(e.value)
    found = re.match(r"non-finite (\w+) \((nan|-?inf)\) at update 1 of metrics.csv \(seed ([01])\); training stopped; "
                     r"the last finite checkpoint is (\S+) \(update 1\)", msg)
    assert found, msg
    assert "--actor-lr" in msg and "--normalize-obs" not in msg  # what to try, in the rlhf command's own flags
    metric, seed, path = found.group(1), int(found.group(3)), found.group(4)
    # the metric it names is non-finite in metrics.csv at that iteration and seed, and finite the iteration before
    table = {(int(r["seed"]), int(r["update"])): r for r in csv.DictReader(open(os.path.join(run, "metrics.csv")))}
    assert not np.isfinite(float(table[seed, 1][metric])) and np.isfinite(float(table[seed, 0][metric]))
    assert e.value.updates_done == 1
    assert e.value.checkpoint == path == os.path.join(run, "checkpoints", "update_00000001")
    # the checkpoint is the state after iteration 0: finite, its counter at 1, the policy moved by the huge step
    template = prog.init(jax.random.split(jax.random.PRNGKey(0), 2))
    state, _ = restore_checkpoint(path, template)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.train))
    np.testing.assert_array_equal(state.iteration, [1, 1])
    moved = [np.max(np.abs(np.asarray(x))) for x in jax.tree.leaves(state.train.params["policy"])]
    assert max(moved) > 1e29, max(moved)
    # resumable: continuing the folder restores that checkpoint and stops again, at the same iteration
    with pytest.raises(NonFiniteError) as again:
        resume_rlhf(run, program=prog)
    assert str(again.value) == msg


def _cli(args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "purejaxppo", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


SMALL = ["rlhf", "--iterations", "2", "--batch", "8", "--minibatches", "2", "--epochs", "1", "--sft-steps", "10",
         "--d-model", "16", "--layers", "1", "--eval-every", "2", "--quiet"]


@pytest.mark.parametrize("args,message", [
    (["--batch", "10", "--minibatches", "4"], "divisible by num_minibatches"),
    (["--critic", "both"], "critic='both' must be one of"),
    (["--task", "sorting"], "unknown task 'sorting'"),
    (["--task-option", "max_len"], "must be FIELD=VALUE"),
    (["--task-option", "colour=3"], "unexpected keyword argument 'colour'"),
    (["--task-option", "max_len=long"], "must be a number, true or false"),
    (["--task-option", "max_len=20"], "need 1 <= min_len <= max_len < max_new"),
])
def test_bad_flags_get_one_error_line(args, message):
    proc = _cli(["rlhf", *args, "--quiet"], timeout=300)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.skipif(importlib.util.find_spec("tensorboardX") is not None or importlib.util.find_spec("torch") is not None,
                    reason="a TensorBoard writer is installed here")
def test_tensorboard_without_its_package_is_refused_before_any_work(tmp_path):
    proc = _cli(["rlhf", "--tensorboard", "--quiet", "--run-dir", str(tmp_path / "tb")], timeout=300)
    assert not (tmp_path / "tb").exists()
    message = "pip install 'purejaxppo[tensorboard]'"
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_two_devices_equal_one_device_from_the_command_line(tmp_path):
    runs = {}
    for n in (1, 2):
        d = str(tmp_path / f"d{n}")
        proc = _cli(SMALL + ["--devices", str(n), "--run-dir", d],
                    env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[n] = rows(d)
    assert runs[1][0] == runs[2][0]
    a = np.array([[float(x) for x in r] for r in runs[1][1:]])
    b = np.array([[float(x) for x in r] for r in runs[2][1:]])
    # two programs (each device samples half the prompts; gathered, another reduction order)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    again = _cli(["rlhf", "--resume", str(tmp_path / "d1"), "--quiet"])
    assert again.returncode == 0 and rows(str(tmp_path / "d1")) == runs[1]  # a finished run: nothing rewritten
    refused = _cli(["rlhf", "--resume", str(tmp_path / "d1"), "--beta", "1"])
    assert refused.returncode == 2 and "drop --beta" in refused.stderr


@pytest.mark.slow
def test_init_from_a_local_gpt2_folder(tmp_path):
    from purejaxppo.lm.gpt2 import GPT2, save_gpt2

    model = GPT2(vocab_size=16, n_positions=16, n_embd=16, n_layer=1, n_head=2)  # the task needs 13 ids, 15 slots
    save_gpt2(str(tmp_path / "gpt2"), model, jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32),
                                                                 jnp.ones((1, 4), bool)))
    run = str(tmp_path / "run")
    proc = _cli(["rlhf", "--init", str(tmp_path / "gpt2"), "--iterations", "2", "--batch", "8", "--minibatches", "2",
                 "--epochs", "1", "--sft-steps", "5", "--eval-every", "0", "--quiet", "--run-dir", run])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(rows(run)) == 1 + 2 and json.load(open(os.path.join(run, "config.json")))["settings"]["init"].endswith("gpt2")
    small = GPT2(vocab_size=8, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    save_gpt2(str(tmp_path / "small"), small, small.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32),
                                                          jnp.ones((1, 4), bool)))
    refused = _cli(["rlhf", "--init", str(tmp_path / "small"), "--quiet", "--run-dir", str(tmp_path / "r2")])
    assert refused.returncode == 2 and "vocabulary (8) is smaller than the task's (13)" in refused.stderr, refused.stderr
    short = GPT2(vocab_size=16, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    save_gpt2(str(tmp_path / "short"), short, short.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32),
                                                          jnp.ones((1, 4), bool)))
    refused = _cli(["rlhf", "--init", str(tmp_path / "short"), "--quiet", "--run-dir", str(tmp_path / "r3")])
    assert refused.returncode == 2 and "its 8 positions cannot hold" in refused.stderr, refused.stderr


@pytest.mark.parametrize("command", ["rlhf", "train"])
def test_interrupted_run_names_its_own_resume_command(command, monkeypatch, capsys):
    """Ctrl-C/SIGTERM: the line says how to continue with the command that was interrupted
    (an rlhf folder resumes through ``rlhf --resume``)."""
    import purejaxppo.cli.rlhf_cmd as rlhf_cmd
    import purejaxppo.cli.train_cmd as train_cmd
    from purejaxppo.cli import main
    from purejaxppo.run.guards import TrainingInterrupted

    def interrupted(args):
        raise TrainingInterrupted(os.path.join("runs", "x", "checkpoints", "update_00000003"), 3, "SIGTERM")

    monkeypatch.setattr(rlhf_cmd, "cmd_rlhf", interrupted)
    monkeypatch.setattr(train_cmd, "cmd_train", interrupted)
    assert main([command, "--quiet"]) == 143
    err = capsys.readouterr().err
    assert f"`python -m purejaxppo {command} --resume {os.path.join('runs', 'x')}`" in err, err
