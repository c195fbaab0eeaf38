"""Token-level PPO as a run kind (``"rlhf"``): the :class:`~purejaxppo.run.protocol.RunProgram`
the chunk loop drives, so an RLHF run gets the run folder, metrics.csv, checkpoints with exact
resume, the NaN stop, signals and sinks that control runs have.

One update of the loop is one PPO iteration (``batch_size`` prompts); runs ``R`` are seeds of
one setup, all starting from the same supervised (SFT) model, which is also their reference.
:class:`RLHFSettings` is what ``config.json`` records besides the :class:`TokenPPOConfig`: the
task, the model, the SFT stage, evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.lm.config import TokenPPOConfig
from purejaxppo.lm.data_parallel import data_parallel
from purejaxppo.lm.sft import init_tiny_lm
from purejaxppo.lm.tasks import make_task
from purejaxppo.lm.token_ppo import make_token_ppo
from purejaxppo.run.compile_once import CompileOnce, signature
from purejaxppo.run.guards import first_non_finite, tree_finite

RUNS_AXIS = "runs"
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class RLHFSettings:
    """The setup around the PPO config. ``task`` (a :data:`purejaxppo.lm.tasks.TASKS` name) with
    ``task_options`` (its dataclass fields); the model: a TinyLM of ``d_model``/``n_layers``/
    ``n_heads``, or ``init`` (a local GPT-2 folder in Hugging Face's layout, then the SFT
    stage starts from it); ``dtype`` the compute dtype; the SFT stage: ``sft_steps`` of
    ``sft_batch`` demonstrations at ``sft_lr`` (0 steps: PPO starts from the model as given);
    ``eval_every`` iterations, greedy decoding of ``eval_batch`` fixed prompts."""

    task: str = "reverse"
    task_options: tuple = ()  # ((field, value), ...): hashable
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    dtype: str = "float32"
    init: Optional[str] = None
    sft_steps: int = 100
    sft_batch: int = 64
    sft_lr: float = 3e-3
    eval_every: int = 0  # 0 = no evaluation during training
    eval_batch: int = 256

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["task_options"] = dict(self.task_options)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RLHFSettings":
        d = dict(d)
        d["task_options"] = tuple(sorted((d.get("task_options") or {}).items()))
        return cls(**d)

    def make_task(self):
        return make_task(self.task, **dict(self.task_options))

    def model(self, key):
        """``(lm, params)``: the TinyLM of these sizes (initialised from ``key``) or the GPT-2 in ``init``."""
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r} must be one of {sorted(DTYPES)}")
        task = self.make_task()
        if self.init:
            from purejaxppo.lm.gpt2 import load_gpt2
            from purejaxppo.lm.model import FlaxLM

            module, params = load_gpt2(self.init, dtype=DTYPES[self.dtype])
            if module.vocab_size < task.vocab_size:
                raise ConfigError(f"--init {self.init}: its vocabulary ({module.vocab_size}) is smaller than the task's "
                                  f"({task.vocab_size})")
            if module.n_positions < task.prompt_len + task.max_new:  # an embedding lookup past the table clamps silently
                raise ConfigError(f"--init {self.init}: its {module.n_positions} positions cannot hold a prompt and a "
                                  f"response ({task.prompt_len} + {task.max_new} tokens); use a shorter task")
            return FlaxLM(module), params
        return init_tiny_lm(task, key, self.d_model, self.n_layers, self.n_heads, DTYPES[self.dtype])


def task_config(config: TokenPPOConfig, task) -> TokenPPOConfig:
    """``config`` with the task's response budget, stop ids and pad id."""
    return config.replace(max_new_tokens=task.max_new, stop_ids=tuple(task.stop_ids), pad_id=task.pad_id)


class RLHFProgram:
    """The compiled ``init`` and ``n``-iteration chunks of token-level PPO over ``R`` seeds.

    ``sft_params``: the model every run starts from and is scored against (policy, critic and
    reference); on a resume the checkpoint replaces them, so a template of the right shapes
    will do (:meth:`template`). ``num_devices > 1`` splits each iteration's prompts over devices
    (:func:`purejaxppo.lm.data_parallel.data_parallel`)."""

    def __init__(self, config: TokenPPOConfig, settings: RLHFSettings, lm, sft_params, *, num_devices: int = 1):
        task = settings.make_task()
        self.task, self.lm, self.sft_params = task, lm, sft_params
        self.config, self.settings, self.num_devices = task_config(config, task), settings, num_devices
        self.split, self.shard = "prompts", 1
        self.headline = ("score", "score")  # the task's score of the sampled responses
        self.nan_hint = "Lower --actor-lr / --critic-lr, or --beta (and --kl-target) if the KL term blew up"
        reward = lambda _, *batch: task.score(*batch)  # noqa: E731  (a function: no reward-model params)
        # runs_axis: the seeds agree on one response width per iteration (length_buckets), so a
        # chunk runs one branch of the width switch, not all of them
        build = functools.partial(make_token_ppo, self.config, lm, reward, prompts=task.prompts,
                                  diagnostics=task.diagnostics, runs_axis=RUNS_AXIS)
        self.tp = data_parallel(build, num_devices)
        self._chunks, self._once = {}, CompileOnce()
        # the SFT model is an argument, not a constant folded into the program (a GPT-2's weights would be)
        self._init = jax.jit(jax.vmap(lambda k, p: self.tp.init(k, p, p), in_axes=(0, None)))

    def kind_for(self, members) -> str:
        return "rlhf"

    @staticmethod
    def template(settings: RLHFSettings):
        """``(lm, params)`` of the settings' model with zeros of the right shapes (no SFT run)."""
        lm, params = settings.model(jax.random.PRNGKey(0))
        return lm, jax.tree.map(jnp.zeros_like, params)

    def place(self, *inputs):
        return inputs

    def init(self, keys, configs=None):
        return self._init(keys, self.sft_params)

    def _chunk(self, n: int):
        if n not in self._chunks:
            def one(state):
                state, metrics = self.tp.run(state, n)
                return (state, metrics), tree_finite(state.train)
            self._chunks[n] = jax.jit(jax.vmap(one, axis_name=RUNS_AXIS))
        return self._chunks[n]

    def compile(self, n: int, state, configs=None) -> float:
        return self._once((n, signature(state)), lambda: self._chunk(n).lower(state).compile())

    def chunk(self, n: int, state, configs=None):
        return self._chunk(n)(state)

    def check_finite(self, metrics, finite, first_update, describe):
        # evaluation columns are NaN by design at the iterations without an evaluation
        trained = {k: v for k, v in metrics.items() if not k.startswith("eval_")}
        return first_non_finite(trained, finite, first_update, describe)

    def counters(self, first_update: int, n: int) -> dict:
        return {}  # an iteration's count (prompts) is the progress bar's, not a metric

    def training_state(self, state):
        return state

    def with_training_state(self, state, runner):
        return runner
