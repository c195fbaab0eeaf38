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

import json
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


ANSWER_REWARD = """import json

def score(prompts, completions, answer):
    with open("seen.jsonl", "a") as f:  # in the process's own folder
        f.write(json.dumps([[p, c, a] for p, c, a in zip(prompts, completions, answer)]) + "\\n")
    return [float(int(a) % 4) for a in answer]

def short(prompts, completions):
    return [-0.1 * len(c) for c in completions]
"""


def _calls(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_python_reward_reading_the_rows_answers_runs_on_two_processes_as_on_one(tmp_path):
    """``--reward FILE.py:FUNC`` across processes: each process scores only its own rows (its
    half of each iteration's prompts, drawn at random from a shuffled file), each response with
    its own row's ``answer``; the scored rows of both together are exactly one process's (2
    devices), the training metrics equal its to relative 1e-4 (two programs: the tolerance of
    ``--devices 2`` vs 1), and each reward's mean (``reward_<name>_mean``, a host statistic)
    is every process's rows' mean, recomputed here from the rows each process saw."""
    from _lm_fixtures import tiny_gpt2_folder

    model = tiny_gpt2_folder(tmp_path / "model")
    order = np.random.default_rng(3).permutation(12)  # the file's rows shuffled; answers unrelated to positions
    rows = [{"prompt": f"what is {i} plus one", "answer": str((7 * i) % 11)} for i in order]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(ANSWER_REWARD)
    fn = str(tmp_path / "reward.py")
    args = ["rlhf", "--model", model, "--prompts", str(tmp_path / "data.jsonl"), "--reward", f"{fn}:score"]
    args += ["--reward", f"{fn}:short", "--reward-weights", "1,0.5", "--batch", "8", "--group-size", "2"]
    args += ["--advantage", "grpo", "--iterations", "2", "--minibatches", "2", "--epochs", "1"]
    args += ["--max-new-tokens", "4", "--chunk", "1", "--eval-every", "0", "--quiet"]
    _ok(_finish(_start(tmp_path, [*args, "--run-dir", "run", "--devices", "all"])))
    assert os.listdir(tmp_path / "p1") == ["seen.jsonl"]  # process 1 scored, and wrote no run folder
    ref = _one_process(tmp_path, args)
    gold = {r["prompt"]: r["answer"] for r in rows}
    # the calls: the SFT model's evaluation (every process, all 12 rows), then one per iteration
    # (B / 2 = 4 rows per process; one process: one per device), then, on process 0 alone, the
    # final samples (samples.txt: SHOWN = 4 prompts)
    calls = [_calls(tmp_path / f"p{i}" / "seen.jsonl") for i in (0, 1)] + [_calls(tmp_path / "seen.jsonl")]
    assert [[len(call) for call in c] for c in calls] == [[12, 4, 4, 4], [12, 4, 4], [12, 4, 4, 4, 4, 4]]
    for prompt, _, answer in (r for c in calls for call in c for r in call):
        assert gold[prompt] == answer, (prompt, answer)
    mine = [c[1:3] for c in calls[:2]]  # each process's iterations
    # the rows both processes scored are exactly those one process scored (its 2 devices in either order)
    together = sorted(map(tuple, (r for c in mine for call in c for r in call)))
    assert together == sorted(map(tuple, (r for call in calls[2][1:5] for r in call)))
    (ha, ma), (hb, mb) = _metrics(tmp_path / "p0" / "run"), _metrics(ref)
    assert ha == hb and ma.shape == mb.shape == (2, len(ha))
    timed = ha.index("reward_fn_s")  # host seconds: not the same twice
    keep = [j for j in range(len(ha)) if j != timed]
    np.testing.assert_allclose(ma[:, keep], mb[:, keep], rtol=1e-4, atol=1e-6, equal_nan=True)
    for it in (0, 1):  # iteration it's rows: each process's call it
        scored = [r for c in mine for r in c[it]]
        want = np.mean([int(a) % 4 for _, _, a in scored])
        assert ma[it, ha.index("reward_score_mean")] == pytest.approx(want, rel=1e-6)
        want = np.mean([-0.1 * len(c) for _, c, _ in scored])
        assert ma[it, ha.index("reward_short_mean")] == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert ma[:, ha.index("reward_score_scored")].tolist() == [1.0, 1.0]


@pytest.mark.slow
def test_a_reward_function_failing_on_one_process_is_named_by_every_process(tmp_path):
    """The function raises on process 1 alone (its folder's name; in an iteration's call of B / 2
    rows, not the SFT model's evaluation): process 0, whose own calls all succeeded, stops with the
    same one error line naming the function and its error (the processes exchange their failure
    with their counts), not a bare non-finite stop; both exit 2, the folder resumable."""
    from _lm_fixtures import tiny_gpt2_folder

    model = tiny_gpt2_folder(tmp_path / "model")
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": f"what is {i}"}) + "\n" for i in range(6)))
    (tmp_path / "bad.py").write_text(
        "import os\n"
        "def score(prompts, completions):\n"
        "    if os.path.basename(os.getcwd()) == 'p1' and len(prompts) == 4:\n"
        "        raise ValueError('only here')\n"
        "    return [0.0] * len(prompts)\n"
    )
    args = ["rlhf", "--model", model, "--prompts", str(tmp_path / "data.jsonl"), "--reward", f"{tmp_path}/bad.py:score"]
    args += ["--batch", "8", "--iterations", "2", "--minibatches", "2", "--epochs", "1", "--max-new-tokens", "4"]
    results = _finish(
        _start(
            tmp_path, [*args, "--chunk", "1", "--eval-every", "0", "--quiet", "--run-dir", "run", "--devices", "all"]
        )
    )
    for code, _out, err in results:
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert code == 2 and len(lines) == 1, err[-3000:]
        assert "bad.py:score raised ValueError: only here" in lines[0] and "--resume run" in lines[0], lines[0]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--coordinator", "127.0.0.1:1"], "--coordinator needs --num-processes, --process-id too"),
        (["--distributed", "--process-id", "0"], "--distributed takes the process layout from the launcher"),
        (["--distributed"], "several processes need --run-dir"),
        (["--distributed", "--run-dir", "r", "--eval-every", "5"], "--eval-every does not run across processes"),
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
