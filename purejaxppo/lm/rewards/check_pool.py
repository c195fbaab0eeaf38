"""Checks bounded in time from any thread: a few worker processes, one check each at a time,
and a worker past its limit killed (and replaced when next needed).

Why processes: a reward runs inside ``jax.pure_callback``, off the main thread, where
SIGALRM (math-verify's own timeout) cannot be used, and a thread that hangs cannot be
stopped. A worker (:mod:`purejaxppo.lm.rewards.check_worker`) is a plain ``python`` running
one script that imports only its check, so it starts in the time those imports take; it
exits when its parent does (its stdin closes). A check given as a Python object (a tool, a
closure) is sent to its workers pickled: by value with ``cloudpickle`` when installed, else by
reference (then it must be importable in a fresh ``python``).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import selectors
import subprocess
import sys
import threading
import time
import weakref
from typing import Optional

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_worker.py")
TIMEOUT, FAILED = "timeout", "failed"  # the two results that are no value
STARTUP_S = 120.0  # the most a worker may take to import its check


class CheckPoolError(RuntimeError):
    """A check's worker cannot start (its check does not import): the message says why."""


def pickled(check) -> str:
    """``check`` pickled for a worker (base64, one line): cloudpickle when installed (closures,
    lambdas and functions of ``__main__`` by value), else :mod:`pickle` (by reference).

    Raises:
      CheckPoolError: ``check`` cannot be pickled.
    """
    try:
        import cloudpickle as pickler
    except ImportError:
        import pickle as pickler
    try:
        return base64.b64encode(pickler.dumps(check)).decode()
    except Exception as e:
        raise CheckPoolError(
            f"{check!r} cannot be sent to a worker process ({type(e).__name__}: {e}): define it at the top"
            " level of an importable module, or install cloudpickle"
        ) from None


class _Worker:
    def __init__(self, check: str, payload: Optional[str] = None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-u", WORKER, check if payload is None else "pickle"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        if payload is not None:
            self.proc.stdin.write(payload + "\n")
            self.proc.stdin.flush()
        first = self._read(time.monotonic() + STARTUP_S)
        if first is None or "ready" not in first:
            self.kill()
            why = first.get("fatal") if first else "no answer within the startup limit, or it exited"
            raise CheckPoolError(f"the check {check!r} cannot start in a worker process: {why}")

    def _read(self, deadline: float) -> Optional[dict]:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(max(0.0, deadline - time.monotonic())):
                return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def send(self, args) -> None:
        self.proc.stdin.write(json.dumps(list(args)) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class CheckPool:
    """Up to ``workers`` processes running ``check``; :meth:`run` maps it over argument tuples,
    each bounded by ``timeout`` seconds. Thread-safe (one :meth:`run` at a time).

    Args:
      check: ``"math"`` (:func:`purejaxppo.lm.rewards.check_worker.math_check`),
        ``"module:function"`` importable in a fresh ``python`` on this process's ``sys.path``,
        or a callable (sent pickled: :func:`pickled`); taking JSON-able arguments and returning
        a JSON-able value.
      workers: the most processes at once.
      timeout: seconds per check; a worker past it is killed and the check's result is
        :data:`TIMEOUT`.

    Attributes:
      check, workers, timeout: as given.
    """

    def __init__(self, check, workers: int = 2, timeout: float = 5.0):
        if workers < 1 or not timeout > 0:
            raise ValueError(f"a check pool needs workers >= 1 and timeout > 0 (got {workers}, {timeout})")
        self.check, self.workers, self.timeout = check, workers, timeout
        self._payload = None if isinstance(check, str) else pickled(check)
        self._idle: list = []
        self._lock = threading.Lock()
        weakref.finalize(self, CheckPool._close_all, self._idle)
        atexit.register(CheckPool._close_all, self._idle)

    @staticmethod
    def _close_all(idle: list) -> None:
        while idle:
            idle.pop().kill()

    def close(self) -> None:
        """Stop the workers (a later :meth:`run` starts new ones)."""
        with self._lock:
            CheckPool._close_all(self._idle)

    def run(self, tasks: list) -> list:
        """``check(*args)`` for each ``args`` of ``tasks``, in parallel over the workers.

        Args:
          tasks: a list of argument tuples (JSON-able).

        Returns:
          One result per task: the check's value, :data:`TIMEOUT` (past ``timeout``: its
          worker was killed) or :data:`FAILED` (the check raised, or its worker died).

        Raises:
          CheckPoolError: a worker cannot start.
        """
        with self._lock:
            return self._run(list(tasks))

    def _run(self, tasks: list) -> list:
        results = [None] * len(tasks)
        todo = list(range(len(tasks)))[::-1]
        busy: dict = {}  # worker -> (task index, deadline)
        with selectors.DefaultSelector() as sel:
            try:
                self._loop(tasks, todo, busy, results, sel)
            except BaseException:  # a worker that cannot start, an interrupt: none left running
                for w in busy:
                    w.kill()
                raise
        return results

    def _loop(self, tasks, todo, busy, results, sel) -> None:
        while todo or busy:
            while todo and len(busy) < self.workers:
                w = self._idle.pop() if self._idle else _Worker(self.check, self._payload)
                i = todo.pop()
                try:
                    w.send(tasks[i])
                except (BrokenPipeError, OSError):  # an idle worker that died: a new one
                    w.kill()
                    todo.append(i)
                    continue
                busy[w] = (i, time.monotonic() + self.timeout)
                sel.register(w.proc.stdout, selectors.EVENT_READ, w)
            wait = max(0.0, min(d for _, d in busy.values()) - time.monotonic())
            for key, _ in sel.select(wait):
                w = key.data
                sel.unregister(w.proc.stdout)
                i, _ = busy.pop(w)
                line = w.proc.stdout.readline()
                reply = json.loads(line) if line else {}
                results[i] = reply["value"] if "value" in reply else FAILED
                if line:
                    self._idle.append(w)
                else:
                    w.kill()
            now = time.monotonic()
            for w, (i, deadline) in list(busy.items()):
                if deadline <= now:
                    sel.unregister(w.proc.stdout)
                    del busy[w]
                    w.kill()
                    results[i] = TIMEOUT
