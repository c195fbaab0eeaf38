"""A token-level run that starts from another run's trained policy (``rlhf --init-from RUN_DIR``).

The source folder is routed by its kind (:mod:`purejaxppo.run.kinds`): a kind that offers
``initial_policy(run_dir, record, run)`` (today the token-level kind) can start one; any other
is refused in one line naming the kinds that can. What is carried over: one run's policy (the
only run, or run ``K`` of a folder of several seeds: the choice is the caller's, never a default) at
the source's newest checkpoint, LoRA adapters merged (as ``export`` writes it), cast to the new
model's parameter dtypes. It takes the place of the model the new run would load: the new run's
policy, its critic's starting point and its frozen reference (its own SFT stage, if any, runs
on top). Everything else is the new run's own: task or prompts, reward, PPO config, seeds.

Both runs must hold the same model: the settings in :data:`SAME_MODEL` must agree (else the
refusal names those that differ) and so must every parameter's shape.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import jax
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.run.checkpoint import CheckpointError

#: the settings that decide the model's architecture and weights' meaning: they must match the source's
SAME_MODEL = ("model_dir", "init", "d_model", "n_layers", "n_heads")


def policy_sources() -> list:
    """The registered kinds whose folders can start a token-level run (they offer ``initial_policy``)."""
    from purejaxppo.programs import kinds

    return sorted({k.what for k in kinds.known().values() if getattr(k, "initial_policy", None)})


def start_from_run(source: str, settings, template, run: Optional[int] = None) -> Tuple[dict, dict]:
    """``(record, params)``: the ``init_from`` record kept in the new run's ``config.json``
    (``{run_dir, checkpoint, update, source_run, source_seeds}``) and the source's policy parameters
    laid out as ``template`` (the new run's model parameters: same tree and shapes, its dtypes).
    ``settings``: the new run's :class:`RLHFSettings`; ``run``: which of the source's runs (seeds),
    required when it has several (None: its only run). Raises :class:`ConfigError` naming the problem."""
    from purejaxppo.programs import kinds

    flag = f"--init-from {source}"
    try:
        kind, record = kinds.folder(source)
    except CheckpointError as e:
        raise ConfigError(f"{flag}: {e}") from None
    start = getattr(kind, "initial_policy", None)
    if start is None:
        raise ConfigError(
            f"{flag}: that folder holds a {kind.what} run, which cannot start a token-level run; pass a "
            f"folder of: {', '.join(policy_sources())} (continue that one with {kinds.resume_hint({'kind': record.kind}, source)})"
        )
    diffs = [
        f"{k}: {getattr(record.settings, k)!r} there, {getattr(settings, k)!r} here"
        for k in SAME_MODEL
        if getattr(record.settings, k) != getattr(settings, k)
    ]
    if diffs:
        raise ConfigError(
            f"{flag}: that run has another model ({'; '.join(diffs)}); use the same model flags "
            "(the task, prompts, reward and PPO settings may differ)"
        )
    run = _which_run(source, record.num_seeds, run)
    try:
        params, update, checkpoint = start(source, record, run)
    except CheckpointError as e:
        raise ConfigError(f"{flag}: {e}") from None
    params = _like(params, template, flag)
    info = {
        "run_dir": os.path.abspath(source),
        "checkpoint": os.path.abspath(checkpoint),
        "update": update,
        "source_run": run,
        "source_seeds": record.num_seeds,
    }
    return info, params


def _which_run(source: str, runs: int, run: Optional[int]) -> int:
    """The source run to start from: ``run``, checked against the folder's ``runs``; None is
    accepted only for a folder of one run (of several, taking one silently would be a guess)."""
    if run is None:
        if runs > 1:
            raise ConfigError(
                f"--init-from {source}: that folder holds {runs} runs (seeds); choose the one to start "
                f"from with --init-from-run K (0..{runs - 1})"
            )
        return 0
    if not 0 <= run < runs:
        raise ConfigError(f"--init-from-run {run}: {source} holds {runs} run(s); give K in 0..{runs - 1}")
    return run


def _like(params, template, flag: str):
    """``params`` (host arrays) as ``template``'s tree, each leaf in its dtype; another tree or a
    shape that differs is refused naming the first one."""
    got = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    want = jax.tree_util.tree_flatten_with_path(template)[0]
    if {jax.tree_util.keystr(p) for p in got} != {jax.tree_util.keystr(p) for p, _ in want}:
        raise ConfigError(f"{flag}: that run's policy has other parameters than this run's model; use the same model")
    by_name = {jax.tree_util.keystr(p): x for p, x in got.items()}
    leaves = []
    for p, t in want:
        x = np.asarray(by_name[jax.tree_util.keystr(p)])
        if x.shape != np.shape(t):
            raise ConfigError(
                f"{flag}: {jax.tree_util.keystr(p)} is {x.shape} there and {np.shape(t)} here; use the same model "
                "(and a task with the same vocabulary and lengths)"
            )
        leaves.append(x.astype(t.dtype))
    return jax.tree.unflatten(jax.tree.structure(template), leaves)
