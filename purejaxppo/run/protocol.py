"""The run protocol: what a compiled run gives the chunk loop (:mod:`purejaxppo.run.loop`).

The loop is written once against these two interfaces and never asks which kind of run it
drives. A run kind (plain runs and sweeps, PBT, token-level PPO) has a class that meets
:class:`RunProgram`, and one registered :class:`~purejaxppo.run.kinds.RunKind` that says how
every command treats its folders (resume, eval, warm start, report).

Shapes: ``R`` runs on one leading axis (members x seeds: run ``r`` is member ``r // S``,
seed ``r % S``); ``n`` updates per chunk. ``state`` is whatever pytree the kind carries
(a :class:`~purejaxppo.step.train.RunnerState` ``[R, ...]`` for plain runs, a population
state for PBT); the loop only checkpoints it, restores it and hands it back.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Tuple

import jax
import numpy as np

from purejaxppo.config import PPOConfig


class RunProgram(Protocol):
    """A compiled run over the runs axis.

    Contract:

    * ``config``: the run's config (the loop reads ``num_updates`` and ``batch_size``);
      ``num_devices``, ``split`` and ``shard`` (devices the runs axis is split over) describe
      its layout for ``config.json`` and for evaluation.
    * ``headline``: ``(metric, name)``: the ``metrics`` column whose final value sums a run up
      (the mean over the last 5% of updates, finite values only) and its name in
      ``summary.json`` (``final_<name>_per_seed``, ``final_<name>_mean``).
    * ``kind_for(members) -> name``: the kind name its run record takes (``members``: the
      runs' members or None); ``settings``: the kind's own settings object the record keeps
      (``to_dict``/``from_dict``), or None.
    * ``place(keys [R], configs [R] | None) -> inputs``: the inputs laid out on the devices;
      ``init(*inputs) -> state``: the state before update 0 (pure: the same inputs give the
      same state, so a resume can build the template a checkpoint is restored into).
    * ``compile(n, state, configs) -> seconds``: compiles the ``n``-update chunk for these
      inputs once (0.0 when it already is); ``chunk(n, state, configs) ->
      ((state, metrics {name: [R, n]}), finite [R])``: dispatches it and returns at once
      (JAX's asynchronous dispatch), ``finite`` saying whether each run's state is finite.
    * ``check_finite(metrics, finite, first_update, describe) -> message | None``: the NaN
      stop (``describe(r)`` names run ``r``); a kind may tolerate what it repairs itself.
      ``nan_hint``: what to try then, in the kind's own flags (the stop's message ends with it).
    * ``counters(first_update, n) -> {name: int64 [n]}``: the chunk's counters, computed on the
      host (exact past 2**31, where the device's int32 would wrap; e.g. ``env_steps``), the
      same for every run; the loop adds them to the metrics.
    * ``training_state(state) -> RunnerState [R, ...]``: the per-run training state inside
      (what evaluation during training plays with); ``with_training_state(state, runner) ->
      state``: the same state holding ``runner`` instead (a warm start replaces it).
    """

    config: PPOConfig
    num_devices: int
    split: str
    shard: int
    headline: Tuple[str, str]
    settings: object
    nan_hint: str

    def kind_for(self, members) -> str: ...

    def place(self, *inputs) -> tuple: ...

    def init(self, keys: jax.Array, configs=None): ...

    def compile(self, n: int, state, configs=None) -> float: ...

    def chunk(self, n: int, state, configs=None) -> Tuple[tuple, jax.Array]: ...

    def check_finite(
        self, metrics: dict, finite: np.ndarray, first_update: int, describe: Callable[[int], str]
    ) -> Optional[str]: ...

    def counters(self, first_update: int, n: int) -> dict: ...

    def training_state(self, state): ...

    def with_training_state(self, state, runner): ...


class Evaluator(Protocol):
    """Evaluation during training, a separate compiled program at chunk boundaries.

    Contract: ``updates_to_next(done)``: updates from ``done`` to the next evaluation (a chunk
    never runs past it); ``due(done)``: whether one is due after ``done`` updates;
    ``compile(keys [R], runner) -> seconds``; ``__call__(keys [R], done, runner) -> {name: [R]}``
    (``runner``: :meth:`RunProgram.training_state`); ``columns(result | None, R, n) -> {name:
    [R, n]}``: the chunk's extra ``metrics.csv`` columns (NaN where nothing was evaluated).
    It must not change the training numbers (its keys are its own)."""

    def updates_to_next(self, done: int) -> int: ...

    def due(self, done: int) -> bool: ...

    def compile(self, keys: jax.Array, runner) -> float: ...

    def __call__(self, keys: jax.Array, done: int, runner) -> dict: ...

    def columns(self, result: Optional[dict], runs: int, n: int) -> dict: ...
