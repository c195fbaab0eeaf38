"""The run folder: its layout, ``config.json``, ``metrics.csv`` reading, resume, loading.

Layout::

    config.json      the run record (:mod:`purejaxppo.run.record`: kind, resolved config, the kind's
                     settings, seed, num_seeds, members, chunk, devices, split), library/JAX
                     versions (and one entry per resume)
    metrics.csv      one row per update per run: ``seed, update, <metrics>`` (one config) or
                     ``member, seed, update, <metrics>`` (a sweep); floats with 9 significant
                     digits, so float32 values read back exactly
    checkpoints/     update_<U>/ checkpoints of the whole runner state ``[R, ...]`` (last 2)
    summary.json     final returns, timings (written when the run finishes)
    results.md       a sweep's members, best first (written by the CLI)
    .lock            held by the one process writing the folder (:mod:`purejaxppo.run.run_lock`)

Which kind a folder holds, and so which command continues it, is the registry's
(:mod:`purejaxppo.run.kinds`). A resume continues only a folder of its own kind and setup (:func:`check_resumable`), from
the newest checkpoint that ``metrics.csv`` fully covers (:func:`read_latest`).

Runs: ``R = M * S`` (members x seeds); run ``m*S + s`` is member ``m`` with seed key ``s``
(see :func:`purejaxppo.parallel.runs_axis.runs`). A single-config run is ``M = 1``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import warnings
from typing import Optional

import jax
import numpy as np

from purejaxppo.run.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    read_meta,
    restore_checkpoint,
)
from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.run import kinds
from purejaxppo.run.record import CONFIG, RunRecord, load_record, read_json, read_raw, record_of  # noqa: F401
from purejaxppo.run.metrics_file import complete_updates, lead_columns, load_rows, read_metrics, truncate_metrics  # noqa: F401
from purejaxppo.parallel.runs_axis import runs, seed_keys

METRICS, CHECKPOINTS, SUMMARY, RESULTS = "metrics.csv", "checkpoints", "summary.json", "results.md"


def versions() -> dict:
    import flax
    import optax

    from purejaxppo.envs.gymnax_suite import import_gymnax

    gymnax = import_gymnax()

    from purejaxppo import __version__

    return {
        "purejaxppo": __version__,
        "jax": jax.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "gymnax": getattr(gymnax, "__version__", "?"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
    }


def final_returns(episode_return: np.ndarray, frac: float = 0.05) -> np.ndarray:
    """Per-run mean of the finite episode returns over the last ``frac`` of updates.

    ``episode_return`` is ``[R, U]`` (NaN where no episode completed in an update) -> ``[R]``."""
    ret = np.asarray(episode_return)
    tail = ret[..., -max(1, int(math.ceil(ret.shape[-1] * frac))) :]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN run -> NaN, on purpose
        return np.nanmean(np.where(np.isfinite(tail), tail, np.nan), axis=-1)


def run_inputs(config: PPOConfig, seed: int, num_seeds: int, members: Optional[list]):
    """``(keys [R], configs [R] or None)``: a sweep's stacked member configs, else the one config
    (None: bound into the compiled functions, broadcast to every run)."""
    if members is None:
        return seed_keys(seed, num_seeds), None
    return runs(config, members, num_seeds, seed)


# --- config.json --------------------------------------------------------------------------
def write_info(run_dir: str, record: RunRecord, resumed_from: Optional[int] = None) -> None:
    """Write ``config.json`` (the record + versions); a resume keeps the first one (its layout
    too) and appends ``{"from_update", "versions"}`` to its ``resumes``."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, CONFIG)
    out = dict(record.to_json(), versions=versions())
    if resumed_from is not None and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        out = dict(old, resumes=old.get("resumes", []) + [{"from_update": resumed_from, "versions": versions()}])
    _write_json(path, out)


def _write_json(path: str, obj) -> None:
    """Atomic: a full disk leaves the old file (or none), never half a file."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def refuse_existing_run(run_dir: str) -> None:
    """A new run must not write into a folder that already holds one (checkpoints or
    metrics): raise :class:`ConfigError` with the command that continues it instead."""
    if list_checkpoints(os.path.join(run_dir, CHECKPOINTS)) or os.path.exists(os.path.join(run_dir, METRICS)):
        try:
            hint = kinds.resume_hint(read_json(os.path.join(run_dir, CONFIG)), run_dir)
        except (OSError, ValueError):
            hint = f"the command that wrote it, with --resume {run_dir}"
        raise ConfigError(
            f"run folder {run_dir!r} already holds a run; continue it with `{hint}` or choose another --run-dir"
        )


def check_resumable(run_dir: str, record: RunRecord) -> None:
    """A resume described by ``record`` (kind, config, seeds, members) must continue a folder of
    the same kind and setup; checked before anything in the folder is touched."""
    path = os.path.join(run_dir, CONFIG)
    saved = read_raw(run_dir)
    kind, name = kinds.kind_of(saved)
    if name != record.kind:
        raise CheckpointError(
            f"{run_dir!r} holds a {name}, not a {record.kind}; nothing was changed. "
            f"Continue it as what it is: {kinds.resume_hint(saved, run_dir)} (no other flags)"
        )
    check_same_setup(saved, record, path, run_dir)
    metrics, ckpts = os.path.join(run_dir, METRICS), list_checkpoints(os.path.join(run_dir, CHECKPOINTS))
    if ckpts and ckpts[-1][0] > 0 and not os.path.exists(metrics):  # update 0 has no rows yet
        raise CheckpointError(
            f"{metrics} is missing, but the run has checkpoints up to update {ckpts[-1][0]}; "
            "put metrics.csv back (e.g. from a backup) to resume, or start a new run folder"
        )
    if os.path.exists(metrics):
        header = load_rows(metrics)[0]
        want_lead = 2 if saved.get("members") else 1  # the writer's layout: member, seed, update with members
        if header and lead_columns(header, metrics) != want_lead:
            has = "without" if want_lead == 2 else "with"
            raise CheckpointError(
                f"{metrics} has the columns of a run {has} members but config.json says "
                f"{name}; the folder is mixed up, nothing was changed"
            )


def check_same_setup(meta: dict, record: RunRecord, path: str, run_dir: str = "RUN_DIR") -> None:
    """A resume must use the checkpoint's config, seeds and members (else the numbers differ).

    A field the checkpoint does not name was added to the config class after it was
    written: it had the field's default behaviour then, so it compares as the default."""
    defaults = type(record.config)().to_dict()
    saved_cfg, cfg = meta.get("config", {}), json.loads(json.dumps(record.config.to_dict()))
    saved_cfg = {**{k: v for k, v in defaults.items() if k != "env_name"}, **saved_cfg} if saved_cfg else saved_cfg
    diffs = [
        f"{k}: checkpoint {saved_cfg.get(k)!r}, now {cfg.get(k)!r}"
        for k in sorted(set(saved_cfg) | set(cfg))
        if saved_cfg.get(k) != cfg.get(k)
    ]
    diffs += [
        f"{k}: checkpoint {meta[k]!r}, now {getattr(record, k)!r}"
        for k in ("seed", "num_seeds", "members")
        if k in meta and meta[k] != getattr(record, k)
    ]
    if diffs:
        raise CheckpointError(
            f"{path} was made with a different setup:\n  "
            + "\n  ".join(diffs[:8])
            + f"\nresume with the run's own config ({kinds.resume_hint(meta, run_dir)}, "
            "no config flags) or start a new run folder"
        )


# --- resume and loading -------------------------------------------------------------------
def read_latest(run_dir: str, template, record: RunRecord):
    """``(runner, update, earlier metrics {name: [R, U]} or None, note or None)`` to continue
    ``run_dir``: ``runner`` as host arrays in ``template``'s structure (``template`` itself when
    nothing is restored: ``update`` 0).

    It continues from the newest checkpoint whose updates all have their rows in
    ``metrics.csv``: rows lost to a crash or a full disk (a partly written last line, a cut
    tail) are recomputed from an older checkpoint, or from the start (same seeds, same
    numbers); ``note`` then says so. Rows written after that checkpoint are dropped. A
    missing ``metrics.csv`` next to checkpoints is reported, not silently replaced."""
    ckpts = list_checkpoints(os.path.join(run_dir, CHECKPOINTS))
    metrics_path, runs = os.path.join(run_dir, METRICS), template_runs(template)
    if ckpts and not os.path.exists(metrics_path):
        check_resumable(run_dir, record)  # raises unless the newest checkpoint is update 0 (no rows yet)
    complete = complete_updates(metrics_path, runs, record.num_seeds) if os.path.exists(metrics_path) else 0
    usable = [(u, p) for u, p in ckpts if u <= complete]
    runner, done, note = template, 0, None
    if ckpts and (not usable or usable[-1][0] != ckpts[-1][0]):
        start = f"checkpoint update {usable[-1][0]}" if usable else "the start"
        note = (
            f"metrics.csv has every run's rows only for updates 0..{complete - 1}, but the newest checkpoint is "
            f"at update {ckpts[-1][0]}; recomputing from {start} (same seeds, same numbers)"
        )
    if usable:
        path = usable[-1][1]
        check_same_setup(read_meta(path), record, path, run_dir)
        runner, meta = restore_checkpoint(path, template)
        done = int(meta["update"])
    truncate_metrics(metrics_path, done)
    prev = _Earlier(read_metrics(metrics_path, runs, done, record.num_seeds), (runs, done)) if done else None
    return runner, done, prev, note


class _Earlier(dict):
    """The earlier updates' metrics; one metrics.csv has no column for reads as NaN (the
    writer warns that it is not recorded) instead of failing when the run finishes."""

    def __init__(self, metrics: dict, shape: tuple):
        super().__init__(metrics)
        self.shape = shape

    def __missing__(self, name: str) -> np.ndarray:
        return np.full(self.shape, np.nan)


def finished_run(run_dir: str) -> bool:
    """True when ``run_dir`` finished every update with an intact record: summary.json, the
    final checkpoint, and every run's ``metrics.csv`` rows. Resuming it has nothing to do."""
    record = load_record(run_dir)
    n = record.config.num_updates
    ckpt = latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
    metrics = os.path.join(run_dir, METRICS)
    if not (os.path.exists(os.path.join(run_dir, SUMMARY)) and ckpt is not None and os.path.exists(metrics)):
        return False
    meta = read_meta(ckpt)
    check_same_setup(meta, record, ckpt, run_dir)  # an edited config.json is refused, not ignored
    return int(meta["update"]) >= n and complete_updates(metrics, record.runs, record.num_seeds) >= n


def template_runs(runner) -> int:
    return int(jax.tree.leaves(runner)[0].shape[0])


def write_summary(run_dir: str, summary: dict) -> None:
    _write_json(os.path.join(run_dir, SUMMARY), summary)


def checkpoint_to_load(run_dir: str, record: RunRecord, checkpoint: Optional[str] = None) -> str:
    """The given checkpoint, else the folder's newest complete one (else a :class:`CheckpointError`)."""
    path = checkpoint or latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
    if path is None:
        raise CheckpointError(
            f"{run_dir!r} has no complete checkpoint yet; train it (or resume it with "
            f"{kinds.resume_hint({'kind': record.kind}, run_dir)}) first"
        )
    return path


def load_run(run_dir: str, checkpoint: Optional[str] = None, ppo=None):
    """``(config, record, runner_state [R, ...], ppo)`` of a control run folder (one config or a
    sweep) from its latest (or given) checkpoint (:func:`restore_runs`)."""
    record = load_record(run_dir)
    runner, ppo, _, _ = restore_runs(run_dir, record, checkpoint, ppo)
    return record.config, record, runner, ppo


def restore_runs(run_dir: str, record: RunRecord, checkpoint: Optional[str] = None, ppo=None):
    """``(runner_state [R, ...], ppo, checkpoint, update)`` of a control run folder (one config or
    a sweep) from its latest (or given) checkpoint. ``ppo`` defaults to ``make_ppo(config)``:
    the agent is rebuilt by the name ``config.network`` records
    (:mod:`purejaxppo.agents.registry`; a user-registered agent must be registered in this
    process too), and an env-split run's runner state has the same global shapes, so it loads
    on one device too."""
    from purejaxppo.step.train import make_ppo

    config = record.config
    path = checkpoint_to_load(run_dir, record, checkpoint)
    ppo = ppo if ppo is not None else make_ppo(config)  # the agent config.network names, by the registry
    keys, configs = run_inputs(config, record.seed, record.num_seeds, record.members)
    if configs is None:
        template = jax.eval_shape(jax.vmap(lambda k: ppo.init(k, config)), keys)
    else:
        template = jax.eval_shape(jax.vmap(ppo.init), keys, configs)
    runner, meta = restore_checkpoint(path, template)
    return runner, ppo, path, int(meta["update"])


def summary(result, env_steps: int, checkpoint: Optional[str], name: str = "return") -> dict:
    """``summary.json`` of a finished run (``env_steps``: all runs; ``name``: the program's headline)."""
    fr = np.asarray(result.final_return, np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {
            f"final_{name}_per_seed": fr.tolist(),
            f"final_{name}_mean": float(np.nanmean(fr)),
            "compile_s": result.compile_s,
            "run_s": result.run_s,
            "env_steps": env_steps,
            "steps_per_s": result.steps_per_s,
            "checkpoint": checkpoint,
        }
        if result.members is not None:
            out["members"] = result.members
            out[f"final_{name}_per_member"] = fr.reshape(len(result.members), -1).tolist()
    return out
