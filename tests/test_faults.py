"""Faults a run folder must survive: a wrong-kind resume, a second process, a cut metrics.csv,
a full disk, a finished run resumed again. Each compares against an uninterrupted run of the
same tiny config (``straight``), byte for byte where the issue asks for it."""

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from purejaxppo.run import run_lock
from purejaxppo.run.checkpoint import CheckpointError, list_checkpoints
from purejaxppo.cli import main
from purejaxppo.config import PPOConfig
from purejaxppo.run.guards import DivergenceWatch
from purejaxppo.run.metrics_file import complete_updates, load_rows

# crash recovery promises byte-equal folders at the optimisation users get (tests/conftest.py)
pytestmark = pytest.mark.optimised

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
    "--seeds",
    "2",
    "--devices",
    "1",
    "--chunk",
    "4",
    "--checkpoint-every",
    "1",
    "--quiet",
]
CFG = PPOConfig(
    env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=256, update_epochs=1, num_minibatches=1
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree_digest(folder):
    """{relative path: sha1} of every file, so 'nothing was changed' can be checked."""
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, folder)] = hashlib.sha1(open(p, "rb").read()).hexdigest()
    return out


def _read(path):
    return open(path, "rb").read()


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("faults") / "straight")
    assert main(["train", *TINY, "--run-dir", run]) == 0
    return run


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("faults") / "half")
    assert main(["train", *TINY, "--run-dir", run, "--stop-after", "8"]) == 0
    assert [u for u, _ in list_checkpoints(os.path.join(run, "checkpoints"))] == [4, 8]
    return run


def _copy(src, tmp_path, name="run"):
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def test_cut_metrics_tail_stale_lock_and_tmp_folder_resume_to_the_uninterrupted_result(
    half, straight, tmp_path, capsys
):
    run = _copy(half, tmp_path)
    metrics = os.path.join(run, "metrics.csv")
    data = _read(metrics)
    open(metrics, "wb").write(data[:-37])  # a crash mid-row: the last row (run 1, update 7) is partial
    with open(os.path.join(run, run_lock.LOCK), "w") as f:
        f.write("999999999\n")  # the pid of a process long gone: a stale lock, not a busy folder
    os.makedirs(os.path.join(run, "checkpoints", ".tmp-update_00000012-12345", "state"))  # an interrupted save
    assert complete_updates(metrics, 2, 2) == 7
    assert main(["train", "--resume", run, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "recomputing from checkpoint update 4" in err and "Traceback" not in err, err
    assert _read(metrics) == _read(
        os.path.join(straight, "metrics.csv")
    )  # exact: the same command's chunks (--chunk 4)
    assert not [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".tmp-")]
    s, ref = (json.load(open(os.path.join(d, "summary.json"))) for d in (run, straight))
    assert s["final_return_per_seed"] == ref["final_return_per_seed"]  # exact: same chunks


def test_resuming_a_finished_run_changes_nothing(straight, tmp_path, capsys):
    run = _copy(straight, tmp_path)
    before = _tree_digest(run)
    assert main(["train", "--resume", run, "--quiet"]) == 0
    assert "already finished all 16 updates; nothing to do" in capsys.readouterr().out
    assert (
        _tree_digest(run) == before
    )  # exact: nothing is rewritten; summary.json, metrics.csv, config.json, checkpoints byte-identical


def _as_sweep(src, tmp_path):
    """A sweep folder (2 members x 1 seed) made from a finished single run: the same rows
    under a ``member`` column, config.json with kind=sweep and its members."""
    run = _copy(src, tmp_path, "sweep")
    info = json.load(open(os.path.join(run, "config.json")))
    info.update(kind="sweep", num_seeds=1, members=[{"lr": 1e-3}, {"lr": 3e-4}])
    json.dump(info, open(os.path.join(run, "config.json"), "w"), indent=2)
    header, rows, _ = load_rows(os.path.join(run, "metrics.csv"))
    with open(os.path.join(run, "metrics.csv"), "w") as f:
        f.write(",".join(["member"] + header) + "\n")
        f.writelines(",".join([r[0], "0"] + r[1:]) + "\n" for r in rows)
    return run


def test_a_sweep_folder_is_not_resumed_as_a_single_run(half, tmp_path, capsys):
    from purejaxppo.programs.runs import train_chunked

    run = _as_sweep(half, tmp_path)
    shutil.rmtree(os.path.join(run, "checkpoints"))  # even with no checkpoint to compare against
    before = _tree_digest(run)
    with pytest.raises(CheckpointError, match="holds a sweep, not a run; nothing was changed"):
        train_chunked(CFG, seed=0, num_seeds=1, run_dir=run, resume=True, chunk_updates=4)
    assert _tree_digest(run) == before
    info = json.load(open(os.path.join(run, "config.json")))
    json.dump(
        dict(info, kind="newkind"), open(os.path.join(run, "config.json"), "w")
    )  # a kind this command cannot resume
    before = _tree_digest(run)
    assert main(["train", "--resume", run, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "holds a 'newkind' run, which this purejaxppo does not know" in err and "Traceback" not in err, err
    assert _tree_digest(run) == before


def test_a_locked_folder_is_refused_naming_the_owner(half, tmp_path, capsys):
    run = _copy(half, tmp_path)
    before = _tree_digest(run)
    with run_lock.hold(run):
        assert main(["train", "--resume", run, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"in use by process {os.getpid()}" in err and "Traceback" not in err, err
    after = _tree_digest(run)
    assert {k: v for k, v in after.items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


def test_without_flock_a_live_pid_locks_and_a_dead_one_is_stale(tmp_path, monkeypatch):
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks on this file system")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    run = str(tmp_path)
    (tmp_path / ".lock").write_text(f"{os.getppid()}\n")  # alive
    with pytest.raises(run_lock.RunFolderBusy, match=f"process {os.getppid()}"):
        with run_lock.hold(run):
            pass
    (tmp_path / ".lock").write_text("999999999\n")  # dead
    with run_lock.hold(run):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    assert (tmp_path / ".lock").read_text() == ""


def test_two_simultaneous_resumes_leave_no_duplicate_rows(half, straight, tmp_path):
    run = _copy(half, tmp_path)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "purejaxppo", "train", "--resume", run, "--quiet"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 2]), outs
    for (out, err), p in zip(outs, procs):
        assert "Traceback" not in err, err
        if p.returncode == 2:
            assert "is in use by process" in err, err
        elif "already finished" not in out:  # the one that trained
            pass
    assert _read(os.path.join(run, "metrics.csv")) == _read(os.path.join(straight, "metrics.csv"))


def _one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("where", ["checkpoint", "metrics"])
def test_full_disk_ends_with_one_error_line_keeps_the_last_checkpoint_and_resumes_exactly(
    where, straight, tmp_path, monkeypatch, capsys
):
    import orbax.checkpoint as ocp

    import purejaxppo.run.sinks as sinks

    run = str(tmp_path / "run")
    calls = {"n": 0}
    if where == "checkpoint":
        original = ocp.PyTreeCheckpointer.save

        def save(self, *a, **kw):  # the 3rd save on finds the disk full
            calls["n"] += 1
            if calls["n"] >= 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return original(self, *a, **kw)

        monkeypatch.setattr(ocp.PyTreeCheckpointer, "save", save)
    else:
        real_write = os.write

        def write(fd, data):  # the 3rd chunk's rows: half of them reach the disk, then it is full
            if len(data) > 200:
                calls["n"] += 1
                if calls["n"] == 3:
                    real_write(fd, bytes(data[: len(data) // 2]))
                    raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(sinks.os, "write", write)
    assert main(["train", *TINY, "--run-dir", run]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and f"--resume {run}" in line and "Kept: checkpoint" in line, line
    ckpts = os.listdir(os.path.join(run, "checkpoints"))
    assert not [n for n in ckpts if n.startswith(".tmp-")], ckpts
    assert "update_00000008" in ckpts, ckpts  # the last good checkpoint is intact
    if where == "metrics":
        assert _read(os.path.join(run, "metrics.csv")).endswith(b"\r\n")  # no partial row left behind
    monkeypatch.undo()
    assert main(["train", "--resume", run, "--quiet"]) == 0
    assert _read(os.path.join(run, "metrics.csv")) == _read(os.path.join(straight, "metrics.csv"))


def _can_mount_tmpfs():
    if not shutil.which("unshare"):
        return False
    return (
        subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=300k tmpfs /tmp"], capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unshare + a user namespace to mount a tmpfs")
def test_a_real_300k_tmpfs_run_folder(tmp_path):
    """The issue's set-up: a 300 KB tmpfs as run folder (orbax needs ~160 KB for one checkpoint
    of this tiny run, so the disk fills at the first or second save)."""
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = (
        f"mount -t tmpfs -o size=300k tmpfs {mnt} && {sys.executable} -m purejaxppo train {' '.join(TINY)} "
        f"--run-dir {mnt}/run; echo rc=$?; ls -a {mnt}/run/checkpoints"
    )
    out = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "rc=1" in out.stdout, (out.stdout, out.stderr)
    line = _one_error_line(out.stderr)
    assert "No space left on device" in line and "Kept:" in line and "--resume" in line, line
    assert ".tmp-" not in out.stdout, out.stdout


def test_metrics_file_damage_is_told_apart(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("seed,update,x\r\n0,0,1\r\n1,0,2\r\n0,1,3\r\n1,1,")  # crash mid-row
    header, rows, partial = load_rows(str(path))
    assert partial and len(rows) == 3 and complete_updates(str(path), 2, 2) == 1
    path.write_text("seed,update,x\r\n0,0,1\r\n1,0\r\n0,1,3\r\n")  # damage in the middle: not guessable
    with pytest.raises(CheckpointError, match="line 3 is damaged"):
        load_rows(str(path))


def test_divergence_watch_warns_once_at_the_update_the_streak_completes():
    describe = "seed {}".format
    ok = {"grad_norm": np.full((2, 4), 3.0), "critic_loss": np.ones((2, 4)), "approx_kl": np.full((2, 4), 0.01)}
    watch = DivergenceWatch(patience=5)
    assert watch.check(ok, 0, describe) is None
    bad = {k: v.copy() for k, v in ok.items()}
    bad["grad_norm"][1, 1:] = 3e7  # run 1 blows up from update 5 (chunk 4..7): 5, 6, 7
    assert watch.check(bad, 4, describe) is None  # 3 updates so far
    worse = {k: v.copy() for k, v in bad.items()}
    worse["grad_norm"][1, :] = 3e7
    msg = watch.check(worse, 8, describe)  # updates 8, 9 complete the streak of 5 at update 9
    assert msg and "at update 9 (seed 1)" in msg and "grad_norm=3e+07" in msg and "--lr" in msg, msg
    assert watch.check(worse, 12, describe) is None  # once
    fresh = DivergenceWatch(patience=5)
    assert fresh.check(bad, 4, describe) is None and fresh.check(bad, 8, describe) is None  # a streak broken at 8


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_equals_uninterrupted(straight, tmp_path):
    """SIGKILL (no handler can run) at seeded random moments after the first checkpoint exists,
    three times (the first run, then resumes), then a resume to the end: metrics.csv equals the
    uninterrupted run byte for byte. A kill may land mid-save or mid-row; whatever it leaves
    (.tmp- folders, a cut row, a stale lock) must be repaired by the resume."""
    import random
    import signal
    import time

    rng = random.Random(7)
    run = str(tmp_path / "killed")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ckpts = os.path.join(run, "checkpoints")
    kills = 0
    for attempt in range(4):
        args = ["--resume", run, "--quiet"] if attempt else [*TINY, "--run-dir", run]
        proc = subprocess.Popen(
            [sys.executable, "-m", "purejaxppo", "train", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if attempt < 3:  # wait for a checkpoint of this process (or its end), then kill at a random moment
            start = {u for u, _ in list_checkpoints(ckpts)} if os.path.isdir(ckpts) else set()
            deadline = time.time() + 240
            while proc.poll() is None and time.time() < deadline:
                now = {u for u, _ in list_checkpoints(ckpts)} if os.path.isdir(ckpts) else set()
                if now - start:
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))
        killed = attempt < 3 and proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        out, err = proc.communicate(timeout=300)
        if not killed:  # every process that was not killed ends cleanly
            assert proc.returncode == 0 and "Traceback" not in err, (out, err)
            if attempt and "already finished" in out:
                break
    assert kills >= 1, "no kill landed: the test proved nothing"
    assert _read(os.path.join(run, "metrics.csv")) == _read(os.path.join(straight, "metrics.csv"))


# --- issue 26: a metrics.csv edited by hand, counters past 2**31, eval of a sweep ----------------
@pytest.mark.parametrize("cycle", [("lr looked high", "3", ""), ("1", "2", "3")], ids=["text", "numbers"])
def test_a_column_added_by_hand_is_kept_through_a_resume(cycle, half, straight, tmp_path, capsys):
    """A note column added to metrics.csv in a spreadsheet (text in some rows, a number or nothing
    in others; or numbers only, which used to pass the check and fail in the writer after the
    resume was recorded): the resume keeps it and warns once, continues to the uninterrupted
    numbers and records exactly one resume; plot draws the metrics, and the note's numbers with
    any text as gaps."""
    import csv

    run = _copy(half, tmp_path)
    metrics = os.path.join(run, "metrics.csv")
    header, rows, _ = load_rows(metrics)
    notes = [cycle[i % 3] for i in range(len(rows))]
    with open(metrics, "w", newline="") as f:
        csv.writer(f).writerows([header + ["note"]] + [r + [n] for r, n in zip(rows, notes)])
    assert main(["train", "--resume", run, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "column(s) 'note' that training does not write" in err and "Traceback" not in err, err
    assert len(json.load(open(os.path.join(run, "config.json")))["resumes"]) == 1
    got_header, got, _ = load_rows(metrics)
    ref_header, ref, _ = load_rows(os.path.join(straight, "metrics.csv"))
    assert got_header == ref_header + ["note"] and [r[:-1] for r in got] == ref  # the uninterrupted numbers
    assert [r[-1] for r in got] == notes + [""] * (len(ref) - len(rows))  # the notes kept, new rows empty
    assert main(["plot", run, "-o", str(tmp_path / "c.png")]) == 0
    assert "warning" not in capsys.readouterr().err  # the metrics plotted hold numbers only
    assert main(["plot", run, "--metric", "note", "-o", str(tmp_path / "n.png")]) == 0  # asked for: its numbers
    err = capsys.readouterr().err
    text = [(i + 2, n) for i, n in enumerate(notes) if n and not n.isdigit()]
    assert (
        (
            f"column 'note' has text where numbers belong (first on line {text[0][0]}: {text[0][1]!r}); plotted "
            "as gaps" in err
        )
        if text
        else "warning" not in err
    ), err


def test_env_steps_past_2_31_are_counted_on_the_host(tmp_path):
    """Update 17,000,000 of a 128-step config: the device's int32 env_steps wraps to
    -2,118,967,168; the metrics.csv sink (built as the chunk loop builds it, in a run folder)
    writes the true count, as a whole number."""
    import jax.numpy as jnp

    from purejaxppo.run.sinks import CSVLogger

    cfg = PPOConfig(num_envs=1, num_steps=128)
    (tmp_path / "config.json").write_text(json.dumps({"config": cfg.to_dict()}))
    first = 17_000_000
    device = (jnp.arange(first, first + 3) + 1) * cfg.batch_size  # as step_metrics computes it, x64 off
    assert device.dtype == jnp.int32 and int(device[0]) == -2_118_967_168
    sink = CSVLogger(str(tmp_path / "metrics.csv"), 1, False, False)
    sink.write({"env_steps": np.asarray(device)[None], "lr": np.full((1, 3), 2.5e-4, np.float32)}, first)
    header, rows, _ = load_rows(str(tmp_path / "metrics.csv"))
    col = header.index("env_steps")
    assert [r[col] for r in rows] == [str((u + 1) * cfg.batch_size) for u in range(first, first + 3)]


def test_eval_of_a_sweep_reports_each_member_never_pooled(straight, tmp_path, capsys, monkeypatch):
    """A sweep folder of 2 members x 1 seed: one summary per member (with its values), no mean
    over both, no "2 seed(s)"; --member K still evaluates K alone. The evaluator is stubbed: each
    run "returns" the sum of its own first weight matrix, so runs are told apart by their weights."""
    import jax

    import purejaxppo.step.evaluate as evaluate

    run = _as_sweep(straight, tmp_path)

    def fake(config, agent, runner, key, num_episodes, deterministic):
        w = np.asarray(jax.tree.leaves(runner.train.params)[0], np.float64)
        per_run = w.reshape(w.shape[0], -1).sum(1)
        return np.repeat(per_run[:, None], num_episodes, 1), np.ones((len(per_run), num_episodes))

    monkeypatch.setattr(evaluate, "evaluate_runner", fake)
    members = json.load(open(os.path.join(run, "config.json")))["members"]
    assert main(["eval", run, "--episodes", "3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert "mean" not in s and "per_seed_mean" not in s, s  # nothing pooled across members
    assert [(m["member"], m["values"], m["episodes"], len(m["per_seed_mean"])) for m in s["members"]] == [
        (k, members[k], 3, 1) for k in range(2)
    ]
    means = [m["mean"] for m in s["members"]]
    assert means[0] != means[1]  # two policies, two numbers
    assert main(["eval", run, "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 episode(s) x 1 seed(s) per member, 2 members" in out and "2 seed(s)" not in out, out
    for k in range(2):
        assert f"member {k} (lr={members[k]['lr']:g}): return: mean {means[k]:.2f}" in out, out
    assert main(["eval", run, "--episodes", "3", "--member", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert (one["member"], one["mean"], len(one["per_seed_mean"])) == (1, means[1], 1)
