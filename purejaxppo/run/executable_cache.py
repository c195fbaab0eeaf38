"""Whole compiled programs kept on disk, so a repeated CLI run skips tracing and lowering too.

JAX's persistent compilation cache (:mod:`purejaxppo.run.compile_cache`) skips XLA's compile, but
every run still traces the Python step and lowers it to StableHLO before it can look the
program up: about 1 s of a warm start for default CartPole on a 2-core CPU. This cache
stores the compiled executable itself (``jax.experimental.serialize_executable``) under a
key computed WITHOUT tracing, from everything that decides the program:

* the program's role (``init``, or a chunk of ``n`` updates) and the resolved config
  (``PPOConfig.to_dict()``: every static and numeric field, floats written exactly);
* how it runs: devices split, runs axis, and every argument's shape, dtype, weak type and
  sharding;
* the code: a hash of every ``.py`` file of the installed ``purejaxppo`` package (every
  subpackage) and of the source file of a registered agent defined outside it (an agent whose
  source cannot be read is not cached at all), the
  versions of jax, jaxlib, flax, optax, gymnax and of the env's suite package, JAX's
  config values (PRNG implementation, x64, ...), ``XLA_FLAGS`` (``--xla_cpu_max_isa`` and every
  other flag that changes code generation) and the devices;
* the host CPU (:func:`cpu_identity`: its model and instruction-set features). XLA:CPU compiles
  for the CPU it runs on, and JAX reports every x86 machine as the same ``cpu`` device, so a
  cache folder shared by machines with different CPUs (a network home folder) must not hand
  one an executable built for another's instruction set.

A changed config, flag, library or source file therefore compiles anew, in full: programs
saved here are compiled without JAX's persistent cache (see ``_without_persistent_cache``), so
that cache neither serves nor keeps them; it still serves every other program (evaluation, PBT). Only programs that
:class:`~purejaxppo.programs.program.Program` builds from a config use it (a PPO passed in from
outside, e.g. with a custom env object, is not keyed and always traces). Any failure to
read or write an entry (a corrupt or foreign file, a full disk) falls back to compiling:
the cache can make a run start sooner, never change its numbers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import platform
import subprocess
from typing import Any, Callable, Optional

import jax

from purejaxppo.run.compile_once import signature


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the purejaxppo folder


def _hash_files(h, root: str) -> None:
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """A hash of every ``.py`` file of the installed ``purejaxppo`` package (all subpackages: any
    stage, agent, env adapter or loss the traced program can come from)."""
    h = hashlib.sha256()
    _hash_files(h, _PACKAGE)
    return h.hexdigest()


def _outside_code(config) -> Optional[list]:
    """The source of code from outside the package that the program of ``config`` is traced from:
    a registered agent's ``build``/``check`` defined in the user's module. ``[]`` when everything is
    the package's own; None when such code has no readable source file (then the program is not
    cached: a key that cannot see the code could serve a stale program)."""
    import inspect

    from purejaxppo.agents.registry import agent_kind

    try:
        kind = agent_kind(config.network)
    except Exception:  # an unknown network: the build fails later with its own message
        return []
    sources = []
    for fn in (kind.build, kind.check):
        if fn is None:
            continue
        module = getattr(fn, "__module__", None) or ""
        if module == "purejaxppo" or module.startswith("purejaxppo."):
            continue
        try:
            path = inspect.getsourcefile(fn)
            with open(path, "rb") as f:
                sources.append((module, hashlib.sha256(f.read()).hexdigest()))
        except (TypeError, OSError):
            return None
    return sources


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _cpuinfo_identity(text: str) -> str:
    """Model name and sorted feature flags of the first processor in ``/proc/cpuinfo`` text
    (x86: ``model name``/``flags``; ARM: ``CPU implementer``/``CPU part``/``Features``)."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block only: every core of one machine is one kind
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip().lower(), value.strip())
    model = [fields.get(k, "") for k in ("vendor_id", "model name", "cpu implementer", "cpu part")]
    flags = " ".join(sorted((fields.get("flags") or fields.get("features") or "").split()))
    return "|".join(model + [flags]) if any(model) or flags else ""


@functools.lru_cache(maxsize=1)
def cpu_identity() -> str:
    """The host CPU as code generation sees it: a hash of its model and instruction-set
    features (Linux: ``/proc/cpuinfo``; macOS: ``sysctl machdep.cpu``; elsewhere
    ``platform.machine()`` and ``platform.processor()``)."""
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            text = _cpuinfo_identity(f.read())
    except OSError:
        pass
    if not text and platform.system() == "Darwin":
        try:
            text = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    text = text or f"{platform.machine()}|{platform.processor()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def environment(env_name: str) -> dict:
    """What besides the config decides a compiled program: code, versions, JAX and XLA flags,
    devices and the host CPU."""
    suite = env_name.split(":", 1)[0] if ":" in env_name else "gymnax"
    dists = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "gymnax", suite)  # each suite's extra names its package
    return {
        "source": _source_hash(),
        "versions": {d: _version(d) for d in dists},
        "jax_config": sorted((k, repr(v)) for k, v in jax.config.values.items() if "cache" not in k),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "devices": [(d.platform, d.device_kind, d.id) for d in jax.devices()],
        "host_cpu": cpu_identity(),
    }  # every x86 machine's device is the same "cpu": the CPU itself tells them apart


@contextlib.contextmanager
def _without_persistent_cache():
    """Compile fresh, never from JAX's persistent cache: on XLA:CPU (jax 0.10.2) an executable that
    JAX loaded from its cache serializes into one that fails when run ("Function wrapped_broadcast
    not found"), so only a freshly compiled executable may be saved here. JAX latches whether its
    cache is in use at the first compile; ``reset_cache`` makes it read the flag again."""
    from jax.experimental.compilation_cache import compilation_cache

    was = jax.config.values["jax_enable_compilation_cache"]
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()


class ExecutableCache:
    """``get(role, jitted, args) -> Compiled``: loaded from ``folder`` when a program with this key
    was saved before, else lowered, compiled and saved. ``hits``/``misses`` count the lookups."""

    def __init__(self, folder: str, context: dict):
        self.folder = folder
        self._base = json.dumps(
            {**context, "env": environment(context.get("config", {}).get("env_name", ""))}, sort_keys=True, default=repr
        )
        self.hits = self.misses = 0

    def key(self, role: Any, args) -> str:
        return hashlib.sha256(json.dumps([self._base, repr(role), repr(signature(args))]).encode()).hexdigest()

    def get(self, role: Any, jitted: Callable, args: tuple):
        from jax.experimental.serialize_executable import deserialize_and_load, serialize

        path = os.path.join(self.folder, self.key(role, args) + ".jaxexe")
        if os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    payload, in_tree, out_tree = pickle.load(f)
                compiled = deserialize_and_load(payload, in_tree, out_tree)
                self.hits += 1
                return compiled
            except Exception:  # corrupt, truncated or from an incompatible build: compile instead
                pass
        self.misses += 1
        with _without_persistent_cache():
            compiled = jitted.lower(*args).compile()
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(tmp, "wb") as f:
                pickle.dump(serialize(compiled), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)  # readers see a whole entry or none
        except Exception:  # not serializable, disk full, read-only: this run simply is not cached
            with contextlib.suppress(OSError):
                os.remove(tmp)
        return compiled


def for_program(folder: Optional[str], config, **context) -> Optional[ExecutableCache]:
    """The cache for one :class:`~purejaxppo.programs.program.Program` (None when ``folder`` is None,
    or when the program comes from outside code whose source cannot be hashed)."""
    if folder is None:
        return None
    outside = _outside_code(config)
    if outside is None:
        return None
    return ExecutableCache(folder, {"config": config.to_dict(), "outside_code": outside, **context})
