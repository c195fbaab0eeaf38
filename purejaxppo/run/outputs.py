"""Output paths checked before any work: a run folder, an image, a GIF.

Each check raises :class:`~purejaxppo.config.ConfigError` with the problem and the fix
(the CLI prints it and exits 2), so a bad path fails in a second, not after a compile,
a training or an evaluation.
"""

from __future__ import annotations

import os

from purejaxppo.config import ConfigError


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_run_dir(path: str, flag: str = "--run-dir") -> None:
    """``path`` is (or can be made as) a writable folder."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{flag} {path!r} is a file, not a folder; choose another {flag}")
    base = _nearest_existing(path)
    if not os.path.isdir(base):
        raise ConfigError(f"{flag} {path!r} cannot be made: {base!r} is a file; choose another {flag}")
    if not os.access(base, os.W_OK | os.X_OK):
        what = "is" if base == os.path.abspath(path) else f"would be made inside {base!r}, which is"
        raise ConfigError(f"{flag} {path!r} {what} not writable; choose a writable folder or fix its permissions")


def check_out_file(path: str, flag: str, extensions: tuple) -> str:
    """``path`` names a new or overwritable file with one of ``extensions`` (``.png``...)
    in an existing writable folder; returns it."""
    ext = os.path.splitext(path)[1].lower()
    if os.path.isdir(path):
        raise ConfigError(
            f"{flag} {path!r} is a folder; give a file name, e.g. {os.path.join(path, 'out' + extensions[0])}"
        )
    if ext not in extensions:
        raise ConfigError(f"{flag} {path!r} must end in {', '.join(extensions)} (the file type is taken from it)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{flag} {path!r}: folder {os.path.dirname(path) or '.'!r} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ConfigError(f"{flag} {path!r} is not writable; choose another path or fix its permissions")
    return path
