"""Several processes, one run: JAX's multi-controller runtime (``jax.distributed``).

One process per host (or several on one machine, for trying it), every process running the
same program on a global device mesh: the meshes of :mod:`purejaxppo.parallel.sharding` span
``jax.devices()``, which after :func:`initialize` lists every process's devices. Every
process builds the same keys from the seed, so nothing is sent that each can compute.

The host side follows three rules, which :class:`ProcessGroup` carries into the chunk loop:

* **One writer.** Process 0 alone reads and writes the run folder (config, metrics,
  checkpoints, summary, lineage, progress); the others never touch it, so the folder needs
  no shared file system. What the others need of it (a resume's update count and state) the
  writer sends them: small records through the coordination service's key-value store
  (:meth:`ProcessGroup.share`), arrays through a collective (:meth:`ProcessGroup.broadcast`).
* **Gathered to the writer.** A checkpoint is the whole state gathered (every process takes
  part in the collective) and written by process 0 in the one-process format: a run folder
  resumes on any number of processes or on one, and ``eval`` reads it as any other.
* **No hang.** A watchdog thread asks the coordination service every second which processes
  are alive. When one dies (or the coordinator is lost), every other process prints one
  ``error:`` line naming it and exits with status 1 within the heartbeat timeout (15 s here)
  plus a second, instead of blocking in its next collective. (When process 0 dies, JAX's
  runtime ends the others first, within a second, with its own message: process 0 hosts the
  coordination service.) The run then resumes from its last periodic checkpoint (a save
  needs every process, so none is taken after a loss).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from typing import Callable, Optional

import jax
import numpy as np

HEARTBEAT_S = 15  # the coordination service declares a silent process dead after this


class LostProcessError(RuntimeError):
    """Another process of the run stopped; the message names it."""


class ProcessGroup:
    """The processes of one run, as the chunk loop sees them.

    Contract: ``index`` (this process, 0..count-1) and ``count``; ``writer``: this process
    writes the run folder (process 0); ``gather(tree)``: every leaf as a host array holding
    the WHOLE global value (a collective: every process calls it at the same point);
    ``share(fn)``: ``fn()`` run on the writer alone, its result (or the exception it raised,
    raised again) returned on every process; ``broadcast(tree)``: the writer's host arrays on
    every process (``like``: a tree of the same shapes and dtypes, e.g. the state the arrays
    go into; the other processes pass ``tree=None``); ``exchange(value)``: every process's
    picklable ``value``, as a list by process index, on every process (a collective)."""

    def __init__(self, index: int = 0, count: int = 1):
        self.index, self.count, self._calls = index, count, 0

    @property
    def writer(self) -> bool:
        return self.index == 0

    @property
    def many(self) -> bool:
        return self.count > 1

    def gather(self, tree):
        if not self.many:
            return jax.device_get(tree)
        from jax.experimental import multihost_utils

        host = multihost_utils.process_allgather(_raw(tree), tiled=True)
        return jax.tree.map(_rewrap, host, tree)

    def share(self, fn: Callable):
        if not self.many:
            return fn()
        self._calls += 1
        key = f"purejaxppo/share/{self._calls}"
        client = _client()
        if self.writer:
            try:
                out = (True, fn())
            except BaseException as e:  # raised again on every process, the writer included
                out = (False, e)
            client.key_value_set_bytes(key, pickle.dumps(out))
        else:
            out = pickle.loads(client.blocking_key_value_get_bytes(key, 3600 * 1000))
        ok, value = out
        if not ok:
            raise value
        return value

    def exchange(self, value) -> list:
        """Every process's ``value`` (anything picklable), by process index, on every process (a
        collective: every process calls it at the same point). One process: ``[value]``."""
        if not self.many:
            return [value]
        from jax.experimental import multihost_utils

        data = np.frombuffer(pickle.dumps(value), np.uint8)
        sizes = np.asarray(multihost_utils.process_allgather(np.int64(data.size))).reshape(-1)
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[: data.size] = data
        every = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
        return [pickle.loads(every[i, : int(sizes[i])].tobytes()) for i in range(len(sizes))]

    def broadcast(self, tree, like):
        if not self.many:
            return tree
        from jax.experimental import multihost_utils

        if not self.writer:  # zeros of the shapes the writer sends
            tree = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(_raw, like))
        out = multihost_utils.broadcast_one_to_all(_raw(tree), is_source=self.writer)
        return jax.tree.map(lambda a, l: _rewrap(np.asarray(a), l), out, like)

    def leave(self) -> None:
        """Leave the run in order, after it has finished on every process: the others
        disconnect first, then process 0 stops the coordination service it hosts (leaving
        before them would fail their own disconnect). The watchdog stops first, so the
        leaving processes are not reported as lost."""
        if not self.many:
            return
        _LEAVING.set()
        self.barrier("leave")
        if self.writer:  # returns once no other process is connected (none calls it now)
            _client().get_live_nodes(list(range(self.count)))
        jax.distributed.shutdown()

    def barrier(self, name: str) -> None:
        """Every process waits here until all have arrived (at the end of a run: process 0
        hosts the coordination service, so it must not leave before the others)."""
        if self.many:
            _client().wait_at_barrier(f"purejaxppo/{name}", 3600 * 1000)


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _key_data(x):
    return jax.random.key_data(x) if _is_key(x) else x


def _raw(tree):
    return jax.tree.map(_key_data, tree)


def _rewrap(a, like):
    """A host array back to ``like``'s kind: typed PRNG keys travel as their raw data."""
    return jax.random.wrap_key_data(a, impl=jax.random.key_impl(like)) if _is_key(like) else np.asarray(a)


def _client():
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("jax.distributed is not initialised in this process")
    return client


# --- the process group of this process ---------------------------------------------------
_GROUP: Optional[ProcessGroup] = None


def current() -> ProcessGroup:
    """This process's group: one process unless :func:`initialize` (or the user's own
    ``jax.distributed.initialize``) made several."""
    global _GROUP
    if _GROUP is None:
        from jax._src import distributed

        if distributed.global_state.client is None:
            return ProcessGroup()
        # kept: share() numbers its calls, and every process must number them the same way
        _GROUP = ProcessGroup(jax.process_index(), jax.process_count())
    return _GROUP


def initialize(
    coordinator: Optional[str] = None,
    num_processes: Optional[int] = None,
    process_id: Optional[int] = None,
    heartbeat_s: int = HEARTBEAT_S,
    on_loss: str = "",
) -> ProcessGroup:
    """Join the run's processes (before anything else uses JAX) and return the group.

    With no arguments, JAX fills them in from the launcher (SLURM, Open MPI, a TPU pod,
    Kubernetes); else ``coordinator`` ("HOST:PORT", process 0's address), ``num_processes``
    and ``process_id`` are all needed. On CPU, collectives between processes go over gloo
    (TCP). Starts the watchdog: when a process is lost, this one prints ``error: ...`` (plus
    ``on_loss``, e.g. how to resume) and exits with status 1."""
    global _GROUP
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # a lost process is then reported to the survivors instead of aborting them from C++,
    # so the watchdog can name it and exit cleanly
    jax.config.update("jax_enable_recoverability", True)
    kwargs = dict(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
    jax.distributed.initialize(
        **{k: v for k, v in kwargs.items() if v is not None}, heartbeat_timeout_seconds=heartbeat_s
    )
    _GROUP = ProcessGroup(jax.process_index(), jax.process_count())
    if _GROUP.many:
        threading.Thread(target=_watch, args=(_GROUP, on_loss), daemon=True, name="purejaxppo-watchdog").start()
    return _GROUP


_FAILED = threading.Lock()
_LEAVING = threading.Event()


def exit_now(code: int) -> None:
    """Leave at once with ``code`` after an error, with output flushed. ``os._exit``: JAX's own
    shutdown would wait for processes that may never get there; the others see this one go
    (their watchdog) unless they are leaving with the same error."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(message: str, code: int = 1) -> None:
    """Print one ``error:`` line and leave at once. ``os._exit``: JAX's own shutdown would
    wait for the lost process at its exit barrier."""
    if _FAILED.acquire(blocking=False):
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(code)
    time.sleep(3600)  # another thread is already leaving


def _watch(group: ProcessGroup, on_loss: str, every_s: float = 1.0) -> None:
    everyone = list(range(group.count))
    client = _client()
    while True:
        time.sleep(every_s)
        if _LEAVING.is_set():
            return
        try:
            live = set(client.get_live_nodes(everyone))
        except Exception as e:  # the coordination service itself is gone: process 0 died
            if _LEAVING.is_set():
                return
            if group.index == 0:
                reason = f"the coordination service failed ({str(e).splitlines()[0][:120]})"
            else:
                reason = "lost the coordinator, process 0"
            fail(f"process {group.index} of {group.count}: {reason}; stopping.{on_loss}")
            return
        lost = [i for i in everyone if i not in live]
        if lost and not _LEAVING.is_set():
            names = ", ".join(str(i) for i in lost)
            fail(
                f"process {group.index} of {group.count}: lost process {names} (it stopped sending heartbeats: "
                f"killed, crashed or unreachable); stopping.{on_loss}"
            )
            return


def collective_failed(e: BaseException) -> bool:
    """Whether ``e`` is a collective that failed because a peer went away (gloo's TCP pair
    closed). The watchdog names the lost process within the heartbeat timeout."""
    text = str(e)
    return current().many and ("Gloo" in text or "Connection closed by peer" in text or "UNAVAILABLE" in text)


def wait_for_watchdog(e: BaseException, on_loss: str = "") -> None:
    """After a failed collective: let the watchdog name the lost process (it exits this
    process), or fail with what is known once the heartbeat timeout has passed."""
    time.sleep(HEARTBEAT_S + 5)
    fail(
        f"process {current().index}: a collective with the other processes failed "
        f"({str(e).splitlines()[0][:160]}); stopping.{on_loss}"
    )
