"""Host-side driver: runs the compiled training step in chunks of updates.

The chunk function (``lax.scan`` of ``step`` over ``chunk`` updates, vmapped over
seeds) is compiled once; between chunks the host shows progress and appends metrics
to the run folder. The numbers are identical to one ``train(rng)`` call: the same
step, applied the same number of times to the same state.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .config import PPOConfig
from .train import PPO, make_ppo


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
    with np.errstate(all="ignore"):
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


class MetricsWriter:
    """Appends one CSV row per update per seed to ``metrics.csv``."""

    def __init__(self, path: str, names: list[str], append: bool = False):
        self.path, self.names = path, names
        if not append or not os.path.exists(path):
            with open(path, "w", newline="") as f:
                csv.writer(f).writerow(["seed", "update"] + names)

    def write(self, metrics: dict, first_update: int):
        arrays = {k: np.asarray(metrics[k]) for k in self.names}
        seeds, n = arrays[self.names[0]].shape[:2]
        with open(self.path, "a", newline="") as f:
            w = csv.writer(f)
            for s in range(seeds):
                for u in range(n):
                    w.writerow([s, first_update + u] + [_fmt(arrays[k][s, u]) for k in self.names])


def _fmt(x):
    x = float(x)
    return "nan" if math.isnan(x) else f"{x:.6g}"


@dataclass
class RunResult:
    config: PPOConfig
    run_dir: Optional[str]
    runner_state: object
    metrics: dict  # name -> [S, U]
    compile_s: float
    run_s: float
    env_steps: int  # total over seeds
    final_return: np.ndarray  # [S]
    extra: dict = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.run_s, 1e-9)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    return jax.random.split(jax.random.PRNGKey(seed), num_seeds)


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
) -> RunResult:
    """Train ``num_seeds`` seeds of ``config`` in chunks; returns a :class:`RunResult`.

    Seeds are vmapped; with ``num_devices > 1`` (and ``num_seeds`` a multiple of it)
    they are also split over devices. ``on_chunk(info)`` is called after every chunk.
    """
    ppo = ppo if ppo is not None else make_ppo(config)
    keys = seed_keys(seed, num_seeds)
    n_total = config.num_updates
    chunk = chunk_size(n_total, chunk_updates)
    if num_devices > 1 and num_seeds % num_devices == 0:
        from .parallel import seed_parallel_train

        init = seed_parallel_train(lambda k: ppo.init(k, config), num_devices)
        make_chunk = lambda n: seed_parallel_train(lambda r: ppo.run(r, config, n), num_devices)
    else:
        init = jax.jit(jax.vmap(lambda k: ppo.init(k, config)))
        make_chunk = lambda n: jax.jit(jax.vmap(lambda r: ppo.run(r, config, n)))

    if run_dir:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump({"config": config.to_dict(), "seed": seed, "num_seeds": num_seeds,
                       "versions": versions()}, f, indent=2)

    t0 = time.perf_counter()
    runner = init(keys)
    compiled = {}

    def get(n):
        if n not in compiled:
            compiled[n] = make_chunk(n).lower(runner).compile()
        return compiled[n]

    get(chunk)
    compile_s = time.perf_counter() - t0
    writer = None
    all_metrics: dict[str, list] = {}
    done, run_s = 0, 0.0
    while done < n_total:
        n = min(chunk, n_total - done)
        fn = get(n) if n in compiled else None
        if fn is None:  # remainder chunk: compile outside the timed region
            tc = time.perf_counter()
            fn = get(n)
            compile_s += time.perf_counter() - tc
        t = time.perf_counter()
        runner, metrics = fn(runner)
        metrics = jax.device_get(metrics)
        run_s += time.perf_counter() - t
        for k, v in metrics.items():
            all_metrics.setdefault(k, []).append(np.asarray(v))
        if run_dir:
            if writer is None:
                writer = MetricsWriter(os.path.join(run_dir, "metrics.csv"), sorted(metrics))
            writer.write(metrics, done)
        done += n
        if on_chunk is not None:
            on_chunk({"updates": done, "num_updates": n_total, "env_steps": done * config.batch_size,
                      "run_s": run_s, "compile_s": compile_s,
                      "steps_per_s": done * config.batch_size * num_seeds / max(run_s, 1e-9),
                      "episode_return": metrics["episode_return"]})
    metrics = {k: np.concatenate(v, axis=1) for k, v in all_metrics.items()}
    result = RunResult(config, run_dir, runner, metrics, compile_s, run_s,
                       n_total * config.batch_size * num_seeds, final_returns(metrics["episode_return"]))
    if run_dir:
        summary = {"final_return_per_seed": result.final_return.tolist(),
                   "final_return_mean": float(np.nanmean(result.final_return)),
                   "compile_s": compile_s, "run_s": run_s, "env_steps": result.env_steps,
                   "steps_per_s": result.steps_per_s}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return result
