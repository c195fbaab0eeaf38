"""Compatibility re-exports of the host side, which now lives in small modules:

* :mod:`purejaxppo.loop`: the chunk loop (``train_chunked``, ``resume_run``, ``RunResult``);
* :mod:`purejaxppo.program`: its compiled functions over the runs axis (``Program``);
* :mod:`purejaxppo.guards`: ``NonFiniteError``, ``TrainingInterrupted``;
* :mod:`purejaxppo.run_folder`: layout, ``config.json``, ``read_metrics``, ``load_run``;
* :mod:`purejaxppo.sinks`: ``metrics.csv``, TensorBoard and W&B sinks;
* :mod:`purejaxppo.population`: ``seed_keys`` and the runs layout.

New code should import from those modules; this one only keeps old imports working.
"""

from .guards import NonFiniteError, TrainingInterrupted
from .loop import RunResult, resume_run, train_chunked
from .population import seed_keys
from .run_folder import final_returns, load_run, load_run_info, read_metrics, versions
from .sinks import TensorBoardLogger, WandbLogger

__all__ = ["train_chunked", "resume_run", "read_metrics", "final_returns", "seed_keys", "NonFiniteError",
           "TrainingInterrupted", "TensorBoardLogger", "WandbLogger", "load_run", "load_run_info", "RunResult",
           "versions"]
