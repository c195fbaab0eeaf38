"""The run folder: its layout, ``config.json``, ``metrics.csv`` reading, resume, loading.

Layout::

    config.json      resolved config, seed, num_seeds, members (sweeps), chunk, devices, split,
                     library/JAX versions (and one entry per resume)
    metrics.csv      one row per update per run: ``seed, update, <metrics>`` (one config) or
                     ``member, seed, update, <metrics>`` (a sweep); floats with 9 significant
                     digits, so float32 values read back exactly
    checkpoints/     update_<U>/ checkpoints of the whole runner state ``[R, ...]`` (last 2)
    summary.json     final returns, timings (written when the run finishes)
    results.md       a sweep's members, best first (written by the CLI)

Runs: ``R = M * S`` (members x seeds); run ``m*S + s`` is member ``m`` with seed key ``s``
(see :func:`purejaxppo.population.runs`). A single-config run is ``M = 1``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import warnings
from typing import Optional

import jax
import numpy as np

from .checkpoint import CheckpointError, latest_checkpoint, read_meta, restore_checkpoint
from .config import PPOConfig
from .population import runs, seed_keys

CONFIG, METRICS, CHECKPOINTS, SUMMARY, RESULTS = "config.json", "metrics.csv", "checkpoints", "summary.json", "results.md"


def versions() -> dict:
    import flax
    import gymnax
    import optax

    from . import __version__

    return {"purejaxppo": __version__, "jax": jax.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "gymnax": getattr(gymnax, "__version__", "?"),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "devices": [str(d) for d in jax.devices()]}


def final_returns(episode_return: np.ndarray, frac: float = 0.05) -> np.ndarray:
    """Per-run mean of the finite episode returns over the last ``frac`` of updates.

    ``episode_return`` is ``[R, U]`` (NaN where no episode completed in an update) -> ``[R]``."""
    ret = np.asarray(episode_return)
    tail = ret[..., -max(1, int(math.ceil(ret.shape[-1] * frac))):]
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
def write_info(run_dir: str, info: dict, resumed_from: Optional[int] = None) -> None:
    """Write ``config.json`` (``info`` + versions); a resume keeps the first one and appends
    ``{"from_update", "versions"}`` to its ``resumes``."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, CONFIG)
    out = dict(info, versions=versions())
    if resumed_from is not None and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        out = dict(old, resumes=old.get("resumes", []) + [{"from_update": resumed_from, "versions": versions()}])
    with open(path, "w") as f:
        json.dump(out, f, indent=2)


def load_run_info(run_dir: str) -> dict:
    """The run folder's ``config.json`` (with ``config`` as a :class:`PPOConfig`)."""
    path = os.path.join(run_dir, CONFIG)
    if not os.path.isdir(run_dir):
        raise CheckpointError(f"run folder {run_dir!r} does not exist; pass the folder given to train --run-dir")
    if not os.path.exists(path):
        raise CheckpointError(f"{run_dir!r} has no config.json, so it is not a purejaxppo run folder; "
                              "pass the folder given to train --run-dir")
    try:
        with open(path) as f:
            info = json.load(f)
        info["config"] = PPOConfig.from_dict(info["config"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path} is damaged ({e}); it cannot be resumed or evaluated") from None
    return info


def check_same_setup(meta: dict, info: dict, path: str) -> None:
    """A resume must use the checkpoint's config, seeds and members (else the numbers differ)."""
    saved_cfg, cfg = meta.get("config", {}), info["config"]
    diffs = [f"{k}: checkpoint {saved_cfg.get(k)!r}, now {cfg.get(k)!r}"
             for k in sorted(set(saved_cfg) | set(cfg)) if saved_cfg.get(k) != cfg.get(k)]
    diffs += [f"{k}: checkpoint {meta[k]!r}, now {info.get(k)!r}"
              for k in ("seed", "num_seeds", "members") if k in meta and meta[k] != info.get(k)]
    if diffs:
        raise CheckpointError(f"checkpoint {path} was made with a different setup:\n  " + "\n  ".join(diffs[:8])
                              + "\nresume with the run's own config (python -m purejaxppo train --resume RUN_DIR, "
                              "no config flags) or start a new run folder")


# --- metrics.csv --------------------------------------------------------------------------
def _rows(path: str) -> list:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _lead(header: list, path: str) -> int:
    """Number of index columns before ``update``: 1 (``seed``) or 2 (``member, seed``)."""
    if header[:2] == ["seed", "update"]:
        return 1
    if header[:3] == ["member", "seed", "update"]:
        return 2
    raise ValueError(f"{path}: unexpected header {header[:3]}; expected seed, update, ... or member, seed, update, ...")


def read_metrics(path: str, num_runs: Optional[int] = None, max_update: Optional[int] = None,
                 num_seeds: Optional[int] = None) -> dict:
    """``metrics.csv`` (or a run folder) -> ``{name: float64 [R, U]}``, run ``member*S + seed``.

    Rows with ``update >= max_update`` are ignored; missing (run, update) cells are NaN.
    ``num_runs``/``num_seeds`` default to what the file holds."""
    if os.path.isdir(path):
        path = os.path.join(path, METRICS)
    rows = _rows(path)
    if not rows:
        return {}
    header, lead = rows[0], _lead(rows[0], path)
    data = np.array([[float(x) for x in r] for r in rows[1:] if r], np.float64).reshape(-1, len(header))
    if max_update is not None:
        data = data[data[:, lead] < max_update]
    idx = data[:, :lead].astype(int)
    seeds = num_seeds or (int(idx[:, -1].max()) + 1 if len(data) else 0)
    run = idx[:, 0] * seeds + idx[:, 1] if lead == 2 else idx[:, 0]
    n_runs = num_runs or (int(run.max()) + 1 if len(data) else 0)
    updates = int(data[:, lead].max()) + 1 if len(data) else 0
    out = {}
    for j, name in enumerate(header[lead + 1:], start=lead + 1):
        a = np.full((n_runs, updates), np.nan)
        a[run, data[:, lead].astype(int)] = data[:, j]
        out[name] = a
    return out


def truncate_metrics(path: str, max_update: int) -> None:
    """Drop rows of ``metrics.csv`` with ``update >= max_update`` (written after the checkpoint
    a run resumes from), keeping the order of the others; atomic rewrite."""
    if not os.path.exists(path):
        return
    rows = _rows(path)
    if not rows:
        return
    lead = _lead(rows[0], path)
    keep = rows[:1] + [r for r in rows[1:] if r and int(r[lead]) < max_update]
    with open(path + ".tmp", "w", newline="") as f:
        csv.writer(f).writerows(keep)
    os.replace(path + ".tmp", path)


# --- resume and loading -------------------------------------------------------------------
def restore_latest(run_dir: str, template, info: dict):
    """``(runner, update, earlier metrics {name: [R, U]} or None)`` to continue ``run_dir``
    from its latest checkpoint (``template``: a fresh runner, whose leaves' shardings the
    restored arrays take); drops metrics rows written after that checkpoint. With no
    checkpoint yet it returns ``template`` at update 0 (the same computation)."""
    path = latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
    runner, done = template, 0
    if path is not None:
        check_same_setup(read_meta(path), info, path)
        state, meta = restore_checkpoint(path, template)
        runner = jax.tree.map(lambda x, t: jax.device_put(x, t.sharding), state, template)
        done = int(meta["update"])
    metrics_path = os.path.join(run_dir, METRICS)
    truncate_metrics(metrics_path, done)
    prev = None
    if done and os.path.exists(metrics_path):
        prev = read_metrics(metrics_path, template_runs(template), done, info["num_seeds"])
    return runner, done, prev


def template_runs(runner) -> int:
    return int(jax.tree.leaves(runner)[0].shape[0])


def write_summary(run_dir: str, summary: dict) -> None:
    with open(os.path.join(run_dir, SUMMARY), "w") as f:
        json.dump(summary, f, indent=2)


def load_run(run_dir: str, checkpoint: Optional[str] = None, ppo=None):
    """``(config, info, runner_state [R, ...], ppo)`` from a run folder's latest (or given)
    checkpoint. ``ppo`` defaults to ``make_ppo(config)`` (an env-split run's runner state
    has the same global shapes, so it loads on one device too)."""
    from .train import make_ppo

    info = load_run_info(run_dir)
    config = info["config"]
    path = checkpoint or latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
    if path is None:
        raise CheckpointError(f"{run_dir!r} has no complete checkpoint yet; train it (or resume it with "
                              f"python -m purejaxppo train --resume {run_dir}) first")
    ppo = ppo if ppo is not None else make_ppo(config)
    keys, configs = run_inputs(config, info["seed"], info["num_seeds"], info.get("members"))
    if configs is None:
        template = jax.eval_shape(jax.vmap(lambda k: ppo.init(k, config)), keys)
    else:
        template = jax.eval_shape(jax.vmap(ppo.init), keys, configs)
    runner, meta = restore_checkpoint(path, template)
    info["checkpoint"], info["update"] = path, int(meta["update"])
    return config, info, runner, ppo


def summary(result, env_steps: int, checkpoint: Optional[str]) -> dict:
    """``summary.json`` of a finished :class:`~purejaxppo.loop.RunResult` (``env_steps``: whole run, all runs)."""
    fr = np.asarray(result.final_return, np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {"final_return_per_seed": fr.tolist(), "final_return_mean": float(np.nanmean(fr)),
               "compile_s": result.compile_s, "run_s": result.run_s, "env_steps": env_steps,
               "steps_per_s": result.steps_per_s, "checkpoint": checkpoint}
        if result.members is not None:
            out["members"] = result.members
            out["final_return_per_member"] = fr.reshape(len(result.members), -1).tolist()
    return out
