"""The setup of a token-level PPO run (``"rlhf"``), what ``config.json`` records besides the
:class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`: :class:`RLHFSettings` (the task or the
user's model, data and rewards, the SFT stage, the evaluation), and what it reads, each once per
process: the task (:meth:`RLHFSettings.make_task`), the model (:meth:`RLHFSettings.model`) and
the rewards (:func:`text_reward`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import setting
from purejaxppo.lm.checkpoints.gpt2_hf import load_gpt2
from purejaxppo.lm.checkpoints.pretrained import load_pretrained
from purejaxppo.lm.ppo.recipes import RECIPES
from purejaxppo.lm.rewards.python_reward import RewardSpecError, TextReward
from purejaxppo.lm.sft.sft_training import init_tiny_lm
from purejaxppo.lm.tasks.builtin_tasks import TASKS, make_task
from purejaxppo.programs.rlhf_env import EnvSettings, env_task
from purejaxppo.programs.rlhf_eval import PassAtKSettings

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
    recipe: Optional[str] = setting(
        None,
        "a loss recipe in one word: the advantage, clip range, ratio, aggregation, KL and length shaping of "
        "ppo, grpo, dapo, dr-grpo, gspo, reinforce++ or rloo (lm.RECIPES); a flag of any of those still overrides",
        choices=tuple(RECIPES),
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
    reward: tuple = setting(
        (),
        "a reward; repeat for several (summed with --reward-weights): a built-in (math, reasoning-gym, format, "
        "length) or FILE.py:FUNCTION / module:FUNCTION, called fn(prompts, completions, **columns) -> a list of "
        "floats (None: not applicable); a function that names a column of the rows (or takes **kwargs) gets it",
        repeat=True,
        metavar="NAME|SPEC",
    )
    reward_weights: tuple = setting(
        (),
        "the rewards' weights, in the order given, a --reward-model's last (default: 1 each); the score is their "
        "weighted sum",
        metavar="W,W",
    )
    reward_options: tuple = setting(
        (),
        "a built-in reward's option, e.g. length.limit=48, math.timeout=2 or format.template='<answer>...</answer>'",
        flag="--reward-option",
        repeat=True,
        metavar="NAME.KEY=VALUE",
    )  # ((name.key, value), ...): hashable
    columns: Optional[str] = setting(
        None,
        "the column map, e.g. prompt=problem,answer=solution (default: prompt, messages or question)",
        metavar="NAME=COLUMN,...",
    )
    data_options: tuple = setting(
        (),
        "a data source's option: size=N and seed=S (reasoning-gym:NAME; default 1000 rows, seed 0), split=NAME (a "
        "saved DatasetDict), or a reasoning-gym generator's own field (max_terms=3)",
        flag="--data-option",
        repeat=True,
        metavar="KEY=VALUE",
    )
    held_out: float = setting(
        0.0,
        "hold out this share (< 1) or count (>= 1) of --prompts' rows as the evaluation prompts (not trained on)",
        lo=0,
    )
    reward_model: Optional[str] = setting(
        None,
        "a local *ForSequenceClassification folder scoring prompt + response (alone, or added to the --reward "
        "functions with the last of --reward-weights)",
        metavar="DIR",
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
    env: Optional[str] = EnvSettings.declared("env")  # a multi-turn environment (purejaxppo.programs.rlhf_env)
    env_options: tuple = EnvSettings.declared("env_options")  # ((field, value), ...): hashable
    max_turns: int = EnvSettings.declared("max_turns")
    turn_tokens: int = EnvSettings.declared("turn_tokens")
    hashes: tuple = setting((), "sha256 of the model's files and the data files, checked on a resume", cli=False)

    def __post_init__(self):
        # Python callers write one reward as a string (as before several were allowed) and lists
        # where the flags give tuples; the settings are hashed (the task is cached on them).
        if isinstance(self.reward, str):
            object.__setattr__(self, "reward", (self.reward,))
        for name in ("reward", "reward_weights", "pass_k"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["task_options"], d["hashes"] = dict(self.task_options), dict(self.hashes)
        for name in ("reward_options", "data_options", "env_options"):
            d[name] = dict(getattr(self, name))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RLHFSettings":
        d = dict(d)
        d["task_options"] = tuple(sorted((d.get("task_options") or {}).items()))
        d["hashes"] = tuple(sorted((d.get("hashes") or {}).items()))
        d["pass_k"] = tuple(d.get("pass_k") or ())  # config.json gives a list back
        for name in ("reward_options", "data_options", "env_options"):
            d[name] = tuple(sorted((d.get(name) or {}).items()))
        reward, weights = d.get("reward"), d.get("reward_weights") or ()
        d["reward"] = (reward,) if isinstance(reward, str) else tuple(reward or ())  # one spec before several
        d["reward_weights"] = tuple(weights)
        return cls(**d)

    def make_task(self):
        """The task of these settings, built once per process: every stage (the command's checks,
        SFT, the program) shares the one object (a text task's reward keeps its failure there)."""
        if self.env or self.model_dir:
            return env_task(self) if self.env else _text_task(self._data_only())[0]
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
    from purejaxppo.lm.data.row_sources import parse_column_map
    from purejaxppo.lm.tasks.text_task import make_text_task

    def reward_for(tokenizer):
        model = None
        if settings.reward_model:
            from purejaxppo.lm.tasks.text_task import load_bound_reward_model

            model = load_bound_reward_model(settings.reward_model, settings.model_dir, DTYPES[settings.dtype])
            if not settings.reward:
                if settings.reward_weights:  # a weight would only rescale the one reward: refused, not ignored
                    raise RewardSpecError(
                        "--reward-weights weighs several rewards; --reward-model alone is one: drop the weights"
                    )
                return model
        text = TextReward(text_reward(settings), " + ".join(settings.reward), tokenizer)
        if model is None:
            return text
        from purejaxppo.lm.tasks.mixed_reward import MixedReward

        return MixedReward(text, model, reward_model_weight(settings))

    options = dict(settings.data_options)
    source = {k: options.pop(k) for k in ("size", "seed", "split") if k in options}
    if options:  # the rest: the generator's own fields
        source["config"] = options
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
        columns=parse_column_map(settings.columns) if settings.columns else None,
        source_options=source or None,
        held_out=settings.held_out,
        split_seed=int(source.get("seed", 0)),
    )


def reward_model_weight(settings: RLHFSettings) -> float:
    """The ``--reward-model``'s weight beside Python rewards: the last of ``--reward-weights``
    (default 1)."""
    return float(settings.reward_weights[-1]) if settings.reward_weights else 1.0


def text_reward(settings: RLHFSettings):
    """The settings' rewards as one function ``fn(prompts, completions, **columns)``: a built-in
    by name (:func:`purejaxppo.lm.rewards.get`, with its ``--reward-option`` s) or a user's
    function (:func:`~purejaxppo.lm.rewards.python_reward.load_reward_function`); several, or
    one with a weight, or any beside a ``reward_model`` (whose weight is the last of
    ``reward_weights``, :func:`reward_model_weight`), summed by
    :func:`purejaxppo.lm.rewards.combine` (each logged on its own). A bad spec, weight count or
    option is a :class:`RewardSpecError`."""
    from purejaxppo.lm import rewards
    from purejaxppo.lm.rewards.python_reward import load_reward_function

    options: dict = {}
    for key, value in settings.reward_options:
        name, _, field = key.partition(".")
        if name not in settings.reward or name not in rewards.BUILTIN or not field:
            raise RewardSpecError(
                f"--reward-option {key}={value}: name a built-in reward given with --reward, as NAME.KEY=VALUE "
                f"(built-ins: {', '.join(rewards.BUILTIN)})"
            )
        options.setdefault(name, {})[field] = value
    fns = []
    for spec in settings.reward:
        try:
            fns.append(
                rewards.get(spec, **options.get(spec, {})) if spec in rewards.BUILTIN else load_reward_function(spec)
            )
        except TypeError as e:  # an option the reward does not take
            raise RewardSpecError(f"--reward-option {spec}: {e}") from None
        except RewardSpecError as e:
            raise RewardSpecError(f"--reward {spec}: {e}") from None
    weights = settings.reward_weights
    if weights and len(weights) != len(fns) + bool(settings.reward_model):
        each = "one per --reward, in the order given" + (", then the --reward-model's" if settings.reward_model else "")
        raise RewardSpecError(
            f"--reward-weights {','.join(map(str, weights))}: {len(weights)} weights for "
            f"{len(fns) + bool(settings.reward_model)} rewards; give {each}"
        )
    weights = weights[: len(fns)]
    if len(fns) == 1 and not weights and not settings.reward_model:  # beside a reward model: its own column
        return fns[0]
    labels = [spec if spec in rewards.BUILTIN else spec.rpartition(":")[2] for spec in settings.reward]
    if settings.reward_model and "model" in labels:  # its column is the reward model's
        raise RewardSpecError(
            "--reward ...:model beside --reward-model: rename the function (reward_model_mean is the model's)"
        )
    return rewards.combine([(fn, w, label) for fn, w, label in zip(fns, weights or (1.0,) * len(fns), labels)])
