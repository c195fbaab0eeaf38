"""Host-side driver: runs the compiled training step in chunks of updates.

The chunk function (``lax.scan`` of ``step`` over ``chunk`` updates, vmapped over
seeds) is compiled once; between chunks the host shows progress, appends metrics to
the run folder, checks for non-finite numbers and saves checkpoints. The numbers are
identical to one ``train(rng)`` call: the same step, applied the same number of times
to the same state -- and a run resumed from a checkpoint continues with exactly the
state (arrays, PRNG keys, update counter) it stopped with.

Run folder layout::

    config.json      resolved config, seed, num_seeds, chunk, library/JAX versions
    metrics.csv      one row per update per seed (floats written with 9 significant
                     digits, so float32 values read back exactly)
    checkpoints/     update_<U>/ orbax checkpoints of the whole runner state (last 2)
    summary.json     final returns, timings (written when the run finishes)
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .checkpoint import CheckpointError, latest_checkpoint, read_meta, restore_checkpoint, save_checkpoint
from .config import ConfigError, PPOConfig
from .train import PPO, make_ppo

# Metrics that are NaN by design (no episode finished in that update); never a failure.
MAY_BE_NAN = ("episode_return", "episode_length")


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or parameter; the message names update and metric."""


class TrainingInterrupted(KeyboardInterrupt):
    """Raised inside the driver by SIGTERM (Ctrl-C raises KeyboardInterrupt itself)."""


def chunk_size(num_updates: int, target: int) -> int:
    """A chunk length near ``target``: the largest divisor of ``num_updates`` not above
    it when that is at least ``target/2`` (one compile), else ``target`` itself (the
    remainder then needs a second, shorter compile)."""
    target = max(1, min(target, num_updates))
    best = max(d for d in range(1, target + 1) if num_updates % d == 0)
    return best if best * 2 >= target else target


def final_returns(episode_return: np.ndarray, frac: float = 0.05) -> np.ndarray:
    """Per-seed mean of the finite episode returns over the last ``frac`` of updates.

    ``episode_return`` is ``[S, U]`` (NaN where no episode completed in an update)."""
    ret = np.asarray(episode_return)
    k = max(1, int(math.ceil(ret.shape[-1] * frac)))
    tail = ret[..., -k:]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN seed -> NaN, on purpose
        out = np.nanmean(np.where(np.isfinite(tail), tail, np.nan), axis=-1)
    return out


def versions() -> dict:
    import flax
    import gymnax
    import optax

    from . import __version__

    return {"purejaxppo": __version__, "jax": jax.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "gymnax": getattr(gymnax, "__version__", "?"),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "devices": [str(d) for d in jax.devices()]}


# --- metrics logs -------------------------------------------------------------------------
def _fmt(x):
    x = float(x)
    # 9 significant digits round-trip any float32 exactly (resume re-reads earlier rows).
    return "nan" if math.isnan(x) else f"{x:.9g}"


class MetricsWriter:
    """Appends one CSV row per update per seed to ``metrics.csv`` (columns ``seed, update, <names>``)."""

    def __init__(self, path: str, names: list[str], append: bool = False):
        self.path, self.names = path, names
        if not append or not os.path.exists(path) or os.path.getsize(path) == 0:
            with open(path, "w", newline="") as f:
                csv.writer(f).writerow(["seed", "update"] + names)

    def write(self, metrics: dict, first_update: int):
        """``metrics``: name -> ``[S, n]`` for updates ``first_update .. first_update+n-1``."""
        arrays = {k: np.asarray(metrics[k]) for k in self.names}
        seeds, n = arrays[self.names[0]].shape[:2]
        with open(self.path, "a", newline="") as f:
            w = csv.writer(f)
            for s in range(seeds):
                for u in range(n):
                    w.writerow([s, first_update + u] + [_fmt(arrays[k][s, u]) for k in self.names])
            f.flush()
            os.fsync(f.fileno())

    def close(self):
        pass


def read_metrics(path: str, num_seeds: Optional[int] = None, max_update: Optional[int] = None) -> dict:
    """``metrics.csv`` (or a run folder) -> ``{name: float64 [S, U]}`` ordered by (seed, update).

    Rows with ``update >= max_update`` are ignored. Missing (seed, update) cells are NaN."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    header, body = rows[0], rows[1:]
    if header[:2] != ["seed", "update"]:
        raise ValueError(f"{path}: unexpected header {header[:2]}; expected seed, update, ...")
    data = np.array([[float(x) for x in r] for r in body if r], dtype=np.float64).reshape(-1, len(header))
    if max_update is not None:
        data = data[data[:, 1] < max_update]
    seeds = int(num_seeds if num_seeds is not None else (data[:, 0].max() + 1 if len(data) else 0))
    updates = int(data[:, 1].max() + 1) if len(data) else 0
    out = {}
    for j, name in enumerate(header[2:], start=2):
        a = np.full((seeds, updates), np.nan)
        a[data[:, 0].astype(int), data[:, 1].astype(int)] = data[:, j]
        out[name] = a
    return out


def truncate_metrics(path: str, max_update: int) -> None:
    """Drop rows of ``metrics.csv`` with ``update >= max_update`` (written after the checkpoint
    a run resumes from), keeping the order of the others; atomic rewrite."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    keep = rows[:1] + [r for r in rows[1:] if r and int(r[1]) < max_update]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(keep)
    os.replace(tmp, path)


def _seed_means(metrics: dict) -> dict:
    """``{name: [S, n]}`` -> ``{name: [n]}`` means over seeds (NaN-aware)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {k: np.nanmean(np.asarray(v, np.float64), axis=0) for k, v in metrics.items()}


class TensorBoardLogger:
    """Mean-over-seeds metrics to TensorBoard event files in ``<run_dir>/tb`` (x = env steps).

    Optional extra: ``pip install 'purejaxppo[tensorboard]'`` (tensorboardX)."""

    def __init__(self, run_dir: str, batch_size: int):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("--tensorboard needs tensorboardX; install it with "
                                  "pip install 'purejaxppo[tensorboard]'") from None
        self.writer, self.batch_size = SummaryWriter(os.path.join(run_dir, "tb")), batch_size

    def write(self, metrics: dict, first_update: int):
        for name, v in _seed_means(metrics).items():
            for i, x in enumerate(v):
                if np.isfinite(x):
                    self.writer.add_scalar(name, float(x), (first_update + i + 1) * self.batch_size)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbLogger:
    """Mean-over-seeds metrics to Weights & Biases (one ``log`` per update, step = env steps).

    Optional extra: ``pip install 'purejaxppo[wandb]'``."""

    def __init__(self, run_dir: str, batch_size: int, config: dict, project: str = "purejaxppo"):
        try:
            import wandb
        except ImportError:
            raise ConfigError("--wandb needs the wandb package; install it with pip install 'purejaxppo[wandb]'") from None
        self.wandb, self.batch_size = wandb, batch_size
        self.run = wandb.init(project=project, dir=run_dir, config=config, name=os.path.basename(run_dir.rstrip("/")),
                              resume="allow")

    def write(self, metrics: dict, first_update: int):
        means = _seed_means(metrics)
        n = len(next(iter(means.values())))
        for i in range(n):
            row = {k: float(v[i]) for k, v in means.items() if np.isfinite(v[i])}
            self.run.log(row, step=(first_update + i + 1) * self.batch_size)

    def close(self):
        self.run.finish()


# --- results --------------------------------------------------------------------------------
@dataclass
class RunResult:
    config: PPOConfig
    run_dir: Optional[str]
    runner_state: object
    metrics: dict  # name -> [S, U] over the whole run (earlier sessions re-read from metrics.csv)
    compile_s: float
    run_s: float
    env_steps: int  # total over seeds, this session
    final_return: np.ndarray  # [S]
    extra: dict = field(default_factory=dict)
    updates_done: int = 0
    finished: bool = True  # False when stopped early by ``stop_after``

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.run_s, 1e-9)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    return jax.random.split(jax.random.PRNGKey(seed), num_seeds)


def _first_non_finite(metrics: dict, finite_params: np.ndarray, first_update: int) -> Optional[str]:
    """Describe the earliest non-finite loss/diagnostic (or parameter) in a chunk, else None.

    ``metrics``: name -> ``[S, n]``; ``finite_params``: ``[S]`` bools after the chunk."""
    worst = None  # (update, seed, name, value)
    for name in sorted(metrics):
        if name in MAY_BE_NAN:
            continue
        a = np.asarray(metrics[name], np.float64)
        bad = ~np.isfinite(a)
        if bad.any():
            s, u = np.argwhere(bad)[np.argmin(np.argwhere(bad)[:, 1])]
            if worst is None or u < worst[0]:
                worst = (int(u), int(s), name, a[s, u])
    if worst is not None:
        u, s, name, v = worst
        return f"non-finite {name} ({v}) at update {first_update + u + 1} (seed {s})"
    if not np.all(finite_params):
        s = int(np.argmin(finite_params))
        return (f"non-finite parameters or optimizer state after updates {first_update + 1}.."
                f"{first_update + np.asarray(next(iter(metrics.values()))).shape[1]} (seed {s})")
    return None


class _SigtermAsInterrupt:
    """Within the block, SIGTERM raises :class:`TrainingInterrupted` (like Ctrl-C raises
    KeyboardInterrupt) so the driver can save a checkpoint before exiting."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise TrainingInterrupted("SIGTERM")

            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


def _tree_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


# Compiled chunk functions, reused by later driver calls in the same process (a resume,
# a sweep, the tests): keyed by the PPO instance ("default" when the driver built it from
# the config itself), config, device count, chunk length and the runner's shapes. The
# PPO's ``run`` is kept in the value so its id is not reused.
_CACHE: dict = {}


def _functions(ppo: PPO, config: PPOConfig, num_seeds: int, num_devices: int, owner):
    """``(init(keys [S]) -> runner [S, ...], make_chunk(n) -> jitted runner -> ((runner, metrics), finite [S]))``."""
    def chunk_fn(n):
        def one(r):
            out = ppo.run(r, config, n)
            return out, _tree_finite(out[0].train)  # extra output: does not change the numbers
        return one

    if num_devices > 1 and num_seeds % num_devices == 0:
        from .parallel import seed_parallel_train

        return (seed_parallel_train(lambda k: ppo.init(k, config), num_devices),
                lambda n: seed_parallel_train(chunk_fn(n), num_devices))
    key = ("init", owner, _hashable(config))
    if key[2] is not None and key in _CACHE:
        init = _CACHE[key][1]
    else:
        init = jax.jit(jax.vmap(lambda k: ppo.init(k, config)))
        if key[2] is not None:
            _CACHE[key] = (ppo.run, init)
    return init, lambda n: jax.jit(jax.vmap(chunk_fn(n)))


def _hashable(config):
    try:
        hash(config)
        return config
    except TypeError:  # e.g. a population config with array leaves: no caching
        return None


def _compiled_chunk(ppo, config, num_devices, n, runner, make_chunk, owner):
    sig = tuple((x.shape, str(x.dtype)) for x in jax.tree.leaves(runner))
    key = ("chunk", owner, _hashable(config), num_devices, n, str(jax.tree.structure(runner)), sig)
    if key[2] is not None and key in _CACHE:
        return _CACHE[key][1]
    fn = make_chunk(n).lower(runner).compile()
    if key[2] is not None:
        _CACHE[key] = (ppo.run, fn)
    return fn


def train_chunked(
    config: PPOConfig,
    *,
    seed: int = 0,
    num_seeds: int = 1,
    run_dir: Optional[str] = None,
    chunk_updates: int = 25,
    num_devices: int = 1,
    on_chunk: Optional[Callable[[dict], None]] = None,
    ppo: Optional[PPO] = None,
    checkpoint_every: int = 10,
    keep_checkpoints: int = 2,
    resume: bool = False,
    stop_after: Optional[int] = None,
    loggers: Sequence = (),
) -> RunResult:
    """Train ``num_seeds`` seeds of ``config`` in chunks; returns a :class:`RunResult`.

    Seeds are vmapped; with ``num_devices > 1`` (and ``num_seeds`` a multiple of it)
    they are also split over devices. After every chunk: ``on_chunk(info)``, metrics
    appended to ``run_dir/metrics.csv`` and to each of ``loggers`` (objects with
    ``write(metrics {name: [S, n]}, first_update)`` and ``close()``), a finiteness check,
    and every ``checkpoint_every`` chunks a checkpoint of the whole runner state.

    A checkpoint of the last completed chunk is also saved at the end, at ``stop_after``
    updates (then ``finished=False``), on Ctrl-C / SIGTERM and on any error (then the
    exception propagates). Non-finite losses/parameters raise :class:`NonFiniteError`
    after saving the last finite state. ``resume=True`` continues the run in ``run_dir``
    from its latest checkpoint (same config, seeds and chunk size: see :func:`resume_run`),
    dropping metrics rows written after it; the result equals an uninterrupted run.
    """
    owner = "default" if ppo is None else id(ppo.run)  # compiled-function cache key (see _CACHE)
    ppo = ppo if ppo is not None else make_ppo(config)
    keys = seed_keys(seed, num_seeds)
    n_total = config.num_updates
    chunk = chunk_size(n_total, chunk_updates)
    init, make_chunk = _functions(ppo, config, num_seeds, num_devices, owner)

    ckpt_root = os.path.join(run_dir, "checkpoints") if run_dir else None
    run_info = {"config": config.to_dict(), "seed": seed, "num_seeds": num_seeds, "chunk_updates": chunk,
                "num_devices": num_devices, "checkpoint_every": checkpoint_every}
    t0 = time.perf_counter()
    done, prev_metrics = 0, None
    if resume:
        if not run_dir:
            raise ConfigError("resume=True needs the run_dir of the run to continue")
        path = latest_checkpoint(ckpt_root)
        if path is not None:
            _check_same_setup(read_meta(path), run_info, path)
            template = jax.eval_shape(init, keys)
            runner, meta = restore_checkpoint(path, template)
            done = int(meta["update"])
        else:  # nothing saved yet: training from scratch is the same computation
            runner = init(keys)
        truncate_metrics(os.path.join(run_dir, "metrics.csv"), done)
        if done and os.path.exists(os.path.join(run_dir, "metrics.csv")):
            prev_metrics = read_metrics(run_dir, num_seeds, max_update=done)
    else:
        runner = init(keys)
    if run_dir:
        os.makedirs(run_dir, exist_ok=True)
        cfg_path = os.path.join(run_dir, "config.json")
        info = dict(run_info, versions=versions())
        if resume and os.path.exists(cfg_path):
            with open(cfg_path) as f:
                old = json.load(f)
            info = dict(old, resumes=old.get("resumes", []) + [{"from_update": done, "versions": versions()}])
        with open(cfg_path, "w") as f:
            json.dump(info, f, indent=2)

    compiled = {}

    def get(n):
        if n not in compiled:
            compiled[n] = _compiled_chunk(ppo, config, num_devices, n, runner, make_chunk, owner)
        return compiled[n]

    get(min(chunk, max(n_total - done, 1)))
    compile_s = time.perf_counter() - t0
    writers = list(loggers)
    csv_writer = None
    all_metrics: dict[str, list] = {}
    run_s = 0.0
    start = done
    last_saved = done if resume else -1
    good_runner, good_done = runner, done  # last state whose metrics are written and which is finite
    chunks_since_ckpt = 0
    stop_at = n_total if stop_after is None else min(n_total, max(stop_after, done))

    def checkpoint(state, update):
        nonlocal last_saved
        if not ckpt_root or update == last_saved:
            return None
        meta = dict(run_info, versions=versions(), metrics_rows_per_seed=update)
        path = save_checkpoint(ckpt_root, update, state, meta, keep=keep_checkpoints)
        last_saved = update
        return path

    try:
        with _SigtermAsInterrupt():
            while done < stop_at:
                n = min(chunk, stop_at - done)
                if n not in compiled:  # remainder chunk: compile outside the timed region
                    tc = time.perf_counter()
                    get(n)
                    compile_s += time.perf_counter() - tc
                t = time.perf_counter()
                (new_runner, metrics), finite = compiled[n](runner)
                metrics, finite = jax.device_get((metrics, finite))
                run_s += time.perf_counter() - t
                metrics = {k: np.asarray(v) for k, v in metrics.items()}
                if run_dir:
                    if csv_writer is None:
                        csv_writer = MetricsWriter(os.path.join(run_dir, "metrics.csv"), sorted(metrics),
                                                   append=resume)
                    csv_writer.write(metrics, done)
                for w in writers:
                    w.write(metrics, done)
                problem = _first_non_finite(metrics, np.asarray(finite), done)
                if problem is not None:
                    path = checkpoint(good_runner, good_done) or (
                        latest_checkpoint(ckpt_root) if ckpt_root else None)
                    where = f"; the last finite checkpoint is {path} (update {good_done})" if path else ""
                    raise NonFiniteError(
                        f"{problem}; training stopped{where}. Lower the learning rate (--lr) or "
                        "--max-grad-norm, or enable --normalize-obs / --normalize-reward")
                for k, v in metrics.items():
                    all_metrics.setdefault(k, []).append(v)
                runner, done = new_runner, done + n
                good_runner, good_done = runner, done
                chunks_since_ckpt += 1
                if chunks_since_ckpt >= checkpoint_every and done < stop_at:
                    checkpoint(runner, done)
                    chunks_since_ckpt = 0
                if on_chunk is not None:
                    steps = (done - start) * config.batch_size * num_seeds
                    on_chunk({"updates": done, "num_updates": n_total, "env_steps": done * config.batch_size,
                              "run_s": run_s, "compile_s": compile_s, "steps_per_s": steps / max(run_s, 1e-9),
                              "episode_return": metrics["episode_return"], "start_update": start})
            checkpoint(runner, done)
    except BaseException as e:
        if not isinstance(e, NonFiniteError):
            try:
                path = checkpoint(good_runner, good_done)
            except BaseException:  # a failing save must not hide the original error
                path = None
            e.checkpoint = path or (latest_checkpoint(ckpt_root) if ckpt_root else None)
            e.updates_done = good_done
        raise
    finally:
        for w in writers:
            try:
                w.close()
            except Exception:
                pass

    metrics = {k: np.concatenate(v, axis=1) for k, v in all_metrics.items()}
    if prev_metrics:
        if metrics:
            metrics = {k: np.concatenate([prev_metrics[k].astype(v.dtype), v], axis=1) for k, v in metrics.items()}
        else:
            metrics = prev_metrics
    ret = metrics.get("episode_return", np.full((num_seeds, 1), np.nan))
    result = RunResult(config, run_dir, runner, metrics, compile_s, run_s,
                       (done - start) * config.batch_size * num_seeds, final_returns(ret),
                       updates_done=done, finished=done >= n_total)
    if run_dir and result.finished:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = float(np.nanmean(result.final_return))
        summary = {"final_return_per_seed": result.final_return.tolist(), "final_return_mean": mean,
                   "compile_s": compile_s, "run_s": run_s, "env_steps": n_total * config.batch_size * num_seeds,
                   "steps_per_s": result.steps_per_s, "checkpoint": latest_checkpoint(ckpt_root)}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return result


def _check_same_setup(meta: dict, run_info: dict, path: str) -> None:
    """A resume must use the checkpoint's config and seeds (else the numbers differ)."""
    diffs = []
    saved_cfg, cfg = meta.get("config", {}), run_info["config"]
    for k in sorted(set(saved_cfg) | set(cfg)):
        if saved_cfg.get(k) != cfg.get(k):
            diffs.append(f"{k}: checkpoint {saved_cfg.get(k)!r}, now {cfg.get(k)!r}")
    for k in ("seed", "num_seeds"):
        if k in meta and meta[k] != run_info[k]:
            diffs.append(f"{k}: checkpoint {meta[k]!r}, now {run_info[k]!r}")
    if diffs:
        raise CheckpointError(f"checkpoint {path} was made with a different setup:\n  " + "\n  ".join(diffs[:8])
                              + "\nresume with the run's own config (python -m purejaxppo train --resume RUN_DIR, "
                              "no config flags) or start a new run folder")


def load_run_info(run_dir: str) -> dict:
    """The run folder's ``config.json`` (with ``config`` as a :class:`PPOConfig`)."""
    path = os.path.join(run_dir, "config.json")
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


def resume_run(run_dir: str, **kwargs) -> RunResult:
    """Continue the run in ``run_dir`` from its latest checkpoint with its saved config,
    seed, seeds, chunk size and device count (keyword args override the others, e.g.
    ``on_chunk``, ``stop_after``, ``loggers``)."""
    info = load_run_info(run_dir)
    opts = dict(seed=info["seed"], num_seeds=info["num_seeds"], chunk_updates=info.get("chunk_updates", 25),
                num_devices=info.get("num_devices", 1), checkpoint_every=info.get("checkpoint_every", 10))
    opts.update(kwargs)
    return train_chunked(info["config"], run_dir=run_dir, resume=True, **opts)


def load_run(run_dir: str, checkpoint: Optional[str] = None, ppo: Optional[PPO] = None):
    """``(config, info, runner_state [S, ...], ppo)`` from a run folder's latest (or given) checkpoint."""
    info = load_run_info(run_dir)
    config = info["config"]
    path = checkpoint or latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if path is None:
        raise CheckpointError(f"{run_dir!r} has no complete checkpoint yet; train it (or resume it with "
                              f"python -m purejaxppo train --resume {run_dir}) first")
    ppo = ppo if ppo is not None else make_ppo(config)
    keys = seed_keys(info["seed"], info["num_seeds"])
    template = jax.eval_shape(jax.vmap(lambda k: ppo.init(k, config)), keys)
    runner, meta = restore_checkpoint(path, template)
    info["checkpoint"], info["update"] = path, int(meta["update"])
    return config, info, runner, ppo
