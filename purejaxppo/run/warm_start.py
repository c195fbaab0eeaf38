"""A new run that starts from another run's trained state (``train --init-from RUN_DIR``).

What is carried over, from the source's latest checkpoint (or a given ``update_*`` folder):

* ``train``: the params and the optimizer state (Adam's moments and step count);
* the observation normaliser's :class:`~purejaxppo.stages.normalize.RunningStats` (``normalize_obs``);
* the reward scaler's return statistics (``normalize_reward``; the running discounted
  returns belong to the source's episodes in progress and start again at 0).

Everything else is the new run's own: fresh env states and observations from its seed, its
own config (total timesteps, lr, ...), its update counter and lr schedule from 0.

Both runs must build the same network on the same env: the config fields in
:data:`SAME_FIELDS` and the agent's own (its registry entry's ``fields``,
:mod:`purejaxppo.agents.registry`) must agree (else the refusal names those that differ),
and the carried leaves must have the same shapes. Seeds: with ``S`` seeds in the new run,
a source with ONE run (seed) starts every new run; a source with ``S`` seeds gives seed
``s`` to seed ``s`` (member ``m``, seed ``s`` of a new sweep too); other counts are refused.
A source with members (a sweep, PBT) needs ``member``: its runs of that member are the source.
The source kind says where its per-run state lies (:attr:`~purejaxppo.run.kinds.RunKind.warm_start`);
a kind without one (token-level PPO) is refused.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import jax
import numpy as np

from purejaxppo.agents.registry import agent_kind
from purejaxppo.run import kinds
from purejaxppo.run.checkpoint import CheckpointError, latest_checkpoint, place_like, read_leaves, read_meta

#: config fields that define the env the agent sees and which agent it is: they must match the source's
#: (and so must the agent's own fields, :func:`same_fields`)
SAME_FIELDS = ("env_name", "obs_keep", "network", "normalize_obs", "normalize_reward")
#: runner-state paths (``keystr``) that a new run takes from the source
CARRIED = (".train.", ".env_state.obs_stats.", ".reward_scale.return_stats.")


def describe(source: str, member: Optional[int], config, num_seeds: int) -> dict:
    """Check that ``source`` (a run folder: its latest checkpoint; or an ``update_*`` folder)
    can start a new run of ``config`` with ``num_seeds`` seeds; return the record kept in the new
    run's ``config.json`` as ``init_from``: ``{run_dir, checkpoint, update, member, source_seeds,
    seeds}``. Reads only JSON files. Raises :class:`CheckpointError` naming the problem."""
    ckpt = _checkpoint(source)
    meta = read_meta(ckpt)
    kind, name = kinds.kind_of(meta)
    if kind.warm_start is None:
        raise CheckpointError(
            f"--init-from {source!r}: that folder holds a {kind.what} run, which cannot start this "
            f"run; pass a folder written by this command (continue that one with "
            f"{kinds.resume_hint(meta, source)})"
        )
    src_members = meta.get("members")
    if src_members and member is None:
        raise CheckpointError(
            f"{source!r} is a {name} of {len(src_members)} members; choose the one to "
            f"start from with --member K (0..{len(src_members) - 1})"
        )
    if not src_members and member is not None:
        raise CheckpointError(f"--member {member}: {source!r} is a single run, with no members; drop --member")
    if member is not None and not 0 <= member < len(src_members or []):
        raise CheckpointError(
            f"--member {member}: {source!r} has {len(src_members)} members (0..{len(src_members) - 1})"
        )
    src_cfg, cfg = meta.get("config", {}), json.loads(json.dumps(config.to_dict()))
    diffs = [
        f"{k}: {src_cfg.get(k)!r} there, {cfg.get(k)!r} here"
        for k in same_fields(config)
        if src_cfg.get(k) != cfg.get(k)
    ]
    if diffs:
        raise CheckpointError(
            f"--init-from {source!r}: that run has another network or env ({'; '.join(diffs)}); "
            "use the same values for these fields (the other hyperparameters may differ)"
        )
    src_seeds = int(meta.get("num_seeds", 1))
    if src_seeds not in (1, num_seeds):
        raise CheckpointError(
            f"--init-from {source!r}: that run has {src_seeds} seeds and this one {num_seeds}; "
            f"use --seeds {src_seeds} (seed s starts from its seed s) or a 1-seed source "
            "(it starts every seed)"
        )
    return {
        "run_dir": os.path.abspath(os.path.dirname(os.path.dirname(ckpt))),
        "checkpoint": ckpt,
        "update": int(meta["update"]),
        "member": member,
        "source_seeds": src_seeds,
        "seeds": "broadcast" if src_seeds == 1 and num_seeds > 1 else "seed s from seed s",
    }


def same_fields(config) -> tuple:
    """The fields a warm start of ``config`` compares: :data:`SAME_FIELDS`, then those that
    decide its agent's parameters (the registry entry of ``config.network``)."""
    return SAME_FIELDS + tuple(f for f in agent_kind(config.network).fields if f not in SAME_FIELDS)


def _checkpoint(source: str) -> str:
    """The checkpoint folder of ``source`` (a run folder -> its latest checkpoint)."""
    if os.path.isfile(os.path.join(source, "meta.json")):
        return os.path.abspath(source)
    if not os.path.isdir(source):
        raise CheckpointError(
            f"--init-from {source!r}: no such run folder; pass a folder written by "
            "`python -m purejaxppo train` (or one of its checkpoints/update_* folders)"
        )
    ckpt = latest_checkpoint(os.path.join(source, "checkpoints"))
    if ckpt is None:
        raise CheckpointError(
            f"--init-from {source!r}: that folder has no complete checkpoint to start from; "
            "train it first (or pass a run folder that has checkpoints/)"
        )
    return os.path.abspath(ckpt)


def apply(record: dict, runner, num_seeds: int):
    """``runner`` ([R, ...], a fresh init of the new run) with the carried leaves of the
    checkpoint ``record`` names (see :func:`describe`), placed like ``runner``'s leaves."""
    ckpt = record["checkpoint"]
    if not os.path.isdir(ckpt):
        raise CheckpointError(f"the checkpoint this run starts from ({ckpt}) is gone; start a new run folder")
    leaves, meta = read_leaves(ckpt)
    prefix = kinds.kind_of(meta)[0].warm_start  # e.g. PBT's state holds the runner state of its members
    src_seeds, member = record["source_seeds"], record["member"]
    base = (member or 0) * src_seeds

    def take(path, leaf):
        key = jax.tree_util.keystr(path)
        if not key.startswith(CARRIED):
            return leaf
        a = leaves.get(prefix + key)
        runs = np.arange(leaf.shape[0])  # new run r = member m * S + seed s takes source seed s (or the one)
        a = None if a is None else np.asarray(a)[base + (0 * runs if src_seeds == 1 else runs % num_seeds)]
        if a is None or a.shape != leaf.shape or a.dtype != leaf.dtype:
            have = "nothing" if a is None else f"{a.dtype}{a.shape[1:]}"
            raise CheckpointError(
                f"--init-from {ckpt}: {key} is {have} there, this run needs "
                f"{leaf.dtype}{leaf.shape[1:]}; start from a run of the same network and env"
            )
        return place_like(a, leaf)

    return jax.tree_util.tree_map_with_path(take, runner)
