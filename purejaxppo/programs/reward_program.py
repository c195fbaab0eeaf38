"""Reward-model training as a run kind (``"reward-model"``): the
:class:`~purejaxppo.run.protocol.RunProgram` the chunk loop drives, so it gets the run folder,
``metrics.csv``, checkpoints with exact resume, the NaN stop and signals of every other kind.

One update of the loop is one EPOCH: a seeded shuffle of the training pairs, minibatch steps
of the Bradley-Terry loss (:func:`purejaxppo.lm.rewards.bradley_terry.reward_step`, trunk and scalar head
trained), then the held-out pairs' loss and pairwise accuracy (``eval_loss``,
``eval_accuracy``; the headline). Runs ``R`` are seeds of one setup, all from the same model.
The pairs are arguments of the compiled chunk, not constants folded into it.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import check_fields, setting
from purejaxppo.lm.rewards.bradley_terry import PairBatch, pair_loss, reward_optimizer, reward_step
from purejaxppo.lm.rewards.reward_model import make_reward_fn
from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.guards import tree_finite


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """``epochs`` over ``train_pairs`` (set from the data) in minibatches of ``minibatch`` pairs
    (the last partial one dropped), AdamW at ``learning_rate`` with ``weight_decay``,
    ``max_grad_norm`` (0: no clipping); ``held_out``: the share of pairs evaluated, not
    trained on; ``max_prompt`` / ``max_response``: token budgets (longer ones are cut, counted)."""

    # Each field declares its default, what it does and its range: the reward command's flags
    # (help, parse-time checks) are generated from these declarations, and validate checks the same.
    epochs: int = setting(3, "epochs over the training pairs", lo=1)
    minibatch: int = setting(16, "pairs per optimizer step (the last partial minibatch is dropped)", lo=1)
    learning_rate: float = setting(1e-5, "AdamW learning rate", lo=0, lo_open=True, flag="--lr")
    weight_decay: float = setting(0.0, "AdamW weight decay", lo=0)
    max_grad_norm: float = setting(1.0, "global gradient clip norm (0 = off)", lo=0)
    held_out: float = setting(
        0.1, "share of the pairs held out for the evaluation loss and accuracy", lo=0, hi=1, lo_open=True, hi_open=True
    )
    max_prompt: int = setting(256, "prompt tokens kept (the last ones; longer prompts are cut, counted)", lo=1)
    max_response: int = setting(256, "response tokens kept (longer responses are cut, counted)", lo=1)
    train_pairs: int = setting(0, "training pairs (set from the data)", cli=False)

    @property
    def num_updates(self) -> int:
        return self.epochs

    @property
    def batch_size(self) -> int:  # the loop's "steps" per update: pairs per epoch
        return max(1, self.train_pairs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RewardConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown reward config field(s) {unknown}; valid fields: {sorted(names)}")
        return cls(**d)

    def validate(self, flag_of=None) -> "RewardConfig":
        """``self``, every field in its declared range; :class:`ConfigError` naming the first that
        is not (as the flag ``flag_of`` gives it, for a command's user)."""
        check_fields(self, flag_of)
        return self


@dataclasses.dataclass(frozen=True)
class RewardSettings:
    """The run's inputs as its record keeps them (``config.json``'s ``settings``).

    Fields:
      model: the folder the reward model starts from (an absolute path).
      pairs: the preference pairs file (an absolute path).
      pairs_sha256: the pairs file's SHA-256 when the run started: a resume refuses a changed file.
    """

    model: str = ""
    pairs: str = ""
    pairs_sha256: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RewardSettings":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown reward settings field(s) {unknown}; valid fields: {sorted(names)}")
        return cls(**d)


class RewardState(NamedTuple):
    params: dict
    opt_state: object
    key: jax.Array


def _epoch(step, fn, cfg: RewardConfig, state: RewardState, train: PairBatch, held: PairBatch):
    """One epoch of minibatch steps, then the held-out loss and accuracy (pair-weighted means)."""
    key, k_perm = jax.random.split(state.key)
    n = train.prompt.shape[0]
    steps = max(1, n // cfg.minibatch)
    size = min(cfg.minibatch, n)
    order = jax.random.permutation(k_perm, n)[: steps * size].reshape(steps, size)

    def one(carry, idx):
        params, opt_state = carry
        params, opt_state, m = step(params, opt_state, jax.tree.map(lambda x: x[idx], train))
        return (params, opt_state), m

    (params, opt_state), m = jax.lax.scan(one, (state.params, state.opt_state), order)
    held_m = pair_loss(fn, params, held)[1]
    metrics = {
        "train_loss": jnp.mean(m["loss"]),
        "train_accuracy": jnp.mean(m["accuracy"]),
        "eval_loss": held_m["loss"],
        "eval_accuracy": held_m["accuracy"],
    }
    return RewardState(params, opt_state, key), metrics


class RewardProgram(ChunkedProgram):
    """The compiled ``init`` and ``n``-epoch chunks of reward-model training over ``R`` seeds.
    ``lm`` / ``params``: the model every run starts from (its value head is the scalar head);
    ``train`` / ``held``: :class:`PairBatch` arrays."""

    def __init__(self, config: RewardConfig, settings: RewardSettings, lm, params, train: PairBatch, held: PairBatch):
        self.config = dataclasses.replace(config, train_pairs=int(train.prompt.shape[0])).validate()
        self.lm, self.params = lm, params
        self.train, self.held = jax.tree.map(jnp.asarray, train), jax.tree.map(jnp.asarray, held)
        self.num_devices, self.split, self.shard = 1, "seeds", 1
        self.settings = settings
        self.headline = ("eval_accuracy", "eval_accuracy")
        self.nan_hint = "Lower --lr (or keep --max-grad-norm on)"
        fn, opt = (
            make_reward_fn(lm),
            reward_optimizer(self.config.learning_rate, self.config.max_grad_norm, self.config.weight_decay),
        )
        self._step, self._fn = reward_step(fn, opt), fn
        self._init = jax.jit(jax.vmap(lambda k, p: RewardState(p, opt.init(p), k), in_axes=(0, None)))
        super().__init__()

    def kind_for(self, members) -> str:
        return "reward-model"

    def init(self, keys, configs=None):
        return self._init(keys, self.params)

    def build_chunk(self, n: int):
        def one(state, train, held):
            epoch = lambda s, _: _epoch(self._step, self._fn, self.config, s, train, held)  # noqa: E731
            state, metrics = jax.lax.scan(epoch, state, None, length=n)
            return (state, metrics), tree_finite(state.params)

        return jax.jit(jax.vmap(one, in_axes=(0, None, None)))

    def chunk_args(self, state, configs) -> tuple:
        return state, self.train, self.held  # the pairs: arguments, not constants of the program


def first_run_params(state: RewardState):
    """Run 0's parameters (host arrays) from the ``[R, ...]`` state."""
    return jax.tree.map(lambda x: np.asarray(x[0]), state.params)
