"""Ctrl-C and SIGTERM on the language-model side (``rlhf``, ``reward``): at any moment the command
exits 130 / 143 with one line and no traceback, and leaves a folder that ``--resume`` continues
to the uninterrupted run's result (metrics.csv and the final checkpoint, compared exactly: the
same compiled chunks on the same restored state). What the line promises is in the folder.

The signal comes from the process itself at an exact moment: a script patches the function
running then (a chunk's dispatch, the evaluation, orbax's save, the SFT stage, a reward-model
chunk, the reward model's export) to signal its own process, or a Python reward function signals
itself on its Nth call (inside the compiled iteration: a host callback). The fast tests check
the pieces: a signal inside a host callback waits for it, a metrics.csv append is whole, the
samples file never shows an iteration twice, preference pairs that teach nothing are refused.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_reward_cli import folders  # noqa: F401  (the reward tests' model and pairs, made once)

from purejaxppo.run import signals
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = [
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
    "4",
    "--batch",
    "8",
    "--minibatches",
    "2",
    "--epochs",
    "1",
    "--chunk",
    "2",
    "--devices",
    "1",
]
SCRIPT = """
import os, signal, sys
calls = []
def signal_on(n, sig):  # signal this process on the n-th call of whatever calls it
    calls.append(1)
    if len(calls) == n:
        os.kill(os.getpid(), sig)
{patch}
from purejaxppo.cli.main import main
sys.exit(main({argv!r}))
"""
PATCHES = {  # the moment -> the patch that signals then (AT: which call, SIG: the signal)
    # a chunk dispatched (it runs on while the host goes on: the signal lands mid-chunk)
    "chunk": """
from purejaxppo.run.chunked_program import ChunkedProgram
real = ChunkedProgram.chunk
def chunk(self, *a, **k):
    out = real(self, *a, **k)
    signal_on(AT, SIG)
    return out
ChunkedProgram.chunk = chunk
""",
    # the first compile, before any iteration: the SFT model is saved as update 0
    "compile": """
from purejaxppo.run.chunked_program import ChunkedProgram
real = ChunkedProgram.compile
def compile(self, *a, **k):
    signal_on(AT, SIG)
    return real(self, *a, **k)
ChunkedProgram.compile = compile
""",
    "evaluation": """
from purejaxppo.programs.rlhf_eval import RLHFEvaluator
real = RLHFEvaluator.evaluate
def evaluate(self, *a, **k):
    signal_on(AT, SIG)
    return real(self, *a, **k)
RLHFEvaluator.evaluate = evaluate
""",
    "checkpoint": """
import orbax.checkpoint as ocp
real = ocp.PyTreeCheckpointer.save
def save(self, path, *a, **k):
    if "update_" in str(path):
        signal_on(AT, SIG)
    return real(self, path, *a, **k)
ocp.PyTreeCheckpointer.save = save
""",
    "sft": """
import purejaxppo.programs.rlhf_run as m
real = m.train_sft
def train_sft(*a, **k):
    signal_on(AT, SIG)
    return real(*a, **k)
m.train_sft = train_sft
""",
    "export": """
import purejaxppo.programs.reward_run as m
real = m.save_reward_model
def save_reward_model(*a, **k):
    signal_on(AT, SIG)
    return real(*a, **k)
m.save_reward_model = save_reward_model
""",
    "none": "",
}


def _default_sigint():
    # a shell starts background jobs with SIGINT ignored, and children inherit it: start from a terminal's
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(argv, moment="none", at=1, sig=signal.SIGINT, env=None):
    patch = PATCHES[moment].replace("AT", str(at)).replace("SIG", str(int(sig)))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(patch=patch, argv=list(argv))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        preexec_fn=_default_sigint,
    )


def _stopped(p, sig=signal.SIGINT) -> str:
    """The one line an interrupted command prints (checked: exit code, no traceback)."""
    assert p.returncode == (143 if sig == signal.SIGTERM else 130), (p.returncode, p.stderr[-3000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), lines
    return lines[0]


def _promised(line: str, run: str, command: str = "rlhf") -> str:
    """The checkpoint the line names, which exists, and the resume command of the real folder."""
    assert f"`python -m purejaxppo {command} --resume {run}`" in line, line
    path = line.split("progress saved in ")[1].split(" (update")[0]
    assert os.path.isdir(path) and path == latest_checkpoint(os.path.join(run, "checkpoints")), line
    return path


def _table(run, drop=("reward_fn_s",)):
    """metrics.csv without its wall-clock columns (host seconds are never the same twice)."""
    with open(os.path.join(run, "metrics.csv")) as f:
        rows = list(csv.reader(f))
    keep = [i for i, name in enumerate(rows[0]) if name not in drop]
    return [[r[i] for i in keep] for r in rows]


def _same_run(a, b):
    """Resumed == uninterrupted: metrics.csv rows and every leaf of the final checkpoint, exactly."""
    assert _table(a) == _table(b)
    (la, ma), (lb, mb) = (read_leaves(latest_checkpoint(os.path.join(r, "checkpoints"))) for r in (a, b))
    assert ma["update"] == mb["update"] and la.keys() == lb.keys()
    for k in la:
        np.testing.assert_array_equal(np.asarray(la[k]), np.asarray(lb[k]), err_msg=k)


# --- fast: the pieces ---------------------------------------------------------------------
def _signalling_callback(sig, frames=None):
    def host(x):
        if frames is not None:
            frames.append(sys._getframe())
        elif threading.current_thread() is threading.main_thread():
            os.kill(os.getpid(), sig)  # Python runs the handler at once: inside the callback
        return np.asarray(x) * 2

    return jax.jit(lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1)


def test_the_handler_keeps_a_signal_that_lands_in_a_host_callback():
    frames = []
    _signalling_callback(signal.SIGINT, frames)(jnp.ones(2)).block_until_ready()
    try:
        try:
            signals._handler(signal.SIGTERM, frames[0])  # as if it had landed there: kept, not raised
        except KeyboardInterrupt:
            pytest.fail("raised inside a host callback")
        assert signals.pending() and str(signals.take()) == "SIGTERM" and not signals.pending()
        with pytest.raises(KeyboardInterrupt):
            signals._handler(signal.SIGINT, sys._getframe())  # anywhere else: raised
    finally:
        signals.take()


@pytest.mark.parametrize("sig, text", [(signal.SIGINT, ""), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_inside_a_host_callback_waits_for_the_program(sig, text):
    """The real thing, where XLA runs the callback on the main thread (CPU does, as a rule)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            with signals.interrupts_at_safe_points():
                y = _signalling_callback(sig)(jnp.ones(3))
                if not signals.pending():
                    pytest.skip("XLA ran the callback on a thread of its own here")
                np.testing.assert_array_equal(np.asarray(y), [3.0, 3.0, 3.0])  # the program finished
                assert signals.pending()
                caught = signals.take()
                assert isinstance(caught, KeyboardInterrupt) and str(caught) == text and not signals.pending()
                os.kill(os.getpid(), sig)  # outside a callback: raised at once
                pytest.fail("not raised")
        assert str(e.value) == text
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers back
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_kept_signal_is_never_lost():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals.interrupts_at_safe_points():
                _signalling_callback(signal.SIGINT)(jnp.ones(2)).block_until_ready()
                if not signals.pending():
                    pytest.skip("XLA ran the callback on a thread of its own here")
        assert not signals.pending()
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_second_signal_inside_a_hanging_callback_stops_at_once():
    """Ctrl-C again while the callback still runs (a reward function that hangs): one line, the
    signal's exit code, no traceback, without waiting for the callback."""
    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        import jax, jax.numpy as jnp, numpy as np
        from purejaxppo.run import signals
        def host(x):
            if threading.current_thread() is not threading.main_thread():
                os._exit(5)  # XLA ran it on a thread of its own: nothing to check here
            os.kill(os.getpid(), signal.SIGINT)  # kept
            os.kill(os.getpid(), signal.SIGINT)  # again: stops now
            time.sleep(60)  # hangs
            return x
        f = jax.jit(lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
        with signals.interrupts_at_safe_points("; KEPT"):
            f(jnp.ones(2)).block_until_ready()
    """)
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=50,
        env={**os.environ, "PYTHONPATH": ROOT},
        preexec_fn=_default_sigint,
    )
    if p.returncode == 5:
        pytest.skip("XLA ran the callback on a thread of its own here")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 130 and len(lines) == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert lines[0].startswith("interrupted again") and lines[0].endswith("; KEPT"), lines


def test_a_signal_during_a_metrics_append_leaves_whole_rows(tmp_path, monkeypatch):
    from purejaxppo.run import metrics_file
    from purejaxppo.run.metrics_file import MetricsWriter

    path = str(tmp_path / "metrics.csv")
    w = MetricsWriter(path, batch_size=4)
    w.write({"loss": np.ones((2, 3), np.float32)}, 0)
    real, sent = os.write, []

    def short_write(fd, data):  # the kernel takes half, a signal arrives between the two writes
        if not sent:
            sent.append(1)
            n = real(fd, bytes(data[: len(data) // 2]))
            os.kill(os.getpid(), signal.SIGINT)
            return n
        return real(fd, data)

    monkeypatch.setattr(metrics_file.os, "write", short_write)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # raised once the rows are whole
            w.write({"loss": np.full((2, 3), 2.0, np.float32)}, 3)
    finally:
        signal.signal(signal.SIGINT, old)
    text = open(path).read()
    assert text.endswith("\n")
    rows = list(csv.reader(text.splitlines()))
    assert len(rows) == 1 + 12 and all(len(r) == 3 for r in rows)


def test_an_unsound_chunk_keeps_only_its_finished_rows():
    from purejaxppo.run.guards import rows_to_keep

    m = {"score": np.array([[1.0, 2.0, np.nan, np.nan]]), "eval_score": np.full((1, 4), np.nan)}
    named = "non-finite score (nan) at update 2 of metrics.csv (seed 0)"
    assert rows_to_keep(m, named, caught=False, skip=("eval_",)) == 3  # the row the message points to
    assert rows_to_keep(m, "the reward function f raised ...", caught=False, skip=("eval_",)) == 2
    assert rows_to_keep(m, named, caught=True, skip=("eval_",)) == 2  # a signal made that NaN: not a finished row
    finite = {"score": np.ones((1, 4))}
    assert rows_to_keep(finite, "non-finite parameters after updates 0..3 of metrics.csv", caught=False) == 4
    assert rows_to_keep(finite, None, caught=True) == 3  # the evaluation at the chunk's end was cut short


def test_samples_never_show_an_iteration_twice(tmp_path):
    from purejaxppo.programs.rlhf_eval import shown_iterations, write_samples

    path = str(tmp_path / "samples.txt")
    for update in (2, 4, 6):
        write_samples(path, update, [f"a{update}", f"b{update}"])
    write_samples(path, 4, ["again"])  # a resume from iteration 2 evaluates iteration 4 again
    assert shown_iterations(path) == [2, 4]
    assert open(path).read() == "# iteration 2, run 0, greedy\na2\nb2\n# iteration 4, run 0, greedy\nagain\n"


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"prompt": "p", "chosen": "same", "rejected": "same"}, "chosen and rejected are the same text"),
        ({"prompt": "p", "chosen": "", "rejected": "no"}, "chosen is empty"),
        ({"prompt": "p", "chosen": "yes", "rejected": "  "}, "rejected is empty"),
    ],
)
def test_pairs_that_teach_nothing_are_refused_naming_the_line(tmp_path, row, reason):
    from purejaxppo.lm.data.preferences import PairsFileError, read_pairs

    path = tmp_path / "pairs.jsonl"
    good = {"prompt": "p", "chosen": "yes", "rejected": "no"}
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, good, row)))
    with pytest.raises(PairsFileError) as e:
        read_pairs(str(path))
    assert f"line 3: {reason}" in str(e.value), e.value


def test_pairs_the_cut_makes_equal_are_refused():
    from purejaxppo.lm.data.preferences import PairsFileError, tokenize_pairs

    rows = [{"prompt": "p", "chosen": "a b c", "rejected": "a b d"}, {"prompt": "p", "chosen": "x", "rejected": "y"}]
    encode = lambda text: [ord(ch) for ch in text]  # noqa: E731
    tokenize_pairs(rows, encode, max_prompt=4, max_response=8, eos_id=1)  # apart: fine
    with pytest.raises(PairsFileError) as e:
        tokenize_pairs(rows, encode, max_prompt=4, max_response=3, eos_id=1)  # "a b" both
    assert "pair 1" in str(e.value) and "--max-response" in str(e.value)


def test_an_interrupted_sft_stage_says_what_starts_over(monkeypatch):
    import purejaxppo.programs.rlhf_run as rlhf_run
    from purejaxppo.programs.rlhf_settings import RLHFSettings
    from purejaxppo.run.guards import TrainingInterrupted

    def interrupted(*a, **k):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(rlhf_run, "train_sft", interrupted)
    settings = RLHFSettings(task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=5)
    try:
        rlhf_run.sft_model(settings, 0)
        pytest.fail("not interrupted")
    except TrainingInterrupted as e:
        assert e.checkpoint is None and e.reason == "SIGTERM"  # nothing kept; exit 143
        assert "nothing of it is kept" in e.hint and "run the same command again" in e.hint
    except KeyboardInterrupt:
        pytest.fail("a bare KeyboardInterrupt: the message cannot say what starts over")


def test_the_command_prints_what_an_interrupted_sft_stage_starts_over(monkeypatch, tmp_path, capsys):
    """The rlhf command's line for an SFT interrupt carries the hint (exit 143 for SIGTERM)."""
    import purejaxppo.programs.rlhf_run as rlhf_run
    from purejaxppo.cli.main import main
    from purejaxppo.run.guards import TrainingInterrupted

    def interrupted(*a, **k):
        raise TrainingInterrupted(None, 0, "SIGTERM", hint="nothing of it is kept; run the same command again")

    monkeypatch.setattr(rlhf_run, "sft_model", interrupted)
    rc = main(["rlhf", "--task", "reverse", "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 143
    assert "interrupted; nothing of it is kept; run the same command again" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["same-text", "empty", "same-after-the-cut"])
def test_the_reward_command_refuses_pairs_that_teach_nothing(folders, tmp_path, capsys, case):  # noqa: F811
    from purejaxppo.cli.main import main

    _, model, pairs = folders
    bad, extra = tmp_path / "pairs.jsonl", []
    rows = pairs.read_text()
    if case == "same-text":
        bad.write_text(rows + json.dumps({"prompt": "x", "chosen": "a cat", "rejected": "a cat"}) + "\n")
    elif case == "empty":
        bad.write_text(rows + json.dumps({"prompt": "x", "chosen": "a cat", "rejected": ""}) + "\n")
    else:  # every response starts with its topic: one token keeps only that
        bad.write_text(rows)
        extra = ["--max-response", "1"]
    run = tmp_path / "run"
    code = main(["reward", "--model", str(model), "--pairs", str(bad), *extra, "--run-dir", str(run), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    want = {"same-text": "line 97: chosen and rejected are the same text", "empty": "line 97: rejected is empty"}
    assert want.get(case, "pair 1 (non-blank line 1): chosen and rejected are the same") in err[0], err[0]
    assert not run.exists()


# --- slow: the command line, interrupted at each moment, resumed ---------------------------
@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted toy run every resumed one is compared with."""
    run = str(tmp_path_factory.mktemp("straight") / "run")
    p = _cli([*TOY, "--eval-every", "2", "--quiet", "--run-dir", run])
    assert p.returncode == 0, p.stderr[-3000:]
    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment, at, sig",
    [
        ("evaluation", 1, signal.SIGINT),  # the first evaluation (iteration 2): no metrics.csv yet
        ("evaluation", 2, signal.SIGTERM),  # the last one (iteration 4): its rows not written yet
        ("chunk", 2, signal.SIGINT),  # iterations 2-3 dispatched, 0-1 not yet written
        ("checkpoint", 1, signal.SIGTERM),  # inside the save of update 2: it finishes first
    ],
)
def test_an_interrupted_toy_run_resumes_to_the_uninterrupted_result(straight, tmp_path, moment, at, sig):
    run = str(tmp_path / "run")
    line = _stopped(_cli([*TOY, "--eval-every", "2", "--quiet", "--run-dir", run], moment, at, sig), sig)
    _promised(line, run)
    assert not [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".")]
    p = _cli(["rlhf", "--resume", run, "--quiet"])
    assert p.returncode == 0, p.stderr[-3000:]
    _same_run(run, straight)
    assert open(os.path.join(run, "samples.txt")).read() == open(os.path.join(straight, "samples.txt")).read()


@pytest.mark.slow
def test_interrupted_in_the_first_compile_or_crashed_before_the_first_checkpoint(straight, tmp_path):
    """A signal in the first compile keeps the SFT model (update 0); a folder a crash left
    without any checkpoint (config.json only) starts over from the SFT stage: both resume to
    the uninterrupted result."""
    import shutil

    run, bare = str(tmp_path / "run"), str(tmp_path / "bare")
    line = _stopped(
        _cli([*TOY, "--eval-every", "2", "--quiet", "--run-dir", run], "compile", 1, signal.SIGTERM), signal.SIGTERM
    )
    assert _promised(line, run).endswith("update_00000000")
    shutil.copytree(run, bare)
    shutil.rmtree(os.path.join(bare, "checkpoints"))
    for folder in (run, bare):
        p = _cli(["rlhf", "--resume", folder, "--quiet"])
        assert p.returncode == 0, p.stderr[-3000:]
        _same_run(folder, straight)


@pytest.mark.slow
def test_an_interrupted_sft_stage_says_it_starts_over_and_keeps_no_folder(tmp_path):
    run = str(tmp_path / "run")
    p = _cli([*TOY, "--quiet", "--run-dir", run], "sft", 1, signal.SIGINT)
    _stopped(p)
    assert "progress saved" not in p.stderr and not os.path.exists(run)  # nothing promised, nothing half made


@pytest.mark.slow
def test_samples_at_the_final_iteration_without_an_evaluation_there(tmp_path):
    """--eval-every 0 and a run shorter than --eval-every: samples.txt shows the final
    iteration, and the closing message names only files the folder holds."""
    for every in ("0", "10"):
        run = str(tmp_path / f"every{every}")
        p = _cli([*TOY, "--run-dir", run, "--eval-every", every])
        assert p.returncode == 0, p.stderr[-3000:]
        text = open(os.path.join(run, "samples.txt")).read()
        assert text.count("# iteration ") == 1 and "# iteration 4, run 0, greedy" in text, text
        wrote = [ln for ln in p.stdout.splitlines() if ln.startswith("wrote ")][0]
        held = wrote.split("(")[1].split(")")[0].split(", ")
        assert held and all(os.path.exists(os.path.join(run, n)) for n in held), wrote


@pytest.mark.slow
@pytest.mark.xdist_group("multiprocess")  # one at a time: each uses both cores
def test_samples_at_the_final_iteration_across_processes(tmp_path):
    """Two processes (no evaluation during training there): process 0 writes the final
    iteration's samples, process 1 nothing, and the closing message names what exists."""
    from test_multiprocess import _finish, _start

    assert TOY[-2:] == ["--devices", "1"]
    argv = [*TOY[:-2], "--quiet", "--run-dir", "run", "--devices", "all"]
    results = _finish(_start(tmp_path, argv))
    for code, _out, err in results:
        assert code == 0, err[-3000:]
    text = open(tmp_path / "p0" / "run" / "samples.txt").read()
    assert text.count("# iteration ") == 1 and "# iteration 4, run 0, greedy" in text, text
    assert os.listdir(tmp_path / "p1") == []


def _text_setup(root):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _lm_fixtures import tiny_gpt2_folder

    model = tiny_gpt2_folder(root / "model")
    prompts = [{"prompt": "what is one plus two"}, {"prompt": "reverse cat dog"}, {"prompt": "hello"}]
    (root / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    (root / "reward.py").write_text(
        "import os, signal\n"
        "calls = []\n"
        "def score(prompts, responses):\n"
        "    calls.append(1)\n"
        "    if len(calls) == int(os.environ.get('SIGNAL_AT', 0)):\n"
        "        os.kill(os.getpid(), int(os.environ['SIGNAL']))\n"
        "    if len(calls) == int(os.environ.get('RAISE_AT', 0)):\n"
        "        raise ValueError('bad row')\n"
        "    return [float(len(r.split())) for r in responses]\n"
    )
    return [
        "rlhf",
        "--model",
        model,
        "--prompts",
        str(root / "prompts.jsonl"),
        "--reward",
        str(root / "reward.py") + ":score",
        "--iterations",
        "4",
        "--batch",
        "4",
        "--minibatches",
        "2",
        "--epochs",
        "1",
        "--max-new-tokens",
        "4",
        "--eval-every",
        "2",
        "--devices",
        "1",
        "--quiet",
    ]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    argv = _text_setup(root)
    run = str(root / "straight")
    p = _cli([*argv, "--chunk", "2", "--run-dir", run])
    assert p.returncode == 0, p.stderr[-3000:]
    return argv, run


@pytest.mark.slow
@pytest.mark.parametrize("at, sig", [(2, signal.SIGINT), (4, signal.SIGTERM), (5, signal.SIGINT)])
def test_a_signal_inside_the_python_reward_resumes_to_the_uninterrupted_result(text, tmp_path, at, sig):
    """Calls of the reward: 1 the SFT model's evaluation, then per chunk of 2 iterations one per
    iteration, the evaluation after each chunk: 2-3 chunk 0, 4 its evaluation, 5-6 chunk 1."""
    argv, straight_run = text
    run = str(tmp_path / "run")
    p = _cli([*argv, "--chunk", "2", "--run-dir", run], env={"SIGNAL_AT": str(at), "SIGNAL": str(int(sig))})
    _promised(_stopped(p, sig), run)
    # XLA runs the callback on the main thread (the signal waits for the chunk, which keeps its
    # finished iterations) or on a thread of its own (the signal acts in the main thread once the
    # chunk is back, keeping none of it): either way metrics.csv holds finished iterations only
    if os.path.exists(os.path.join(run, "metrics.csv")):
        with open(os.path.join(run, "metrics.csv")) as f:
            assert all(np.isfinite(float(r["score"])) for r in csv.DictReader(f))
    p = _cli(["rlhf", "--resume", run, "--quiet"])
    assert p.returncode == 0, p.stderr[-3000:]
    _same_run(run, straight_run)


@pytest.mark.slow
def test_a_reward_that_raises_names_the_run_folder_and_leaves_no_nan_row(text, tmp_path):
    argv, _ = text
    run = str(tmp_path / "run")
    p = _cli([*argv, "--chunk", "2", "--run-dir", run], env={"RAISE_AT": "6"})  # chunk 1's second iteration
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "RUN_DIR" not in errors[0] and f"rlhf --resume {run}" in errors[0], errors[0]
    with open(os.path.join(run, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    # iteration 2 finished (kept), iteration 3 never did (no row)
    assert [r["update"] for r in rows] == ["0", "1", "2"] and all(np.isfinite(float(r["score"])) for r in rows)


# --- reward-model training -----------------------------------------------------------------
@pytest.fixture(scope="module")
def pairs(folders):  # noqa: F811
    root, model, path = folders
    argv = ["reward", "--model", str(model), "--pairs", str(path), "--epochs", "3", "--minibatch", "8"]
    argv += ["--lr", "3e-3", "--held-out", "0.25", "--quiet"]
    run = str(root / "straight")
    p = _cli([*argv, "--run-dir", run])
    assert p.returncode == 0, p.stderr[-3000:]
    return argv, run


@pytest.mark.slow
@pytest.mark.parametrize("moment, at, sig", [("chunk", 2, signal.SIGTERM), ("export", 1, signal.SIGINT)])
def test_an_interrupted_reward_model_run_resumes_to_the_uninterrupted_result(pairs, tmp_path, moment, at, sig):
    argv, straight_run = pairs
    run = str(tmp_path / "run")
    _promised(_stopped(_cli([*argv, "--run-dir", run], moment, at, sig), sig), run, "reward")
    assert not os.path.exists(os.path.join(run, "model"))  # never half written
    p = _cli(["reward", "--resume", run, "--quiet"])
    assert p.returncode == 0, p.stderr[-3000:]
    _same_run(run, straight_run)
    assert sorted(os.listdir(os.path.join(run, "model"))) == sorted(os.listdir(os.path.join(straight_run, "model")))
