"""Checkpoints of a whole runner state with orbax: atomic, verified, exact.

A checkpoint is a folder ``<root>/update_<U:08d>/`` holding

* ``state/``: an orbax PyTree checkpoint of every array leaf of the runner state
  (params, optimizer state, env states incl. wrapper statistics, observations, RNG keys,
  update counter -- whatever the pytree holds; new leaves need no code change),
  stored under index names so the tree's own key names never reach the file system;
* ``meta.json``: the caller's metadata (config, seeds, update count, ...) and a
  manifest ``[{path, shape, dtype, sha1}]`` of the leaves in tree order.

Zero-size leaves (e.g. an MJX env state's empty contact arrays) hold no data and orbax
refuses to save them, so they are recorded by shape and dtype in the manifest only and
rebuilt (``zeros`` of that shape/dtype, which is all they can be) on restore.

Why a manifest: restoring needs a template pytree (built by the caller from the same
config, e.g. with ``jax.eval_shape``). Comparing the manifest against it first turns a
checkpoint made for another env/network into a message naming the differing leaves
instead of an orbax tree-structure trace, and the SHA-1 of every restored array detects
truncated or corrupt files (and proves the restore is bit-exact).

Atomicity: a checkpoint is written to a hidden temporary folder and renamed into place
only when complete, and older checkpoints are pruned only after that, so an interruption
at any moment leaves the previous good checkpoint intact. Only folders containing
``meta.json`` count as checkpoints.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import re
import shutil
import sys
import threading
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.run.guards import interrupts_deferred
from purejaxppo.run.checkpoint_manifest import (
    CheckpointError,
    _digest,
    _is_empty,  # noqa: F401
    _template_manifest,
    compare_manifest,
    flatten_state,
)

_NAME = re.compile(r"^update_(\d+)$")


class SaveError(OSError):
    """Writing a checkpoint failed (full disk, permissions, ...); the partial folder is removed
    and the earlier checkpoints are intact. ``errno`` is the file system's, when known."""


def preload() -> None:
    """Start importing orbax in a background thread (0.1-0.3 s, once per process), so that a
    training loop's first save does not stall it: on CPU that import, done inside the first
    save, held default CartPole's loop for about 0.2 s of its 3.5 s. A save that comes before
    the import ends waits for it (Python's import lock)."""
    if "orbax.checkpoint" not in sys.modules:
        threading.Thread(target=importlib.import_module, args=("orbax.checkpoint",), daemon=True).start()


def save_checkpoint(root: str, update: int, state, meta: Optional[dict] = None, keep: int = 2) -> str:
    """Write ``state`` (any pytree of arrays) as checkpoint ``update``; return its folder.

    ``meta`` (JSON-serialisable) is stored alongside. At most ``keep`` checkpoints are
    kept (the newest); pruning happens after the new one is complete. A failed write raises
    :class:`SaveError` and leaves no partial folder; on a full disk the older checkpoints
    are pruned first (keeping the newest) and the write is tried once more.

    Ctrl-C or SIGTERM during the save takes effect when it is complete (a preemption
    then finds the new checkpoint whole, and orbax's writer threads are never cut off)."""
    root = os.path.abspath(root)  # orbax (tensorstore OCDBT) refuses relative paths
    with interrupts_deferred():
        try:
            return _save(root, update, state, meta, keep)
        except OSError as e:
            if not _no_space(e) or len(list_checkpoints(root)) < 2:
                raise
            # full disk: keep only the newest checkpoint, to make room for this one, and retry once
            for _, old in list_checkpoints(root)[:-1]:
                _remove(old)
            return _save(root, update, state, meta, keep)


def _no_space(e: BaseException) -> bool:
    return getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(e)


def _save(root: str, update: int, state, meta: Optional[dict], keep: int) -> str:

    final = os.path.join(root, f"update_{int(update):08d}")
    tmp = os.path.join(root, f".tmp-update_{int(update):08d}-{os.getpid()}")
    try:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        arrays, manifest = flatten_state(state)
        _check_room(root, arrays)
        os.makedirs(tmp)
        if arrays:  # a tree of only zero-size leaves has nothing for orbax to write
            with _quiet_orbax():
                _checkpointer().save(os.path.join(tmp, "state"), arrays)
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({**(meta or {}), "update": int(update), "leaves": manifest}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
    except Exception as e:  # orbax/tensorstore raise many types for a failed write
        shutil.rmtree(tmp, ignore_errors=True)
        code = getattr(e, "errno", None) or (errno.ENOSPC if _no_space(e) else None)
        reason = os.strerror(code) if code else f"{type(e).__name__}: {str(e)[:200]}"
        raise SaveError(code, f"could not write checkpoint {final} ({reason})") from None
    if os.path.exists(final):  # re-saving the same update (e.g. end == last periodic save)
        _remove(final)
    os.replace(tmp, final)
    for _, old in list_checkpoints(root)[:-keep] if keep > 0 else []:
        _remove(old)
    return final


def _checkpointer():
    """orbax's PyTree checkpointer. With several processes (:mod:`purejaxppo.run.processes`)
    only process 0 reads and writes checkpoints, of host arrays it holds whole: orbax is told
    that this process alone takes part (else it waits at barriers for the others)."""
    import orbax.checkpoint as ocp

    if jax.process_count() == 1:
        return ocp.PyTreeCheckpointer()
    me = jax.process_index()
    options = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
    return ocp.Checkpointer(
        ocp.PyTreeCheckpointHandler(multiprocessing_options=options), multiprocessing_options=options
    )


def _folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def _check_room(root: str, arrays: dict) -> None:
    """Refuse to start a save that cannot fit (estimate: the newest checkpoint's size, or the
    arrays plus orbax's overhead): a full disk then fails cleanly here, instead of deep in
    orbax's writer threads."""
    latest = list_checkpoints(root)[-1:]
    need = max(_folder_bytes(latest[0][1]) if latest else 0, sum(a.nbytes for a in arrays.values()) + 64 * 1024)
    if shutil.disk_usage(root).free < need * 1.1:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), root)


@contextlib.contextmanager
def _quiet_orbax():
    """orbax logs a failed write from its threads as ERROR with a traceback; the failure
    reaches the caller as an exception anyway (then a SaveError), so keep stderr clean."""
    import logging

    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _remove(folder: str) -> None:
    """Delete a checkpoint folder: renamed to a hidden ``.tmp-`` name first, so a crash
    halfway leaves no half-deleted folder that still looks like a checkpoint."""
    trash = os.path.join(os.path.dirname(folder), f".tmp-del-{os.path.basename(folder)}-{os.getpid()}")
    try:
        os.replace(folder, trash)
    except OSError:
        trash = folder
    shutil.rmtree(trash, ignore_errors=True)


def clean_partial(root: str) -> list[str]:
    """Remove what interrupted saves and prunes left under ``root`` (hidden ``.tmp-*``
    folders, ``update_*`` folders without ``meta.json``); returns their names. Call it
    only while holding the run folder's lock (no other process is saving)."""
    if not os.path.isdir(root):
        return []
    gone = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(".tmp-") or (_NAME.match(name) and not os.path.isfile(os.path.join(path, "meta.json"))):
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
            gone.append(name)
    return gone


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """Complete checkpoints under ``root`` as ``[(update, folder)]``, oldest first."""
    if not os.path.isdir(root):
        return []
    out = []
    for name in os.listdir(root):
        m = _NAME.match(name)
        if m and os.path.isfile(os.path.join(root, name, "meta.json")):
            out.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(out)


def latest_checkpoint(root: str) -> Optional[str]:
    ckpts = list_checkpoints(root)
    return ckpts[-1][1] if ckpts else None


def read_meta(path: str) -> dict:
    try:
        with open(os.path.join(path, "meta.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is not a checkpoint (no meta.json); it may be incomplete -- "
            "use an update_* folder listed by the run's checkpoints/"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{path}/meta.json is corrupt ({e}); resume from an older checkpoint by deleting this folder"
        ) from None


def place_like(x, like):
    """Host array ``x`` on the device(s) of ``like`` (a template leaf), committed only where
    ``like`` is: jit caches compiled code per committed-ness too, so a restored state placed
    any other way than a fresh one compiles the same function again."""
    return jax.device_put(x, like.sharding) if getattr(like, "committed", True) else jax.device_put(x)


def _manifest(path: str) -> tuple[dict, list]:
    meta = read_meta(path)
    if not isinstance(meta.get("leaves"), list):
        raise CheckpointError(f"{path}/meta.json has no leaf manifest; it was not written by purejaxppo")
    return meta, meta["leaves"]


def read_leaves(path: str) -> tuple[dict, dict]:
    """Every leaf of checkpoint folder ``path`` by its tree path (``keystr``, as in the
    manifest), verified against its checksum: ``({path: array}, meta)``, host arrays, typed
    PRNG keys re-wrapped. For a PART of a checkpoint without the saved tree's template (e.g.
    a new run starting from another run's params); :func:`restore_checkpoint` restores a whole
    tree. Raises :class:`CheckpointError` for unreadable, truncated or corrupt files."""

    path = os.path.abspath(path)
    meta, saved = _manifest(path)
    try:
        stored = any(not _is_empty(e) for e in saved)
        arrays = _checkpointer().restore(os.path.join(path, "state")) if stored else {}
    except Exception as e:  # orbax/tensorstore raise many types for damaged files
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(e).__name__}: {str(e)[:200]}); "
            "it is truncated or corrupt -- delete it to resume from the previous one"
        ) from None
    leaves = {}
    for i, entry in enumerate(saved):
        if _is_empty(entry):  # saved by shape and dtype only (see flatten_state)
            a = np.zeros(entry["shape"], jnp.dtype(entry["dtype"]))
        else:
            a = arrays.get(f"{i:05d}") if isinstance(arrays, dict) else None
        if a is None:
            raise CheckpointError(
                f"checkpoint {path} lacks the array for {entry['path']}; it is truncated "
                "-- delete it to resume from the previous one"
            )
        a = np.asarray(a)
        if list(a.shape) != list(entry["shape"]) or str(a.dtype) != entry["dtype"] or _digest(a) != entry["sha1"]:
            raise CheckpointError(
                f"checkpoint {path}: array {entry['path']} fails its checksum; the files are "
                "corrupt -- delete this folder to resume from the previous checkpoint"
            )
        if "prng_impl" in entry:
            a = jax.random.wrap_key_data(a, impl=entry["prng_impl"])
        leaves[entry["path"]] = a
    return leaves, meta


def restore_checkpoint(path: str, template) -> tuple[Any, dict]:
    """Restore the checkpoint folder ``path`` into the structure of ``template``.

    ``template`` is a pytree shaped like the saved state (arrays or
    ``jax.ShapeDtypeStruct``; e.g. ``jax.eval_shape(init, keys)``). Returns
    ``(state, meta)``: host (numpy) arrays in ``template``'s tree structure, typed PRNG
    keys re-wrapped. Raises :class:`CheckpointError` if the checkpoint does not fit the
    template or any array fails its checksum."""
    compare_manifest(_manifest(os.path.abspath(path))[1], _template_manifest(template))
    leaves, meta = read_leaves(path)
    flat, treedef = jax.tree_util.tree_flatten_with_path(template)
    return jax.tree_util.tree_unflatten(treedef, [leaves[jax.tree_util.keystr(k)] for k, _ in flat]), meta
