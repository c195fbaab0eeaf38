"""Ctrl-C and SIGTERM while a compiled program calls back into Python.

A host callback (``jax.pure_callback``: a Python reward function scoring the responses inside
the compiled iteration) runs Python code under XLA, on the main thread on CPU. An exception
raised there does not come out as itself: XLA turns it into a runtime error with a traceback
(``CpuCallback error ... KeyboardInterrupt``), and the computation is left broken. So while
:func:`interrupts_at_safe_points` is active:

* a signal that arrives outside a host callback raises :class:`KeyboardInterrupt` at once (its
  text ``"SIGTERM"`` for SIGTERM), as Ctrl-C always does;
* a signal that arrives inside one is kept instead: the callback finishes normally,
  :func:`pending` is then true (a callback checks it to skip the rest of its work, returning
  NaN, so the chunk ends quickly), and the caller raises :func:`take` at its next safe point
  (the chunk loop: when the chunk's results are back), after keeping what is sound.

A signal kept and never taken is raised when the block ends, so none is lost. A SECOND signal
inside the same callback (a reward function that hangs: the user presses Ctrl-C again) does not
wait: the process prints one line (what the caller says is kept) and exits at once, 130 / 143;
the run folder's checkpoints are written whole, so the newest one stands.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Optional

_CALLBACK_FILE = os.path.join("jax", "_src", "callback.py")  # every host callback runs under its frames
_kept: list = []  # the first signal kept inside a callback, as the KeyboardInterrupt to raise
_kept_note: list = [""]  # what the caller keeps, for the line of a second signal


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()


def _inside_callback(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(_CALLBACK_FILE):
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    if _inside_callback(frame):
        if not _kept:
            _kept.append(_interrupt(signum))
            return
        sys.stderr.write(
            f"\ninterrupted again inside a Python callback: stopped without waiting for it{_kept_note[0]}\n"
        )
        sys.stderr.flush()
        os._exit(143 if signum == signal.SIGTERM else 130)  # raising here would come out of XLA as a traceback
    raise _interrupt(signum)


def pending() -> bool:
    """True when a signal arrived inside a host callback and is waiting for :func:`take`."""
    return bool(_kept)


def take() -> Optional[KeyboardInterrupt]:
    """The kept signal as a KeyboardInterrupt to raise (once), or None."""
    return _kept.pop() if _kept else None


def raise_taken() -> None:
    """Raise the kept signal, if any (a safe point: no compiled program is running)."""
    caught = take()
    if caught is not None:
        raise caught


@contextmanager
def interrupts_at_safe_points(kept: str = ""):
    """Within the block SIGINT (when Python's own Ctrl-C handler is installed: not where the
    shell ignores it) and SIGTERM act as described in the module; the previous handlers are
    back afterwards. ``kept``: the end of the line a second signal inside a callback prints
    (e.g. ``"; RUN_DIR keeps ..."``). Outside the main thread (where Python delivers no
    signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _kept_note[0] = kept
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, _handler)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, _handler)
    try:
        yield
        raise_taken()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _kept.clear()
