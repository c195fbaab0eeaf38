"""Training on several processes (jax.distributed on localhost) equals one process with as many
devices, process 1 writes nothing, and a lost process stops the others with one error line.

Each run here is 2 processes x 1 CPU device, started as a user would (the CLI with
--coordinator/--num-processes/--process-id, or scripts/launch_local.sh), next to the same
run in ONE process with 2 forced host devices. The two are different programs (collectives
over gloo between processes vs. inside one process), so they are compared to a float
tolerance (relative 1e-5), never bit for bit. Process 1 runs in a folder of its own with the
same RELATIVE --run-dir: anything it wrote would appear there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves
from purejaxppo.run.metrics_file import load_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.xdist_group("multiprocess")  # one at a time: each uses both cores
SMALL = ["--env", "CartPole-v1", "--num-steps", "16", "--chunk", "2", "--quiet"]


def _env(devices: int = 1) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp, args, n: int = 2):
    """``n`` processes of ``python -m purejaxppo ARGS``, process ``i`` in ``tmp/p{i}``."""
    port, procs = _port(), []
    for i in range(n):
        cwd = tmp / f"p{i}"
        cwd.mkdir(exist_ok=True)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "purejaxppo",
                    *args,
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    str(n),
                    "--process-id",
                    str(i),
                ],
                cwd=cwd,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _finish(procs, timeout: float = 600):
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, so, se))
    return out


def _one_process(tmp, args, name: str = "ref"):
    proc = subprocess.run(
        [sys.executable, "-m", "purejaxppo", *args, "--run-dir", name, "--devices", "2"],
        cwd=tmp,
        env=_env(2),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / name


def _metrics(run_dir):
    header, rows, partial = load_rows(str(run_dir / "metrics.csv"))
    assert not partial
    return header, np.array([[float(x) if x.strip() else np.nan for x in r] for r in rows])


def _assert_same_run(a, b):
    """Same metrics.csv (rows, columns, values to relative 1e-5) and the same final checkpoint."""
    (ha, ma), (hb, mb) = _metrics(a), _metrics(b)
    assert ha == hb and ma.shape == mb.shape and len(ma) > 0
    np.testing.assert_allclose(ma, mb, rtol=1e-5, atol=1e-7, equal_nan=True)
    (la, meta_a), (lb, meta_b) = (read_leaves(latest_checkpoint(str(r / "checkpoints"))) for r in (a, b))
    assert meta_a["update"] == meta_b["update"] and la.keys() == lb.keys()
    for k in la:
        np.testing.assert_allclose(
            np.asarray(la[k], np.float64), np.asarray(lb[k], np.float64), rtol=1e-5, atol=1e-6, err_msg=k
        )


def _ok(results):
    for code, _, se in results:
        assert code == 0, se[-3000:]


@pytest.mark.slow
def test_envs_split_gru_normalised_two_processes_equal_two_devices(tmp_path):
    """ONE agent, its envs over 2 processes: gradients, advantage normalisation and the running
    observation/reward statistics are averaged over both; GRU sequences split with the envs."""
    args = [
        "train",
        *SMALL,
        "--split",
        "envs",
        "--num-envs",
        "4",
        "--total-timesteps",
        "256",
        "--network",
        "gru",
        "--normalize-obs",
        "true",
        "--normalize-reward",
        "true",
        "--num-minibatches",
        "2",
    ]
    _ok(_finish(_start(tmp_path, args + ["--run-dir", "run"])))
    _assert_same_run(tmp_path / "p0" / "run", _one_process(tmp_path, args))
    assert sorted(os.listdir(tmp_path / "p1")) == []  # process 1 wrote nothing, not even the folder


@pytest.mark.slow
def test_sweep_over_two_processes_with_launch_script(tmp_path):
    """--split seeds: each process runs its share of the runs (2 members x 2 seeds); the
    metrics are gathered to process 0, which writes them. Started by scripts/launch_local.sh."""
    args = ["train", *SMALL, "--num-envs", "4", "--total-timesteps", "128", "--seeds", "2", "--sweep", "lr=1e-3,3e-4"]
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "launch_local.sh"), "2", *args, "--run-dir", "run"],
        cwd=tmp_path,
        env=dict(_env(), PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| member | lr |" in proc.stdout and proc.stdout.count("| member | lr |") == 1  # process 0 alone reports
    _assert_same_run(tmp_path / "run", _one_process(tmp_path, args))


@pytest.mark.slow
def test_pbt_members_over_two_processes(tmp_path):
    """PBT's exploit step gathers every member's score across the processes: the same copies
    (lineage.csv) and numbers as one process with 2 devices."""
    args = [
        "train",
        *SMALL,
        "--num-envs",
        "4",
        "--total-timesteps",
        "512",
        "--pbt",
        "4",
        "--search",
        "lr=loguniform:1e-4:1e-2",
        "--pbt-interval",
        "4",
    ]
    _ok(_finish(_start(tmp_path, args + ["--run-dir", "run"])))
    ref = _one_process(tmp_path, args)
    _assert_same_run(tmp_path / "p0" / "run", ref)
    assert (tmp_path / "p0" / "run" / "lineage.csv").read_text() == (ref / "lineage.csv").read_text()
    assert sorted(os.listdir(tmp_path / "p1")) == []


@pytest.mark.slow
def test_killed_process_stops_the_other_then_both_resume_exactly(tmp_path):
    """SIGKILL process 1 after the first checkpoint: process 0 exits non-zero within 60 s with
    one error line naming process 1; restarting both with --resume finishes the run with the
    numbers of an uninterrupted one."""
    args = [
        "train",
        *SMALL,
        "--split",
        "envs",
        "--num-envs",
        "4",
        "--total-timesteps",
        "2048",
        "--checkpoint-every",
        "1",
    ]
    procs = _start(tmp_path, args + ["--run-dir", "run"])
    ckpts = tmp_path / "p0" / "run" / "checkpoints"
    deadline = time.time() + 300
    while latest_checkpoint(str(ckpts)) is None and time.time() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    assert latest_checkpoint(str(ckpts)) is not None, "no checkpoint was written"
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.time()
    (code0, _, err0), _ = _finish(procs, timeout=120)
    waited = time.time() - killed_at
    assert code0 != 0 and waited < 60, (code0, waited)
    errors = [line for line in err0.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "lost process 1" in errors[0] and "--resume run" in errors[0], err0[-2000:]
    assert "Traceback" not in err0
    _ok(_finish(_start(tmp_path, ["train", "--resume", "run", "--quiet"])))
    _assert_same_run(tmp_path / "p0" / "run", _one_process(tmp_path, args))
    assert sorted(os.listdir(tmp_path / "p1")) == []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--coordinator", "127.0.0.1:1234"], "needs --num-processes, --process-id too"),
        (["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"], "must be HOST:PORT"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"], "must be in 0..1"),
        (["--distributed", "--process-id", "0"], "--distributed takes the process layout from the launcher"),
        (
            ["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "0", "--eval-every", "2"],
            "--eval-every does not run across processes",
        ),
    ],
)
def test_process_flags_are_checked_before_joining(tmp_path, flags, message):
    """Bad process flags fail at once with one error line (nothing waits for a coordinator)."""
    proc = subprocess.run(
        [sys.executable, "-m", "purejaxppo", "train", "--run-dir", "r", *flags],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and message in proc.stderr, proc.stderr
