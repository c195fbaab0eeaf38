"""One writer per run folder: an advisory lock on ``<run_dir>/.lock``.

A training (new or resumed) holds an exclusive ``fcntl.flock`` on the lock file for as
long as it writes to the folder; the file holds the owner's pid, so a second process is
refused with a message naming it. The kernel drops a flock when its process dies, so a
killed run never leaves the folder locked. Where ``flock`` is not supported (some network
file systems) the pid alone is the lock: a pid that is no longer alive is a stale lock
and is taken over.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager

from purejaxppo.run.checkpoint import CheckpointError

LOCK = ".lock"


class RunFolderBusy(CheckpointError):
    """Another live process is writing to this run folder."""


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_pid(fd: int) -> int:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip() or 0)
    except (ValueError, OSError):
        return 0


def _busy(run_dir: str, pid: int) -> RunFolderBusy:
    who = f"process {pid}" if pid else "another process"
    return RunFolderBusy(
        f"run folder {run_dir!r} is in use by {who} (a train or --resume writing to it); "
        f"wait for it to finish{f' or stop it (kill {pid})' if pid else ''}, then try again"
    )


@contextmanager
def hold(run_dir: str):
    """Hold the run folder's lock for the block; :class:`RunFolderBusy` if another live
    process holds it, :class:`CheckpointError` if the folder cannot be written."""
    import fcntl

    path = os.path.join(run_dir, LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CheckpointError(
            f"cannot write to run folder {run_dir!r} ({e.strerror}); "
            "choose a writable folder (--run-dir) or fix its permissions"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _busy(run_dir, _read_pid(fd)) from None
            # no flock here: the recorded pid is the lock (a dead pid is a stale lock)
            pid = _read_pid(fd)
            if pid != os.getpid() and _pid_alive(pid):
                raise _busy(run_dir, pid) from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            try:
                os.ftruncate(fd, 0)  # released: no pid left behind to look stale
            except OSError:
                pass
    finally:
        os.close(fd)  # closing drops the flock
