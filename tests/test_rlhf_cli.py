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

from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.programs.rlhf_program import RLHFProgram
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint
from purejaxppo.run.guards import NonFiniteError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = RLHFSettings(
    task="reverse",
    task_options=(("max_len", 4), ("max_new", 6)),
    d_model=16,
    n_layers=1,
    sft_steps=20,
    eval_every=2,
    eval_batch=16,
)
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
    state_a, _ = restore_checkpoint(
        latest_checkpoint(os.path.join(a, "checkpoints")),
        prog.init(prog.place(jax.random.split(jax.random.PRNGKey(0), 2))[0]),
    )
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
    found = re.match(
        r"non-finite (\w+) \((nan|-?inf)\) at update 1 of metrics.csv \(seed ([01])\); training stopped; "
        r"the last finite checkpoint is (\S+) \(update 1\)",
        msg,
    )
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
    return subprocess.run(
        [sys.executable, "-m", "purejaxppo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
    )


SMALL = [
    "rlhf",
    "--iterations",
    "2",
    "--batch",
    "8",
    "--minibatches",
    "2",
    "--epochs",
    "1",
    "--sft-steps",
    "10",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--eval-every",
    "2",
    "--quiet",
]


def _bad_folders(root):
    """Broken --init/--model folders, each a different way (made once per test module)."""
    from _lm_fixtures import tiny_gpt2_folder

    good = tiny_gpt2_folder(root / "good")
    tiny_gpt2_folder(root / "nochat", chat_template=None)
    (root / "empty").mkdir()
    (root / "afile").write_text("x")
    (root / "badjson").mkdir()
    (root / "badjson" / "config.json").write_text("{not json")
    (root / "noweights").mkdir()
    (root / "noweights" / "config.json").write_text(open(os.path.join(good, "config.json")).read())
    (root / "truncated").mkdir()
    for name in os.listdir(good):
        data = open(os.path.join(good, name), "rb").read()
        (root / "truncated" / name).write_bytes(data[: len(data) // 2] if name.endswith(".safetensors") else data)
    (root / "notok").mkdir()
    for name in ("config.json", "model.safetensors"):
        (root / "notok" / name).write_bytes(open(os.path.join(good, name), "rb").read())
    (root / "prompts.jsonl").write_text('{"prompt": "hello world"}\n{"prompt": "what is the answer"}\n')
    (root / "badline.jsonl").write_text('{"prompt": "hello world"}\n{"prompt": 3}\n')
    (root / "chat.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (root / "p.csv").write_text("hello\n")
    (root / "sft_noresp.jsonl").write_text('{"prompt": "hello"}\n')
    (root / "sft_long.jsonl").write_text('{"prompt": "hello", "response": "%s"}\n' % ("one two three " * 20))
    (root / "reward.py").write_text(
        "def score(prompts, responses):\n    return [0.0] * len(prompts)\ndef one(x):\n    return x\n"
    )
    (root / "broken.py").write_text("def score(:\n")
    (root / "othervocab").mkdir()
    cfg = json.load(open(os.path.join(good, "config.json")))
    (root / "othervocab" / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 1}))
    (root / "othertok").mkdir()  # the same vocabulary size, another tokenizer (trained on other lines)
    (root / "othertok" / "config.json").write_text(json.dumps(cfg))
    from _lm_fixtures import corpus, train_bpe

    train_bpe(cfg["vocab_size"], corpus(seed=7)[::-1]).save(str(root / "othertok" / "tokenizer.json"))
    (root / "finished").mkdir()
    (root / "finished" / "config.json").write_text(json.dumps({"kind": "rlhf"}))
    (root / "finished" / "metrics.csv").write_text("seed,update\n0,0\n")
    return root


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    return _bad_folders(tmp_path_factory.mktemp("bad"))


TEXT = ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:score"]
BAD_INPUTS = [  # (flags, what the one error line must say)
    (["--batch", "10", "--minibatches", "4"], "--batch 10 must be divisible by --minibatches 4"),
    (["--critic", "both"], "--critic: invalid choice: 'both' (choose from 'separate', 'value_head')"),
    (["--task", "sorting"], "--task: invalid choice: 'sorting' (choose from 'grammar', 'reverse')"),
    (["--task-option", "max_len"], "must be FIELD=VALUE"),
    (["--task-option", "colour=3"], "unexpected keyword argument 'colour'"),
    (["--task-option", "max_len=long"], "must be a number, true or false"),
    (["--task-option", "max_len=20"], "need 1 <= min_len <= max_len < max_new"),
    (["--beta", "nan"], "--beta must be a finite number >= 0, got nan"),
    (["--beta", "inf"], "--beta must be a finite number >= 0, got inf"),
    (["--actor-lr", "inf"], "--actor-lr must be a finite number > 0, got inf"),
    (["--actor-lr", "-1"], "--actor-lr must be > 0, got -1.0"),
    (["--ent-coef", "-0.1"], "--ent-coef must be >= 0, got -0.1"),
    (["--gamma", "1.5"], "--gamma must be in [0, 1], got 1.5"),
    (["--top-p", "0"], "--top-p must be in (0, 1], got 0.0"),
    (["--temperature", "0"], "--temperature must be > 0, got 0.0"),
    (["--kl-estimator", "k9"], "--kl-estimator: invalid choice: 'k9'"),
    (["--iterations", "0"], "--iterations must be >= 1, got 0"),
    (["--micro-batches", "3"], "divisible by --micro-batches 3"),
    (["--top-k", "100"], "--top-k 100 is more than the vocabulary's 13 tokens"),
    (["--layers", "0"], "--layers must be >= 1, got 0"),
    (["--heads", "0"], "--heads must be >= 1, got 0"),
    (["--d-model", "30", "--heads", "4"], "--d-model 30 must be divisible by --heads 4"),
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1 (JAX's random keys hold 32 bits"),
    (["--chunk", "0"], "--chunk must be >= 1, got 0"),
    (["--eval-every", "-1"], "--eval-every must be >= 0, got -1"),
    (["--sft-steps", "-5"], "--sft-steps must be >= 0, got -5"),
    (["--init", "{missing}"], "is not a folder"),
    (["--init", "{empty}"], "has no config.json"),
    (["--init", "{afile}"], "is not a folder"),
    (["--init", "{badjson}"], "config.json is not readable JSON"),
    (["--init", "{noweights}"], "the model cannot be loaded (FileNotFoundError"),
    (["--init", "{truncated}"], "model.safetensors is not a readable safetensors file"),
    (["--run-dir", "{afile}"], "--run-dir {afile} is a file"),
    (["--run-dir", "{finished}"], "continue it with python -m purejaxppo rlhf --resume {finished}"),
    (["--prompts", "{prompts.jsonl}"], "--prompts needs --model DIR"),
    (["--max-new-tokens", "4"], "--max-new-tokens needs --model DIR"),
    (["--model", "{good}"], "--model needs --prompts FILE"),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}"], "--model needs a reward"),
    (TEXT + ["--reward-model", "{good}"], "--reward-model {good} holds no score head"),  # both: summed
    (TEXT + ["--task", "reverse"], "--task belongs to the built-in tasks"),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward-model", "{othervocab}"],
        "--reward-model {othervocab}: its vocabulary (321) differs from the policy's (320)",
    ),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward-model", "{othertok}"],
        "--reward-model {othertok}: its tokenizer.json differs from the policy's",
    ),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward-model", "{good}"],
        "--reward-model {good} holds no score head",
    ),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward-model", "{missing}"],
        "--reward-model {missing}: {missing} is not a folder",
    ),
    (TEXT + ["--layers", "2"], "--layers belongs to the built-in tasks"),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward-model", "{good}", "--lora-rank", "4"],
        "--lora-rank 4 with --reward-model: the separate critic would start from the reward model",
    ),
    (TEXT + ["--sft-steps", "5"], "--sft-steps 5 needs --sft-data FILE"),
    (TEXT + ["--top-k", "1000"], "--top-k 1000 is more than the vocabulary's 320 tokens"),
    (TEXT + ["--sft-lr", "nan"], "--sft-lr must be a finite number > 0, got nan"),
    (TEXT + ["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (TEXT + ["--max-new-tokens", "64"], "--max-new-tokens 64 leaves no room for a prompt"),
    (TEXT + ["--max-prompt-tokens", "60", "--max-new-tokens", "8"], "exceed the model's 64 positions"),
    (TEXT + ["--max-prompt-tokens", "2"], "--prompts {prompts.jsonl}:1: the prompt has"),
    (["--model", "{missing}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:score"], "is not a folder"),
    (["--model", "{notok}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:score"], "has no tokenizer.json"),
    (
        ["--model", "{truncated}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:score"],
        "model.safetensors is not a readable safetensors file",
    ),
    (["--model", "{good}", "--prompts", "{missing}.jsonl", "--reward", "{reward.py}:score"], "does not exist"),
    (
        ["--model", "{good}", "--prompts", "{badline.jsonl}", "--reward", "{reward.py}:score"],
        "--prompts {badline.jsonl}:2: \"prompt\" must be a string",
    ),
    (
        ["--model", "{good}", "--prompts", "{p.csv}", "--reward", "{reward.py}:score"],
        "expected a .jsonl, .txt or .parquet file",
    ),
    (
        [
            "--model",
            "{nochat}",
            "--prompts",
            "{prompts.jsonl}",
            "--reward",
            "{reward.py}:score",
            "--eval-prompts",
            "{chat.jsonl}",
        ],
        "--eval-prompts {chat.jsonl}:1: the model folder's tokenizer_config.json has no chat_template",
    ),
    (TEXT + ["--sft-data", "{sft_noresp.jsonl}"], "--sft-data {sft_noresp.jsonl}:1 needs a \"response\" string"),
    (TEXT + ["--sft-data", "{sft_long.jsonl}"], "over --max-new-tokens 16"),
    (TEXT + ["--pass-samples", "4", "--eval-every", "0"], "--pass-samples 4 samples at each evaluation"),
    (TEXT + ["--reward-weights", "1,2"], "--reward-weights 1.0,2.0: 2 weights for 1 rewards"),
    (TEXT + ["--reward-option", "length.limit=8"], "--reward-option length.limit=8: name a built-in reward given"),
    (TEXT + ["--reward", "math", "--reward-option", "math.nope=1"], "--reward math: reward 'math' with options"),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "nope"], "--reward nope: "),
    (TEXT + ["--pass-samples", "4", "--pass-k", "1,8"], "--pass-k 1,8: each k must be in [1, --pass-samples = 4]"),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}"], "must be FILE.py:FUNCTION"),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:nope"], "has no function 'nope'"),
    (
        ["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{reward.py}:one"],
        "must take (prompts, responses)",
    ),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{broken.py}:score"], "failed to import"),
    (["--model", "{good}", "--prompts", "{prompts.jsonl}", "--reward", "{missing}.py:f"], "does not exist"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a)[-50:] for a, _ in BAD_INPUTS])
def test_bad_inputs_get_one_error_line_before_any_work(args, message, bad, tmp_path, monkeypatch, capsys):
    """In-process main(): exit 2, ONE ``error:`` line with the flag as typed, no traceback, and
    nothing created (the run folder, runs/, anything in the working folder)."""
    from purejaxppo.cli import main

    paths = {p.name: str(p) for p in bad.iterdir()} | {"missing": str(bad / "missing")}

    def fill(s):
        for name, path in sorted(paths.items(), key=lambda x: -len(x[0])):
            s = s.replace("{" + name + "}", path)
        return s

    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(bad))
    try:
        code = main(["rlhf", *map(fill, args), "--quiet"])
    except SystemExit as e:  # refused as argparse parsed it (a flag's own type, choices or range)
        code = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert fill(message) in lines[0], lines[0]
    if message.startswith("--"):  # the flag the problem is about leads the line (not another flag's)
        assert lines[0].startswith("error: " + fill(message)), lines[0]
    assert os.listdir(tmp_path) == [] and sorted(os.listdir(bad)) == before


def test_a_text_run_is_read_once_and_every_stage_shares_its_task(bad, tmp_path, monkeypatch):
    """The command prepares a run once: the files are read and the task built one time, and the
    settings handed on (hashes recorded, as train_rlhf does) give back that same task object,
    whose reward the command asks after a failed run."""
    import purejaxppo.lm.tasks.text_task as text_task
    from purejaxppo.cli.parser import build_parser
    from purejaxppo.cli.devices import count_devices
    from purejaxppo.cli.rlhf_cmd import rlhf_request
    from purejaxppo.programs import rlhf_settings
    from purejaxppo.programs.rlhf_session import SessionHooks, open_run
    from purejaxppo.programs.rlhf_run import checked_data
    from purejaxppo.run import processes

    reads = []
    real = text_task.make_text_task
    monkeypatch.setattr(text_task, "make_text_task", lambda *a, **kw: reads.append(1) or real(*a, **kw))
    rlhf_settings._text_task.cache_clear()
    monkeypatch.chdir(tmp_path)
    argv = ["rlhf", "--model", str(bad / "good"), "--prompts", str(bad / "prompts.jsonl"), "--quiet"]
    args = build_parser().parse_args([*argv, "--reward", f"{bad / 'reward.py'}:score", "--run-dir", "r"])
    run = open_run(rlhf_request(args), SessionHooks(processes.current(), count_devices))
    later = checked_data(run.settings, False)
    assert later.hashes and later.make_task() is run.task and len(reads) == 1
    assert run.settings.eval_batch == len(run.task.eval_table.texts) and os.listdir(tmp_path) == []


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboardX") is not None or importlib.util.find_spec("torch") is not None,
    reason="a TensorBoard writer is installed here",
)
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
        proc = _cli(
            SMALL + ["--devices", str(n), "--run-dir", d],
            env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"},
        )
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
    from purejaxppo.lm.models.gpt2 import GPT2
    from purejaxppo.lm.checkpoints.gpt2_hf import save_gpt2

    model = GPT2(vocab_size=16, n_positions=16, n_embd=16, n_layer=1, n_head=2)  # the task needs 13 ids, 15 slots
    save_gpt2(
        str(tmp_path / "gpt2"),
        model,
        jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool)),
    )
    run = str(tmp_path / "run")
    proc = _cli(
        [
            "rlhf",
            "--init",
            str(tmp_path / "gpt2"),
            "--iterations",
            "2",
            "--batch",
            "8",
            "--minibatches",
            "2",
            "--epochs",
            "1",
            "--sft-steps",
            "5",
            "--eval-every",
            "0",
            "--quiet",
            "--run-dir",
            run,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(rows(run)) == 1 + 2 and json.load(open(os.path.join(run, "config.json")))["settings"]["init"].endswith(
        "gpt2"
    )
    small = GPT2(vocab_size=8, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    save_gpt2(
        str(tmp_path / "small"),
        small,
        small.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool)),
    )
    refused = _cli(["rlhf", "--init", str(tmp_path / "small"), "--quiet", "--run-dir", str(tmp_path / "r2")])
    assert refused.returncode == 2 and "vocabulary (8) is smaller than the task's (13)" in refused.stderr, (
        refused.stderr
    )
    short = GPT2(vocab_size=16, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    save_gpt2(
        str(tmp_path / "short"),
        short,
        short.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool)),
    )
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


def _text_setup(root, family="gpt2"):
    from _lm_fixtures import tiny_gpt2_folder, tiny_llama_folder

    model = tiny_gpt2_folder(root / "model") if family == "gpt2" else tiny_llama_folder(root / "model", family)
    prompts = [
        {"prompt": "what is one plus two"},
        {"messages": [{"role": "user", "content": "reverse cat dog"}]},
        {"prompt": "hello"},
    ]
    (root / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    (root / "sft.jsonl").write_text(
        '{"prompt": "hello", "response": "world"}\n{"prompt": "what is one plus two", "response": "three"}\n'
    )
    return model


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_text_run_end_to_end_writes_decoded_samples_and_records_hashes(tmp_path, family):
    """A tiny GPT-2 with a BPE tokenizer trained here, a prompts file, a reward.py: the run trains,
    samples.txt holds the prompts' decoded text, config.json the model folder and the sha256 of
    the weights, tokenizer and prompt files (computed here with hashlib), and a resume after the
    prompt file changed is refused."""
    import hashlib

    model = _text_setup(tmp_path, family)
    (tmp_path / "reward.py").write_text(
        "def score(prompts, responses):\n    return [float(len(r.split())) for r in responses]\n"
    )
    run = str(tmp_path / "run")
    proc = _cli(
        [
            "rlhf",
            "--model",
            model,
            "--prompts",
            str(tmp_path / "prompts.jsonl"),
            "--reward",
            str(tmp_path / "reward.py") + ":score",
            "--sft-data",
            str(tmp_path / "sft.jsonl"),
            "--sft-steps",
            "3",
            "--iterations",
            "2",
            "--batch",
            "4",
            "--minibatches",
            "2",
            "--epochs",
            "1",
            "--max-new-tokens",
            "6",
            "--eval-every",
            "2",
            "--quiet",
            "--run-dir",
            run,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = open(os.path.join(run, "samples.txt"), encoding="utf-8").read().splitlines()
    shown = [json.loads(line[len("prompt: ") :]) for line in samples if line.startswith("prompt: ")]
    # the first evaluation prompts, decoded: the plain one as written, the chat one through the template
    assert shown == ["what is one plus two", "<user>reverse cat dog<|endoftext|><assistant>", "hello"]
    assert sum(line.startswith("response: ") for line in samples) == 3
    info = json.load(open(os.path.join(run, "config.json")))["settings"]

    def sha(*paths):
        h = hashlib.sha256()
        for p in paths:
            h.update(os.path.basename(p).encode() + b"\0" + open(p, "rb").read())
        return h.hexdigest()

    m = lambda name: os.path.join(model, name)  # noqa: E731
    assert info["model_dir"] == model and info["hashes"] == {
        "weights": sha(m("model.safetensors")),
        "tokenizer": sha(m("tokenizer.json"), m("tokenizer_config.json")),
        "prompts": sha(str(tmp_path / "prompts.jsonl")),
        "sft_data": sha(str(tmp_path / "sft.jsonl")),
    }
    header = rows(run)[0]
    assert "reward_fn_s" in header and len(rows(run)) == 3
    with open(tmp_path / "prompts.jsonl", "a") as f:
        f.write('{"prompt": "one more"}\n')
    refused = _cli(["rlhf", "--resume", run, "--quiet"])
    assert refused.returncode == 2 and "the prompts changed since this run started" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_a_failing_reward_function_stops_with_one_error_line_naming_it_and_the_row(tmp_path):
    """The reward raises on its third call (1: the initial model's evaluation, 2: iteration 0,
    3: iteration 1): one error line names the function and the row, exit 2, and the checkpoint
    after iteration 0 is kept."""
    model = _text_setup(tmp_path)
    (tmp_path / "reward.py").write_text(
        "calls = []\n"
        "def score(prompts, responses):\n"
        "    calls.append(1)\n"
        "    if len(calls) >= 3 and len(prompts) > 1:\n"
        "        raise ValueError('bad row')\n"
        "    if len(calls) >= 3 and prompts[0] == 'hello':\n"
        "        raise ValueError('bad row')\n"
        "    return [0.0] * len(prompts)\n"
    )
    run = str(tmp_path / "run")
    proc = _cli(
        [
            "rlhf",
            "--model",
            model,
            "--prompts",
            str(tmp_path / "prompts.jsonl"),
            "--reward",
            str(tmp_path / "reward.py") + ":score",
            "--iterations",
            "3",
            "--batch",
            "4",
            "--minibatches",
            "2",
            "--epochs",
            "1",
            "--max-new-tokens",
            "4",
            "--eval-every",
            "0",
            "--chunk",
            "1",
            "--quiet",
            "--run-dir",
            run,
        ]
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "reward.py:score raised ValueError: bad row on row " in errors[0] and "prompt 'hello'" in errors[0]
    assert "the last finite checkpoint is" in errors[0] and "rlhf --resume" in errors[0], errors[0]
    assert latest_checkpoint(os.path.join(run, "checkpoints")).endswith("update_00000001")


@pytest.mark.slow
def test_a_reward_model_scores_the_run_and_starts_the_critic(tmp_path):
    """--reward-model: a *ForSequenceClassification folder saved from the tiny GPT-2 (same
    tokenizer) scores the responses; the run trains and its score column is the reward model's."""
    from purejaxppo.lm.rewards.reward_model import load_reward_trunk, save_reward_model

    model = _text_setup(tmp_path)
    lm, params, _ = load_reward_trunk(model)
    head = params["params"]["value_head"]
    params = {
        **params,
        "params": {
            **params["params"],
            "value_head": {
                "kernel": jax.random.normal(jax.random.PRNGKey(5), head["kernel"].shape),
                "bias": head["bias"],
            },
        },
    }
    save_reward_model(str(tmp_path / "rm"), lm, params)
    import shutil

    shutil.copy(os.path.join(model, "tokenizer.json"), tmp_path / "rm" / "tokenizer.json")
    run = str(tmp_path / "run")
    proc = _cli(
        [
            "rlhf",
            "--model",
            model,
            "--prompts",
            str(tmp_path / "prompts.jsonl"),
            "--reward-model",
            str(tmp_path / "rm"),
            "--iterations",
            "1",
            "--batch",
            "4",
            "--minibatches",
            "2",
            "--epochs",
            "1",
            "--max-new-tokens",
            "4",
            "--eval-every",
            "0",
            "--quiet",
            "--run-dir",
            run,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, first = rows(run)[0], rows(run)[1]
    score = float(first[header.index("score")])
    assert np.isfinite(score) and score != 0.0 and "reward_fn_s" not in header


@pytest.mark.slow
def test_each_completion_s_reward_reads_its_own_rows_answer_through_the_command(tmp_path):
    """A reward function that takes the ``answer`` column gets, for every completion, the answer
    of the row its prompt came from: prompts drawn at random, in groups, over 2 devices, a held-out
    share evaluated with pass@k on fewer prompts than the greedy evaluation's (the rows checked here
    against the data file, not the code)."""
    model = _text_setup(tmp_path)
    rows = [{"prompt": f"what is {i} plus one", "answer": f"ans{i}"} for i in range(12)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = tmp_path / "seen.jsonl"
    (tmp_path / "reward.py").write_text(
        "import json\n"
        "def score(prompts, completions, answer):\n"
        f"    with open({str(seen)!r}, 'a') as f:\n"
        "        f.writelines(json.dumps([p, a]) + '\\n' for p, a in zip(prompts, answer))\n"
        "    return [0.0] * len(prompts)\n"
    )
    run = str(tmp_path / "run")
    flags = ["--batch", "8", "--group-size", "2", "--advantage", "grpo", "--devices", "2", "--held-out", "3"]
    flags += ["--iterations", "2", "--minibatches", "2", "--epochs", "1", "--max-new-tokens", "4"]
    flags += ["--eval-every", "1", "--pass-samples", "2", "--pass-prompts", "2", "--run-dir", run, "--quiet"]
    proc = _cli(
        ["rlhf", "--model", model, "--prompts", str(tmp_path / "data.jsonl"), "--reward", f"{tmp_path}/reward.py:score"]
        + flags
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    gold = {r["prompt"]: r["answer"] for r in rows}
    pairs = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(pairs) >= 2 * 8 and {a for _, a in pairs} - {None} == {a for p, a in pairs}
    for prompt, answer in pairs:
        assert gold[prompt] == answer, (prompt, answer)


def test_a_recipe_sets_the_papers_values_on_the_tasks_budget_and_a_flag_given_overrides_it(bad, tmp_path, monkeypatch):
    """``--recipe dapo`` (Yu et al. 2025): group advantages scaled by the std, clip 0.2 / 0.28, no
    KL, the soft overlong punishment over the last fifth of the response budget (10 tokens here:
    2); ``--clip-eps-high 0.3`` given stays; the recipe is recorded in the settings."""
    from purejaxppo.cli.devices import count_devices
    from purejaxppo.cli.parser import build_parser
    from purejaxppo.cli.rlhf_cmd import rlhf_request
    from purejaxppo.programs.rlhf_session import SessionHooks, open_run
    from purejaxppo.run import processes

    monkeypatch.chdir(tmp_path)
    argv = ["rlhf", "--model", str(bad / "good"), "--prompts", str(bad / "prompts.jsonl"), "--quiet"]
    argv += ["--reward", f"{bad / 'reward.py'}:score", "--recipe", "dapo", "--group-size", "4"]
    args = build_parser().parse_args([*argv, "--clip-eps-high", "0.3", "--max-new-tokens", "10", "--run-dir", "r"])
    run = open_run(rlhf_request(args), SessionHooks(processes.current(), count_devices))
    c = run.config
    got = (c.advantage, c.clip_eps, c.clip_eps_high, c.beta, c.aggregation, c.overlong_buffer, c.max_new_tokens)
    assert got == ("grpo", 0.2, 0.3, 0.0, "token-mean", 2, 10)
    assert run.settings.recipe == "dapo" and c.group_size == 4
