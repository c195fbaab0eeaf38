"""A preemption (SIGTERM) or Ctrl-C that arrives WHILE a checkpoint is being written: the save
finishes, the run stops with one line naming the checkpoint that really exists, the exit code
is the signal's (130 / 143), no traceback, no partial folder, and the resume equals the
uninterrupted run. The signal is sent from inside orbax's save, so the timing is exact."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from purejaxppo.run.checkpoint import list_checkpoints, read_meta
from purejaxppo.run.guards import interrupts_deferred

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "2",
    "--num-steps",
    "8",
    "--total-timesteps",
    "256",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "1",
    "--devices",
    "1",
    "--chunk",
    "4",
    "--checkpoint-every",
    "1",
    "--quiet",
    "--no-compile-cache",
]

# Runs the CLI with orbax's save patched to signal its own process halfway through the save
# of update SAVE_AT (after the first array write has started), then go on saving.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import orbax.checkpoint as ocp
    real = ocp.PyTreeCheckpointer.save
    def save(self, path, *a, **k):
        if "update_{at:08d}" in path:
            os.kill(os.getpid(), {sig})
        return real(self, path, *a, **k)
    ocp.PyTreeCheckpointer.save = save
    from purejaxppo.cli import main
    sys.exit(main({argv!r}))
""")


def _run(tmp_path, sig, at, extra=()):
    run = str(tmp_path / "run")
    argv = ["train", *TINY, "--run-dir", run, *extra]
    code = SCRIPT.format(at=at, sig=int(sig), argv=argv)
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600, preexec_fn=_default_sigint
    )
    return run, p


@pytest.mark.parametrize("sig, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_a_save_finishes_it_and_exits_cleanly(tmp_path, sig, exit_code):
    run, p = _run(tmp_path, sig, at=8)
    assert p.returncode == exit_code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "Fatal" not in p.stderr, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    ckpts = list_checkpoints(os.path.join(run, "checkpoints"))
    assert ckpts and ckpts[-1][0] == 8  # the save that was under way finished
    assert ckpts[-1][1] in lines[0] and "update 8" in lines[0]  # the message names what exists
    assert int(read_meta(ckpts[-1][1])["update"]) == 8
    leftovers = [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".tmp-")]
    assert not leftovers


def test_resume_after_a_signal_during_a_save_equals_the_uninterrupted_run(tmp_path):
    run, p = _run(tmp_path, signal.SIGTERM, at=8)
    assert p.returncode == 143, p.stderr[-2000:]
    from purejaxppo.cli import main

    assert main(["train", "--resume", run, "--quiet", "--no-compile-cache"]) == 0
    straight = str(tmp_path / "straight")
    assert main(["train", *TINY, "--run-dir", straight]) == 0
    # exact by construction: the same chunk executables (chunk 4) fed the same states
    assert open(os.path.join(run, "metrics.csv")).read() == open(os.path.join(straight, "metrics.csv")).read()


def _default_sigint():
    # A shell starts background jobs with SIGINT ignored and children inherit that (Python then
    # installs no KeyboardInterrupt handler): the tests start from the disposition a terminal gives.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sigint_handled():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_interrupts_deferred_holds_a_signal_until_the_block_ends(sigint_handled):
    order = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            order.append("block finished")  # reached: the signal waits for the block
    assert order == ["block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back
