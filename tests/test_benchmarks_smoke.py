"""benchmarks/ cannot rot: every script answers ``--help`` (its imports and argument parser
work), every helper compiles, the commands of ``benchmarks/README.md`` and ``gpu_figures.sh`` use
flags their script has, and (slow tier) the scripts that need only this package run at a tiny size.

Scripts against other libraries (PureJaxRL, rejax, Brax, SB3, TRL, tunix) get ``--help`` only: their
peers live in side checkouts or virtual environments. ``_trl_side.py`` and ``_tunix_side.py`` run
inside those environments (``vs_trl.py`` / ``vs_tunix.py`` start them), so here they are compiled.
"""

import glob
import os
import py_compile
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCH, "[a-z]*.py")))
HELPERS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCH, "_*.py")))


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")


def _run(args, timeout=120, cwd=ROOT):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


_HELP: dict = {}


def _help(script: str) -> str:
    if script not in _HELP:
        out = _run([os.path.join("benchmarks", script), "--help"])
        assert out.returncode == 0, f"{script} --help failed:\n{out.stderr[-3000:]}"
        _HELP[script] = out.stdout
    return _HELP[script]


def test_the_scripts_are_found():
    assert {"vs_purejaxrl.py", "throughput.py", "vs_trl.py"} <= set(SCRIPTS) and "_common.py" in HELPERS


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_answers_help(script):
    assert "usage:" in _help(script)


@pytest.mark.parametrize("helper", HELPERS)
def test_helper_compiles(helper, tmp_path):
    py_compile.compile(os.path.join(BENCH, helper), cfile=str(tmp_path / "x.pyc"), doraise=True)


def _commands():
    """``(where, script, [flags])`` of every ``python benchmarks/<script>.py ...`` command in the
    benchmarks' README table and gpu_figures.sh."""
    out = []
    for name in ("README.md", "gpu_figures.sh"):
        for n, line in enumerate(open(os.path.join(BENCH, name)), 1):
            for m in re.finditer(r"python (?:-m \S+ )?benchmarks/([a-z]\w*\.py)([^`|;\n]*)", line):
                flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2))
                out.append((f"{name}:{n}", m.group(1), flags))
    return out


def test_documented_commands_use_flags_the_scripts_have():
    commands = _commands()
    assert len(commands) >= 20  # the table and the GPU script were read
    bad = []
    for where, script, flags in commands:
        if script not in SCRIPTS:
            bad.append(f"{where}: {script} does not exist")
            continue
        text = _help(script)
        bad += [f"{where}: {script} has no {f}" for f in flags if not re.search(rf"(?<![\w-]){f}(?![\w-])", text)]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_figures_script_parses():
    out = subprocess.run(["bash", "-n", os.path.join(BENCH, "gpu_figures.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


TINY = {  # the scripts that need only this package, at a size that runs in seconds (plus compile)
    "throughput.py": [
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
    ],
    "scaling.py": [
        "--envs",
        "2",
        "--seeds",
        "1",
        "--tasks",
        "CartPole-v1",
        "--num-steps",
        "8",
        "--updates",
        "1",
        "--min-steps",
        "16",
        "--repeats",
        "1",
        "--out",
        "OUT/scaling",
    ],
    "gru_sequence.py": ["--batch", "1", "--steps", "4", "--size", "4", "--iters", "1", "--json", "OUT/g.json"],
    "profile_step.py": ["--env", "CartPole-v1", "--total-timesteps", "1024", "--repeats", "1", "--json", "OUT/p.json"],
    "lm_generation.py": ["--lengths", "4", "--batch", "2", "--rounds", "1", "--json", "OUT/lg.json"],
    "lm_iteration.py": [
        "--lengths",
        "4",
        "--batch",
        "4",
        "--epochs",
        "1",
        "--minibatches",
        "1",
        "--rounds",
        "1",
        "--json",
        "OUT/li.json",
    ],
    "lm_135m.py": [
        "--shape",
        "tiny",
        "--skip-trl",
        "--modes",
        "full,lora-bf16",
        "--batch",
        "2",
        "--prompt",
        "4",
        "--response",
        "4",
        "--minibatches",
        "1",
        "--iterations",
        "1",
        "--json",
        "OUT/l135.json",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(TINY))
def test_script_runs_at_a_tiny_size(script, tmp_path):
    args = [a.replace("OUT", str(tmp_path)) for a in TINY[script]]
    out = _run([os.path.join("benchmarks", script), *args], timeout=600)
    assert out.returncode == 0, f"{script} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    written = [a for a in args if a.startswith(str(tmp_path))]
    assert all(glob.glob(w + "*") for w in written), (written, os.listdir(tmp_path))


def test_the_shared_timing_loop_interleaves_the_sides():
    """benchmarks/_common.py's loop, which every side-by-side script times with: round by round,
    each side once in order, every call seen (output ready, wall and cores), each inside the guard."""
    import contextlib

    sys.path.insert(0, BENCH)
    try:
        from _common import interleaved_rounds
    finally:
        sys.path.remove(BENCH)
    calls, seen, guarded = [], [], []

    @contextlib.contextmanager
    def guard(r, label):
        guarded.append((r, label, "in"))
        yield
        guarded.append((r, label, "out"))

    def side(label):
        return lambda: calls.append(label) or f"{label}{len(calls)}"

    rec = interleaved_rounds(
        {"a": side("a"), "b": side("b")},
        3,
        lambda r, label, t: seen.append((r, label, t.out, t.wall_s > 0, t.cores >= 0)),
        guard,
    )
    assert calls == ["a", "b"] * 3
    assert seen == [(r, lab, f"{lab}{2 * r + (lab == 'b') + 1}", True, True) for r in range(3) for lab in "ab"]
    assert guarded == [(r, lab, io) for r in range(3) for lab in "ab" for io in ("in", "out")]
    assert [len(rec[k].times) for k in "ab"] == [3, 3] and all(t > 0 for t in rec["a"].times)


@pytest.mark.parametrize(
    "script, args, flag",
    [
        ("vs_trl.py", ["--lengths", "16,1024", "--skip-learning"], "--lengths 16,1024"),  # 288 positions
        ("lm_135m.py", ["--modes", "full,lora16", "--skip-trl"], "--modes full,lora16"),
    ],
)
def test_bad_flags_exit_2_before_creating_anything(script, args, flag, tmp_path):
    """One ``error:`` line naming the flag as typed, exit 2, no JSON written (before any model work)."""
    out_json = tmp_path / "out.json"
    out = _run([os.path.join("benchmarks", script), *args, "--json", str(out_json)])
    assert out.returncode == 2, (out.stdout[-1000:], out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and flag in errors[0], out.stderr
    assert not out_json.exists()
