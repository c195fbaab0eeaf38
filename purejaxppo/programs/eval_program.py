"""Greedy evaluation during training: ``K`` episodes per run every ``N`` updates.

:class:`EvalProgram` is one compiled program over the runs axis (members x seeds, sharded
like the training chunks): every run plays ``K`` episodes on its own env copies with the
mode action (:func:`purejaxppo.step.evaluate.make_episodes`, the ``eval`` command's code: raw env
returns; with observation normalisation the policy sees the run's running statistics as
they are at that update, frozen). The chunk loop (:func:`purejaxppo.run.loop.run_chunks`)
ends a chunk at every multiple of ``N`` (:mod:`purejaxppo.run.periodic_eval`) and calls it on
the state there; the results become the ``eval_return`` / ``eval_episodes`` columns of
that update's ``metrics.csv`` rows (NaN at the other updates).

Why a separate program at chunk boundaries rather than a ``lax.cond`` inside the chunk:
the chunk is vmapped over runs, so a predicate on the per-run update counter is batched
and ``cond`` turns into a ``select`` that would play the evaluation episodes after EVERY
update; and evaluation code inside the chunk would change the training program itself.
Here the training chunk is the same compiled executable with or without evaluation (its
numbers are bit-identical by construction), the chunk length is chosen to divide ``N``
when it can (``loop.chunk_size``) and a chunk always stops at the next multiple of ``N``,
so an evaluation is never more than one chunk boundary away and costs one call.

Keys: run ``r``'s evaluation after ``u`` updates uses
``fold_in(fold_in(seed_key_r, EVAL_SALT), u)`` (:func:`eval_key`): derived from the run's
seed key, never drawn from the training PRNG stream (``RunnerState.rng``), so training
consumes exactly the same keys. The result depends only on (seed key, update, params,
statistics): chunk sizes, resumes and devices do not change it, and the members of a sweep
share each seed's evaluation keys (common random numbers, as for their training keys).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.step.evaluate import find_obs_stats, make_episodes
from purejaxppo.run.compile_once import signature
from purejaxppo.run.periodic_eval import PeriodicEvaluator
from purejaxppo.parallel.sharding import shard_runs

EVAL_SALT = 0xE7A1  # folded into each run's seed key: its evaluation keys, apart from its training keys
COLUMNS = ("eval_return", "eval_episodes")


def check_eval(every: int, episodes: int, num_updates: int) -> None:
    """ConfigError naming the flag unless ``1 <= every <= num_updates`` and ``episodes >= 1``."""
    if every < 1:
        raise ConfigError(f"--eval-every={every} must be >= 1 (evaluate after every N updates)")
    if episodes < 1:
        raise ConfigError(f"--eval-episodes={episodes} must be >= 1")
    if every > num_updates:
        raise ConfigError(
            f"--eval-every={every} is more than the run's {num_updates} updates, so no evaluation "
            f"would run; choose a value in 1..{num_updates}"
        )


def eval_key(seed_key: jax.Array, update) -> jax.Array:
    """The evaluation key of the run with ``seed_key`` after ``update`` updates."""
    return jax.random.fold_in(jax.random.fold_in(seed_key, EVAL_SALT), update)


def episode_summary(returns: jax.Array) -> dict:
    """``returns [K]`` (NaN: unfinished) -> ``{"eval_return": mean of the finished, NaN if none,
    "eval_episodes": how many finished}`` (float32 scalars)."""
    finished = jnp.isfinite(returns)
    count = jnp.sum(finished)
    total = jnp.sum(jnp.where(finished, returns, 0.0))
    return {
        "eval_return": jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan).astype(jnp.float32),
        "eval_episodes": count.astype(jnp.float32),
    }


class EvalProgram(PeriodicEvaluator):
    """Greedy evaluation of every run, ``episodes`` episodes each, after every ``every``
    updates. ``agent`` is the training agent (``ppo.agent``); ``num_devices`` shards the runs
    as the training program does (``Program.shard``)."""

    def __init__(self, config: PPOConfig, agent, every: int, episodes: int, num_devices: int = 1):
        check_eval(every, episodes, config.num_updates)
        super().__init__(every, COLUMNS)
        self.config, self.episodes = config, episodes
        play = make_episodes(config, agent, episodes, deterministic=True)

        def one(seed_key, update, params, obs_stats):
            returns, _ = play(eval_key(seed_key, update), params, obs_stats)
            return episode_summary(returns)

        self._fn = shard_runs(one, num_devices)

    def _args(self, seed_keys, done: int, runner):
        stats = find_obs_stats(runner.env_state) if self.config.normalize_obs else None
        updates = jnp.full((seed_keys.shape[0],), done, jnp.int32)
        return seed_keys, updates, runner.train.params, stats

    def compile(self, seed_keys, runner) -> float:
        """Compile for these inputs (once); returns the seconds it took."""
        args = self._args(seed_keys, 0, runner)
        return self._once(signature(args), lambda: self._fn.lower(*args).compile())

    def __call__(self, seed_keys, done: int, runner) -> dict:
        """Evaluate ``runner [R, ...]`` (the state after ``done`` updates; ``seed_keys [R]``
        the runs' seed keys) -> ``{"eval_return": [R], "eval_episodes": [R]}`` (NumPy)."""
        return {k: np.asarray(v) for k, v in jax.device_get(self._fn(*self._args(seed_keys, done, runner))).items()}
