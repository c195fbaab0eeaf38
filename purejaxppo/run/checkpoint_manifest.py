"""A checkpoint's leaf manifest: ``[{path, shape, dtype, sha1}]`` of a state's leaves, in tree
order, and the checks that compare it with a template (:mod:`purejaxppo.run.checkpoint`)."""

from __future__ import annotations

import hashlib

import jax
import numpy as np


class CheckpointError(Exception):
    """A checkpoint is missing, corrupt, or made for a different setup; the message says which and the fix."""


def _is_prng_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _digest(a: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


def flatten_state(tree) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Host copies of the leaves of ``tree`` and their manifest, in tree order.

    Zero-size leaves get a manifest entry (``"empty": true``) but no array: orbax cannot
    save them and their shape and dtype are all they hold. Typed PRNG keys are stored as their raw ``key_data`` (uint32) with the impl name, so
    old-style ``uint32[2]`` keys and new-style typed keys both round-trip exactly."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    arrays, manifest = {}, []
    for i, (path, leaf) in enumerate(flat):
        entry = {"path": jax.tree_util.keystr(path)}
        if _is_prng_key(leaf):
            entry["prng_impl"] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        a = np.asarray(jax.device_get(leaf))
        entry.update(shape=list(a.shape), dtype=str(a.dtype), sha1=_digest(a))
        if a.size == 0:
            entry["empty"] = True
        else:
            arrays[f"{i:05d}"] = a
        manifest.append(entry)
    return arrays, manifest


def _is_empty(entry: dict) -> bool:
    """A zero-size leaf: recorded by shape and dtype only (``empty`` flag, or a 0 in its shape)."""
    return bool(entry.get("empty")) or 0 in entry["shape"]


def _template_manifest(template) -> list[dict]:
    flat, _ = jax.tree_util.tree_flatten_with_path(template)
    out = []
    for path, leaf in flat:
        entry = {"path": jax.tree_util.keystr(path)}
        if _is_prng_key(leaf):
            data = jax.eval_shape(jax.random.key_data, leaf)
            entry.update(shape=list(data.shape), dtype=str(data.dtype), prng_impl=True)
        else:
            entry.update(shape=list(np.shape(leaf)), dtype=str(np.dtype(leaf.dtype)))
        out.append(entry)
    return out


def compare_manifest(saved: list[dict], expected: list[dict], what: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` naming the first leaves that differ in path, shape or dtype."""
    problems = []
    saved_by_path = {e["path"]: e for e in saved}
    expected_paths = [e["path"] for e in expected]
    missing = [p for p in expected_paths if p not in saved_by_path]
    extra = [e["path"] for e in saved if e["path"] not in set(expected_paths)]
    if missing:
        problems.append(f"leaves missing from the {what}: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
    if extra:
        problems.append(f"leaves only in the {what}: {', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}")
    for e in expected:
        s = saved_by_path.get(e["path"])
        if s is None:
            continue
        if list(s["shape"]) != list(e["shape"]) or s["dtype"] != e["dtype"]:
            problems.append(
                f"{e['path']}: {what} has {s['dtype']}{tuple(s['shape'])}, "
                f"this setup needs {e['dtype']}{tuple(e['shape'])}"
            )
        if len(problems) >= 6:
            break
    if problems:
        raise CheckpointError(
            f"the {what} does not fit this setup (different env, network or sizes?):\n  " + "\n  ".join(problems)
        )
