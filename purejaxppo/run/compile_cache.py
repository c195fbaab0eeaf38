"""JAX's persistent compilation cache for CLI runs: a second identical run skips XLA.

The cache lives in the user's cache folder (``$XDG_CACHE_HOME/purejaxppo/xla``, default
``~/.cache/purejaxppo/xla``; ``PUREJAXPPO_CACHE_DIR`` overrides it). Compiled programs are
keyed by JAX on the program text, flags and versions, so a changed config or library
compiles anew; nothing here can give different numbers. ``--no-compile-cache`` opts out.
"""

from __future__ import annotations

import os
from typing import Optional


def cache_dir() -> str:
    if os.environ.get("PUREJAXPPO_CACHE_DIR"):
        return os.environ["PUREJAXPPO_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "purejaxppo", "xla")


def enable(path: Optional[str] = None) -> Optional[str]:
    """Turn the cache on (every compile is cached, however short); returns the folder, or
    None when it cannot be used (not writable): then runs simply compile as usual."""
    import jax

    path = path or cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            return None
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def announce_once(path: str) -> Optional[str]:
    """A one-line notice the first time this folder is used (a marker file remembers it)."""
    marker = os.path.join(path, ".announced")
    if os.path.exists(marker):
        return None
    try:
        open(marker, "w").close()
    except OSError:
        pass
    return (
        f"compiled programs are cached in {path} (a repeated run skips most of the compile; "
        "--no-compile-cache turns this off)"
    )
