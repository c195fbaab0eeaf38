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
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import setting
from purejaxppo.lm.checkpoints.gpt2_hf import load_gpt2
from purejaxppo.lm.checkpoints.pretrained import load_pretrained
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.data_parallel import data_parallel
from purejaxppo.lm.sft.sft_training import init_tiny_lm
from purejaxppo.lm.tasks.builtin_tasks import TASKS, make_task
from purejaxppo.lm.rewards.python_reward import TextReward
from purejaxppo.lm.tasks.text_task import BoundReward
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
from purejaxppo.programs.rlhf_eval import PassAtKSettings
from purejaxppo.run import processes
from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.guards import tree_finite

RUNS_AXIS = "runs"
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class RLHFSettings:
    """The setup around the PPO config. ``task`` (a :data:`purejaxppo.lm.tasks.builtin_tasks.TASKS` name) with
    ``task_options`` (its dataclass fields); the model: a TinyLM of ``d_model``/``n_layers``/
    ``n_heads``, or ``init`` (a local GPT-2 folder in Hugging Face's layout, then the SFT
    stage starts from it); ``dtype`` the compute dtype; the SFT stage: ``sft_steps`` of
    ``sft_batch`` demonstrations at ``sft_lr`` (0 steps: PPO starts from the model as given);
    ``eval_every`` iterations, greedy decoding of ``eval_batch`` fixed prompts.

    The user's own data instead of a task (``model_dir`` set, ``task`` then ``"text"``): a local
    model folder (any :func:`~purejaxppo.lm.checkpoints.pretrained.load_pretrained` family, with its
    tokenizer.json), ``prompts`` / ``eval_prompts`` / ``sft_data`` files
    (:mod:`purejaxppo.lm.data.prompts`), ``reward`` (``FILE.py:FUNCTION`` or ``module:FUNCTION``,
    :mod:`purejaxppo.lm.rewards.python_reward`) or ``reward_model`` (a folder), ``chat_template`` (render
    plain prompts as a user message), ``max_new_tokens`` (the response budget),
    ``max_prompt_tokens`` (0: what the model's positions leave), ``truncate_prompts``.
    ``hashes``: ``((name, sha256), ...)`` of the model's weights and tokenizer and of the data
    files, recorded when the run starts and checked on a resume."""

    # Each field declares its default, what it does and its range: the rlhf command's flags
    # (help, choices, parse-time checks) are generated from these declarations.
    task: str = setting(
        "reverse",
        "the built-in task: reverse = write a digit string backwards (exact match); grammar = a tiny "
        "grammar's sentences (not with --model, whose task is your data)",
        choices=tuple(sorted(TASKS)),
    )
    task_options: tuple = setting(
        (),
        "a field of the built-in task, e.g. max_len=6 or partial_credit=true",
        flag="--task-option",
        repeat=True,
        metavar="FIELD=VALUE",
    )  # ((field, value), ...): hashable
    d_model: int = setting(32, "the built-in task's TinyLM width (a multiple of --heads)", lo=1)
    n_layers: int = setting(2, "the built-in task's TinyLM layers", lo=1, flag="--layers")
    n_heads: int = setting(2, "the built-in task's TinyLM attention heads", lo=1, flag="--heads")
    dtype: str = setting("float32", "the compute dtype (parameters stay float32)", choices=tuple(DTYPES), cli=False)
    init: Optional[str] = setting(
        None,
        "start a built-in task from a local GPT-2 folder (config.json + model.safetensors) instead of a TinyLM",
        metavar="DIR",
    )
    sft_steps: int = setting(100, "supervised (SFT) steps before PPO", lo=0)
    sft_batch: int = setting(64, "demonstrations per SFT step", lo=1)
    sft_lr: float = setting(3e-3, "the SFT stage's Adam learning rate", lo=0, lo_open=True)
    eval_every: int = setting(
        10, "greedy evaluation of fixed prompts every N iterations, into metrics.csv and samples.txt (0 = off)", lo=0
    )
    eval_batch: int = setting(256, "prompts of each greedy evaluation", lo=1, cli=False)
    pass_samples: int = PassAtKSettings.declared("pass_samples")
    pass_k: tuple = PassAtKSettings.declared("pass_k")
    pass_prompts: int = PassAtKSettings.declared("pass_prompts")
    pass_temperature: float = PassAtKSettings.declared("pass_temperature")
    pass_threshold: float = PassAtKSettings.declared("pass_threshold")
    model_dir: Optional[str] = setting(
        None,
        "a local Hugging Face model folder (config.json, *.safetensors, tokenizer.json): the initial policy "
        "and the frozen reference",
        flag="--model",
        metavar="DIR",
    )
    prompts: Optional[str] = setting(
        None, 'training prompts: .jsonl ({"prompt": ...} or {"messages": [...]}) or .txt (one per line)', metavar="FILE"
    )
    eval_prompts: Optional[str] = setting(
        None, "the greedy evaluation's prompts (default: the first of --prompts)", metavar="FILE"
    )
    sft_data: Optional[str] = setting(
        None, '.jsonl of {"prompt" or "messages", "response"}: a supervised stage before PPO', metavar="FILE"
    )
    reward: Optional[str] = setting(
        None, "FILE.py:FUNCTION or module:FUNCTION, fn(prompts, responses) -> a list of floats", metavar="SPEC"
    )
    reward_model: Optional[str] = setting(
        None, "a local *ForSequenceClassification folder scoring prompt + response", metavar="DIR"
    )
    chat_template: bool = setting(
        False,
        "render plain prompts as a user message through the model's chat template (messages always are)",
        switch=True,
    )
    max_new_tokens: int = setting(16, "the response budget in tokens", lo=1)
    max_prompt_tokens: int = setting(
        0, "the prompt budget in tokens (0: the model's positions minus --max-new-tokens)", lo=0
    )
    truncate_prompts: bool = setting(
        False, "cut prompts over the budget from the left (counted) instead of refusing them", switch=True
    )
    hashes: tuple = setting((), "sha256 of the model's files and the data files, checked on a resume", cli=False)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["task_options"], d["hashes"] = dict(self.task_options), dict(self.hashes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RLHFSettings":
        d = dict(d)
        d["task_options"] = tuple(sorted((d.get("task_options") or {}).items()))
        d["hashes"] = tuple(sorted((d.get("hashes") or {}).items()))
        d["pass_k"] = tuple(d.get("pass_k") or ())  # config.json gives a list back
        return cls(**d)

    def make_task(self):
        """The task of these settings, built once per process: every stage (the command's checks,
        SFT, the program) shares the one object (a text task's reward keeps its failure there)."""
        if self.model_dir:
            return _text_task(self._data_only())[0]
        return _builtin_task(self.task, **dict(self.task_options))

    def text_data(self):
        """What the text task read (:class:`~purejaxppo.lm.tasks.text_task.TextData`: prompts cut, hashes)."""
        return _text_task(self._data_only())[1]

    def _data_only(self) -> "RLHFSettings":
        """These settings with the fields a text task does not read at their defaults: the key
        under which the task is read once (the hashes, the SFT stage, the evaluation's schedule)."""
        unread = ("hashes", "eval_batch", "eval_every", "sft_steps", "sft_batch", "sft_lr", *_PASS_FIELDS)
        return dataclasses.replace(self, **{name: getattr(RLHFSettings, name) for name in unread})

    def model(self, key):
        """``(lm, params)``: the TinyLM of these sizes (initialised from ``key``), the GPT-2 in
        ``init``, or the checkpoint in ``model_dir``."""
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r} must be one of {sorted(DTYPES)}")
        task = self.make_task()
        if self.model_dir:
            return _load_model(self.model_dir, DTYPES[self.dtype])
        if self.init:
            from purejaxppo.lm.models.adapters import FlaxLM

            module, params = _load_gpt2(self.init, dtype=DTYPES[self.dtype])
            if module.vocab_size < task.vocab_size:
                raise ConfigError(
                    f"--init {self.init}: its vocabulary ({module.vocab_size}) is smaller than the "
                    f"task's ({task.vocab_size})"
                )
            # an embedding lookup past the table clamps silently
            if module.n_positions < task.prompt_len + task.max_new:
                raise ConfigError(
                    f"--init {self.init}: its {module.n_positions} positions cannot hold a prompt and a "
                    f"response ({task.prompt_len} + {task.max_new} tokens); use a shorter task"
                )
            return FlaxLM(module), params
        return init_tiny_lm(task, key, self.d_model, self.n_layers, self.n_heads, DTYPES[self.dtype])


_PASS_FIELDS = tuple(f.name for f in dataclasses.fields(PassAtKSettings))

# Each read once per process (the session checks it, the SFT stage then uses it): the library's
# loaders themselves, cached.
_builtin_task = functools.lru_cache(maxsize=8)(make_task)
_load_model = functools.lru_cache(maxsize=4)(load_pretrained)
_load_gpt2 = functools.lru_cache(maxsize=4)(load_gpt2)


@functools.lru_cache(maxsize=4)
def _text_task(settings: RLHFSettings):
    """``(TextTask, TextData)`` of the settings' files, read once per process."""
    from purejaxppo.lm.tasks.text_task import make_text_task

    def reward_for(tokenizer):
        if settings.reward_model:
            from purejaxppo.lm.tasks.text_task import load_bound_reward_model

            return load_bound_reward_model(settings.reward_model, settings.model_dir, DTYPES[settings.dtype])
        from purejaxppo.lm.rewards.python_reward import TextReward, load_reward_function

        return TextReward(load_reward_function(settings.reward), settings.reward, tokenizer)

    return make_text_task(
        settings.model_dir,
        settings.prompts,
        reward_for,
        max_new=settings.max_new_tokens,
        eval_prompts=settings.eval_prompts,
        sft_data=settings.sft_data,
        max_prompt_tokens=settings.max_prompt_tokens,
        truncate=settings.truncate_prompts,
        chat=settings.chat_template,
    )


def task_config(config: TokenPPOConfig, task) -> TokenPPOConfig:
    """``config`` with the task's response budget, stop ids and pad id."""
    return config.replace(max_new_tokens=task.max_new, stop_ids=tuple(task.stop_ids), pad_id=task.pad_id)


def on_every_process(tree, num_devices: int):
    """A tree every process computed alike (the same keys through the same program) as global
    arrays replicated over the run's mesh, the layout the chunks take across processes."""
    from jax.sharding import NamedSharding, PartitionSpec

    from purejaxppo.lm.ppo.data_parallel import prompt_mesh

    sharding = NamedSharding(prompt_mesh(num_devices), PartitionSpec())

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(one, tree)


class RLHFProgram(ChunkedProgram):
    """The compiled ``init`` and ``n``-iteration chunks of token-level PPO over ``R`` seeds.

    ``sft_params``: the model every run starts from and is scored against (policy, critic and
    reference); on a resume the checkpoint replaces them, so a template of the right shapes
    will do (:meth:`template`). ``num_devices > 1`` splits each iteration's prompts over devices
    (:func:`purejaxppo.lm.ppo.data_parallel.data_parallel`)."""

    nan_by_design = ("eval_",)  # evaluation columns: NaN at the iterations without an evaluation

    def __init__(self, config: TokenPPOConfig, settings: RLHFSettings, lm, sft_params, *, num_devices: int = 1):
        task = settings.make_task()
        self.task, self.lm, self.sft_params = task, lm, sft_params
        self.config, self.settings, self.num_devices = task_config(config, task), settings, num_devices
        self.split, self.shard = "prompts", 1
        self.headline = ("score", "score")  # the task's score of the sampled responses
        self.nan_hint = "Lower --actor-lr / --critic-lr, or --beta (and --kl-target) if the KL term blew up"
        bound = getattr(task, "reward", None)
        critic, self.critic_params = None, None
        if isinstance(bound, BoundReward):  # a reward model: its params ride in the state, not in the program
            reward, self.reward_params = bound.fn, bound.params
            if self.config.critic == "separate" and bound.lm is not None:
                # the critic starts from the reward model (InstructGPT's choice): its score head is the value head
                critic, self.critic_params = bound.lm, bound.params
        else:
            reward = lambda _, *batch: task.score(*batch)  # noqa: E731  (a function: no reward-model params)
            self.reward_params = None
        # a text reward runs on the host (jax.pure_callback): its time is its own phase, reward_fn_s
        self.text_reward = bound if isinstance(bound, TextReward) else None
        # runs_axis: the seeds agree on one response width per iteration (length_buckets), so a
        # chunk runs one branch of the width switch, not all of them
        build = functools.partial(
            make_token_ppo,
            self.config,
            lm,
            reward,
            prompts=task.prompts,
            critic=critic,
            diagnostics=task.diagnostics,
            runs_axis=RUNS_AXIS,
        )
        self.tp = data_parallel(build, num_devices)
        super().__init__()
        # the SFT model is an argument, not a constant folded into the program (a GPT-2's weights would be)
        self._init = jax.jit(jax.vmap(lambda k, p, c, r: self.tp.init(k, p, p, c, r), in_axes=(0, None, None, None)))

    def kind_for(self, members) -> str:
        return "rlhf"

    @staticmethod
    def template(settings: RLHFSettings):
        """``(lm, params)`` of the settings' model with zeros of the right shapes (no SFT run)."""
        lm, params = settings.model(jax.random.PRNGKey(0))
        return lm, jax.tree.map(jnp.zeros_like, params)

    def init(self, keys, configs=None):
        state = self._init(keys, self.sft_params, self.critic_params, self.reward_params)
        return on_every_process(state, self.num_devices) if processes.current().many else state

    def build_chunk(self, n: int):
        def one(state):
            state, metrics = self.tp.run(state, n)
            return (state, metrics), tree_finite(state.train)

        return jax.jit(jax.vmap(one, axis_name=RUNS_AXIS))

    def chunk(self, n: int, state, configs=None):
        if self.text_reward is None:
            return super().chunk(n, state, configs)
        before = self.text_reward.seconds
        # waits for the chunk (its host calls done) before the loop dispatches the next: the time is
        # this chunk's, and the overlap lost is small next to the reward's own host time
        (state, metrics), finite = jax.block_until_ready(super().chunk(n, state, configs))
        runs = jax.tree.leaves(metrics)[0].shape[0]
        # the chunk's host time spread evenly over its iterations (one call per iteration, every seed at once)
        metrics = {**metrics, "reward_fn_s": np.full((runs, n), (self.text_reward.seconds - before) / n, np.float32)}
        return (state, metrics), finite

    def check_finite(self, metrics, finite, first_update, describe):
        problem = super().check_finite(metrics, finite, first_update, describe)
        # a failed text reward gives NaN scores from its iteration on: name it at the chunk that holds
        # them (the loop may already have run the next chunk, whose failure must not stop this one)
        if problem is not None and self.text_reward is not None and self.text_reward.error:
            self.nan_hint = "Fix the function, then continue the run with python -m purejaxppo rlhf --resume RUN_DIR"
            return self.text_reward.error
        return problem
