"""Checkpoint files: exact round trip of any pytree (typed and raw PRNG keys too),
atomic layout and pruning, clear errors for mismatched setups and corrupt files."""

import json
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.run.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    restore_checkpoint,
    save_checkpoint,
)
from purejaxppo.parallel.runs_axis import seed_keys


class Inner(NamedTuple):
    stats: dict
    flag: jax.Array


def _tree(seed=0):
    r = np.random.default_rng(seed)
    return {
        "params": {"w": r.normal(size=(3, 4)).astype(np.float32), "b": np.float32(r.normal())},
        "raw_key": np.asarray(jax.random.PRNGKey(seed)),
        "typed_key": jax.random.key(seed),
        "env": Inner({"count": np.arange(5, dtype=np.int32), "mean": r.normal(size=(2,))}, np.array([True, False])),
        "update": np.int32(7),
    }


def _same(a, b):
    ka = jax.tree.leaves(
        jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x, a)
    )
    kb = jax.tree.leaves(
        jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x, b)
    )
    assert len(ka) == len(kb)
    for x, y in zip(ka, kb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)  # exact: restored vs saved


def test_round_trip_is_exact_and_keeps_structure(tmp_path):
    tree = _tree()
    path = save_checkpoint(str(tmp_path), 7, tree, {"note": "hi"})
    template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), _tree(1))
    restored, meta = restore_checkpoint(path, template)
    assert jax.tree.structure(restored) == jax.tree.structure(tree)
    assert isinstance(restored["env"], Inner) and meta["note"] == "hi" and meta["update"] == 7
    assert jax.dtypes.issubdtype(restored["typed_key"].dtype, jax.dtypes.prng_key)
    _same(tree, restored)
    # the restored keys draw the same numbers as the originals
    assert jax.random.uniform(restored["typed_key"]) == jax.random.uniform(tree["typed_key"])


def test_only_complete_checkpoints_count_and_old_ones_are_pruned(tmp_path):
    root = str(tmp_path)
    for u in (2, 4, 6):
        save_checkpoint(root, u, _tree(u), keep=2)
    os.makedirs(os.path.join(root, "update_00000008"))  # a crash mid-save: no meta.json
    os.makedirs(os.path.join(root, ".tmp-update_00000010-123"))
    assert [u for u, _ in list_checkpoints(root)] == [4, 6]
    assert latest_checkpoint(root).endswith("update_00000006")
    restored, _ = restore_checkpoint(latest_checkpoint(root), _tree())
    _same(_tree(6), restored)


def test_wrong_shape_or_structure_is_named_not_a_trace(tmp_path):
    path = save_checkpoint(str(tmp_path), 1, _tree())
    bad = _tree()
    bad["params"]["w"] = np.zeros((3, 5), np.float32)
    with pytest.raises(CheckpointError, match=r"\['params'\]\['w'\].*float32\(3, 4\).*float32\(3, 5\)"):
        restore_checkpoint(path, bad)
    extra = dict(_tree(), obs_stats=np.zeros(3))
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: \['obs_stats'\]"):
        restore_checkpoint(path, extra)


def test_checkpoint_of_another_env_is_rejected_clearly(tmp_path):
    cfg = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 8, update_epochs=2, num_minibatches=2)
    keys = seed_keys(0, 2)
    template = lambda c: jax.eval_shape(jax.vmap(lambda k: make_ppo(c).init(k, c)), keys)
    state = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template(cfg))
    path = save_checkpoint(str(tmp_path), 8, state)
    other = cfg.replace(env_name="Acrobot-v1")  # 6 observations, 3 actions
    with pytest.raises(CheckpointError) as e:
        restore_checkpoint(path, template(other))
    msg = str(e.value)
    assert "does not fit this setup" in msg and "Dense_0" in msg and "kernel" in msg, msg
    with pytest.raises(CheckpointError, match="hidden|Dense|kernel"):
        restore_checkpoint(path, template(cfg.replace(hidden_sizes=(32, 32))))


def _data_files(path):
    out = []
    for d, _, files in os.walk(os.path.join(path, "state")):
        out += [os.path.join(d, f) for f in files if "ocdbt.process" in d and os.path.getsize(os.path.join(d, f)) > 0]
    return out


def test_truncated_or_corrupt_files_are_detected(tmp_path):
    tree = {"w": np.arange(4096, dtype=np.float32), "k": np.asarray(jax.random.PRNGKey(1))}
    # truncated array data
    path = save_checkpoint(str(tmp_path / "a"), 1, tree)
    files = _data_files(path)
    assert files
    for f in files:
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
    with pytest.raises(CheckpointError, match="truncated or corrupt|checksum|truncated"):
        restore_checkpoint(path, tree)
    # a flipped byte in the middle of the (compressed) array data
    path = save_checkpoint(str(tmp_path / "b"), 1, tree)
    f = max(_data_files(path), key=os.path.getsize)
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(f, "wb").write(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupt"):
        restore_checkpoint(path, tree)
    # values that read back fine but differ from what was saved: the checksum catches them
    path = save_checkpoint(str(tmp_path / "d"), 1, tree)
    meta = json.load(open(os.path.join(path, "meta.json")))
    meta["leaves"][0]["sha1"] = "0" * 40
    json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
    with pytest.raises(CheckpointError, match="fails its checksum"):
        restore_checkpoint(path, tree)
    # damaged metadata
    path = save_checkpoint(str(tmp_path / "c"), 1, tree)
    with open(os.path.join(path, "meta.json"), "w") as fh:
        fh.write('{"update": 1, "leav')
    with pytest.raises(CheckpointError, match="meta.json is corrupt"):
        restore_checkpoint(path, tree)


def test_relative_checkpoint_folder_round_trips(tmp_path, monkeypatch):
    # orbax refuses relative paths; a run folder given as "runs/x" must still checkpoint
    import jax.numpy as jnp

    from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint, save_checkpoint

    monkeypatch.chdir(tmp_path)
    state = {"w": jnp.arange(6.0).reshape(2, 3), "n": jnp.asarray(3, jnp.int32)}
    save_checkpoint("runs/rel/checkpoints", 5, state)
    path = latest_checkpoint("runs/rel/checkpoints")
    restored, _ = restore_checkpoint(os.path.relpath(path), state)
    np.testing.assert_array_equal(restored["w"], state["w"])  # exact: restored vs saved
    assert int(restored["n"]) == 3


def test_zero_size_leaves_round_trip_and_checksums_still_hold(tmp_path):
    # orbax refuses zero-size arrays ("Cannot save arrays with zero size"; MJX env states have
    # them): they are kept by shape and dtype and rebuilt, the other leaves still verified
    tree = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "contact": np.zeros((4, 0, 3), np.float32),
        "ids": np.zeros((0,), np.int32),
        "key": jax.random.key(3),
    }
    path = save_checkpoint(str(tmp_path / "a"), 1, tree)
    template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), tree)
    restored, _ = restore_checkpoint(path, template)
    _same(tree, restored)
    assert restored["contact"].shape == (4, 0, 3) and restored["ids"].dtype == np.int32
    # only zero-size leaves: nothing for orbax, still a checkpoint
    empty_only = {"a": np.zeros((0, 2), np.float32)}
    restored, _ = restore_checkpoint(save_checkpoint(str(tmp_path / "e"), 1, empty_only), empty_only)
    _same(empty_only, restored)
    # a wrong checksum of a real leaf is still refused, and so is another empty shape
    meta_path = os.path.join(path, "meta.json")
    meta = json.load(open(meta_path))
    meta["leaves"][[e["path"] for e in meta["leaves"]].index("['w']")]["sha1"] = "0" * 40
    json.dump(meta, open(meta_path, "w"))
    with pytest.raises(CheckpointError, match="fails its checksum"):
        restore_checkpoint(path, template)
    other = dict(tree, contact=np.zeros((4, 0, 2), np.float32))
    with pytest.raises(CheckpointError, match="contact"):
        restore_checkpoint(save_checkpoint(str(tmp_path / "b"), 1, tree), other)
