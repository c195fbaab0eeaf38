"""Token-level PPO on several processes (``rlhf --coordinator/--num-processes/--process-id``).

A toy run on 2 processes x 1 CPU device (jax.distributed on localhost, started as a user
would), stopped after one iteration and resumed on 2 processes, against the same run in ONE
process with 2 forced host devices (``--devices 2``): different programs (collectives over gloo
between processes vs. inside one process), so compared to a float tolerance (the one
``rlhf --devices 2`` vs ``--devices 1`` uses, relative 1e-4), never bit for bit. Process 1 runs
in a folder of its own with the same RELATIVE --run-dir: anything it wrote would appear there.
The flag refusals come before any process waits for another.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from test_multiprocess import _finish, _metrics, _one_process, _start

from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves

pytestmark = pytest.mark.xdist_group("multiprocess")  # one at a time: each uses both cores
SMALL = [
    "rlhf",
    "--task-option",
    "max_len=4",
    "--task-option",
    "max_new=6",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--sft-steps",
    "5",
    "--iterations",
    "2",
    "--batch",
    "8",
    "--minibatches",
    "2",
    "--epochs",
    "1",
    "--chunk",
    "1",
    "--quiet",
]


def _ok(results):
    for code, _out, err in results:
        assert code == 0, err[-3000:]


@pytest.mark.slow
def test_two_processes_stopped_and_resumed_equal_one_process_with_two_devices(tmp_path):
    # the evaluation during training runs on one process: off by default across processes
    _ok(_finish(_start(tmp_path, [*SMALL, "--run-dir", "run", "--devices", "all", "--stop-after", "1"])))
    assert os.listdir(tmp_path / "p1") == []  # process 1 wrote nothing
    assert latest_checkpoint(str(tmp_path / "p0" / "run" / "checkpoints")).endswith("update_00000001")
    _ok(_finish(_start(tmp_path, ["rlhf", "--resume", "run", "--devices", "all", "--quiet"])))
    assert os.listdir(tmp_path / "p1") == []
    ref = _one_process(tmp_path, [*SMALL, "--eval-every", "0"])
    (ha, ma), (hb, mb) = _metrics(tmp_path / "p0" / "run"), _metrics(ref)
    assert ha == hb and ma.shape == mb.shape == (2, len(ha))
    np.testing.assert_allclose(ma, mb, rtol=1e-4, atol=1e-6, equal_nan=True)
    (la, meta_a), (lb, meta_b) = (
        read_leaves(latest_checkpoint(str(r / "checkpoints"))) for r in (tmp_path / "p0" / "run", ref)
    )
    assert meta_a["update"] == meta_b["update"] == 2 and la.keys() == lb.keys()
    for k in la:
        np.testing.assert_allclose(
            np.asarray(la[k], np.float64), np.asarray(lb[k], np.float64), rtol=1e-4, atol=1e-5, err_msg=k
        )


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--coordinator", "127.0.0.1:1"], "--coordinator needs --num-processes, --process-id too"),
        (["--distributed", "--process-id", "0"], "--distributed takes the process layout from the launcher"),
        (["--distributed"], "several processes need --run-dir"),
        (["--distributed", "--run-dir", "r", "--eval-every", "5"], "--eval-every does not run across processes"),
        (
            ["--distributed", "--run-dir", "r", "--model", "m", "--prompts", "p", "--reward", "r.py:f"],
            "--reward (a Python function on the host) does not run across processes yet",
        ),
    ],
)
def test_process_flags_are_refused_before_joining(tmp_path, monkeypatch, capsys, flags, message):
    from purejaxppo.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["rlhf", *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert os.listdir(tmp_path) == []


def test_init_on_several_processes_gives_arrays_replicated_over_the_runs_mesh(monkeypatch):
    """What several processes need of ``RLHFProgram.init``, checked in one process: every process
    computes the same state, and :func:`on_every_process` turns it into global arrays replicated
    over the run's mesh (the layout its chunks take), values and dtypes unchanged; one process
    keeps jit's plain arrays. A fake group of two processes makes ``init`` take that path."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from purejaxppo.lm.ppo.token_config import TokenPPOConfig
    from purejaxppo.lm.ppo.data_parallel import prompt_mesh
    from purejaxppo.programs.rlhf_program import RLHFProgram, on_every_process
    from purejaxppo.programs.rlhf_settings import RLHFSettings
    from purejaxppo.run import processes

    def replicated(x):
        return isinstance(x.sharding, NamedSharding) and x.sharding.spec == PartitionSpec()

    # the function's contract, on a hand-made tree
    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": (np.int32(7), np.array([True, False]))}
    out = on_every_process(tree, 1)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for x, want in zip(jax.tree.leaves(out), jax.tree.leaves(tree)):
        assert replicated(x) and x.sharding.mesh == prompt_mesh(1), x.sharding
        assert x.dtype == np.asarray(want).dtype and x.shape == np.shape(want)
        np.testing.assert_array_equal(np.asarray(x), want)
    # the program calls it exactly when the run has several processes
    settings = RLHFSettings(
        task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=0, eval_every=0
    )
    lm, params = RLHFProgram.template(settings)
    prog = RLHFProgram(TokenPPOConfig(batch_size=8), settings, lm, params)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    alone = jax.tree.leaves(prog.init(keys))
    monkeypatch.setattr(processes, "current", lambda: processes.ProcessGroup(0, 2))
    many = jax.tree.leaves(prog.init(keys))
    assert len(many) == len(alone) > 10
    for a, m in zip(alone, many):
        assert not replicated(a) and replicated(m), (a.sharding, m.sharding)
        assert m.sharding.mesh == prompt_mesh(1) and m.dtype == a.dtype
        np.testing.assert_array_equal(np.asarray(m), np.asarray(a))
