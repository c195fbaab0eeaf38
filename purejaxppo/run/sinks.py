"""Metric sinks: where a chunk's metrics go, behind one tiny protocol.

A sink has ``write(metrics, first_update)`` with ``metrics`` ``{name: [R, n]}`` (runs x the
chunk's updates ``first_update .. first_update+n-1``) and ``close()``. The chunk loop calls
every sink after every chunk (:func:`purejaxppo.run.loop.run_chunks`, ``loggers=``); any object
with these two methods is a sink.

* :class:`CSVLogger`: one row per update per run in ``metrics.csv`` (the run folder's record);
* :class:`TensorBoardLogger`, :class:`WandbLogger`: means over seeds (one curve per member
  for a sweep), x = env steps per run.
"""

from __future__ import annotations

import os
import warnings
from typing import Protocol

import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.run.metrics_file import MetricsWriter, with_host_counters


class Sink(Protocol):
    def write(self, metrics: dict, first_update: int) -> None: ...

    def close(self) -> None: ...


class CSVLogger(MetricsWriter):
    """The ``metrics.csv`` sink: :class:`~purejaxppo.run.metrics_file.MetricsWriter`, which owns
    the file's format (columns, numbers, host-side counters, appending on resume)."""


def seed_means(metrics: dict, num_members: int = 1) -> dict:
    """``{name: [R, n]}`` -> ``{name: [n]}`` NaN-aware means over seeds; with several members
    one curve each, named ``member<m>/<name>``."""
    out = {}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for k, v in metrics.items():
            v = np.asarray(v, np.float64)
            means = np.nanmean(v.reshape((num_members, -1) + v.shape[1:]), axis=1)
            if num_members == 1:
                out[k] = means[0]
            else:
                out.update({f"member{m}/{k}": means[m] for m in range(num_members)})
    return out


def require_tensorboard() -> None:
    """ConfigError unless a TensorBoard writer can be imported (checked before a run folder is made)."""
    import importlib.util

    if importlib.util.find_spec("tensorboardX") is None and importlib.util.find_spec("torch") is None:
        raise ConfigError("--tensorboard needs tensorboardX; install it with pip install 'purejaxppo[tensorboard]'")


def require_wandb() -> None:
    """ConfigError unless ``wandb`` can be imported (checked before a run folder is made)."""
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        raise ConfigError("--wandb needs the wandb package; install it with pip install 'purejaxppo[wandb]'")


class TensorBoardLogger:
    """Mean-over-seeds metrics to TensorBoard event files in ``<run_dir>/tb`` (x = env steps).

    Optional extra: ``pip install 'purejaxppo[tensorboard]'`` (tensorboardX)."""

    def __init__(self, run_dir: str, batch_size: int, num_members: int = 1):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError(
                    "--tensorboard needs tensorboardX; install it with pip install 'purejaxppo[tensorboard]'"
                ) from None
        self.writer, self.batch_size, self.num_members = (
            SummaryWriter(os.path.join(run_dir, "tb")),
            batch_size,
            num_members,
        )

    def write(self, metrics: dict, first_update: int) -> None:
        metrics = with_host_counters(metrics, first_update, self.batch_size)
        for name, v in seed_means(metrics, self.num_members).items():
            for i, x in enumerate(v):
                if np.isfinite(x):
                    self.writer.add_scalar(name, float(x), (first_update + i + 1) * self.batch_size)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Mean-over-seeds metrics to Weights & Biases (one ``log`` per update, step = env steps).

    Optional extra: ``pip install 'purejaxppo[wandb]'``."""

    def __init__(self, run_dir: str, batch_size: int, config: dict, project: str = "purejaxppo", num_members: int = 1):
        try:
            import wandb
        except ImportError:
            raise ConfigError(
                "--wandb needs the wandb package; install it with pip install 'purejaxppo[wandb]'"
            ) from None
        self.batch_size, self.num_members = batch_size, num_members
        self.run = wandb.init(
            project=project, dir=run_dir, config=config, name=os.path.basename(run_dir.rstrip("/")), resume="allow"
        )

    def write(self, metrics: dict, first_update: int) -> None:
        means = seed_means(with_host_counters(metrics, first_update, self.batch_size), self.num_members)
        n = len(next(iter(means.values())))
        for i in range(n):
            row = {k: float(v[i]) for k, v in means.items() if np.isfinite(v[i])}
            self.run.log(row, step=(first_update + i + 1) * self.batch_size)

    def close(self) -> None:
        self.run.finish()
