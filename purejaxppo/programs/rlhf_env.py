"""Token-level PPO runs on a multi-turn JAX text environment (``rlhf --env``): the settings'
environment as a task the program reads (:class:`EnvTask`, built once per process by
:func:`env_task`) and the iteration built with
:func:`~purejaxppo.lm.envs.episode_ppo.make_episode_ppo` instead of the single-turn one
(:func:`env_build`). The state is the single-turn ``TokenPPOState``, so the run folder, the
chunk loop, the checkpoints with exact resume and the export are the single-turn run's.

An environment is a built-in name (:data:`BUILTIN`) or ``FILE.py:FACTORY``, a function
``FACTORY(tokenizer, **options) -> JaxTextEnv`` (``tokenizer``: ``encode``, ``decode``,
``pad_id``, ``stop_ids``). A Python environment (the calculator, or a factory returning a
``PythonTextEnv``) is refused here: its episodes are sampled on the host, through the Python
API (``make_episode_ppo(...).learn`` with ``host_python_episode``, docs/multiturn.md).

The model: the settings' ``--model DIR`` (its tokenizer.json), or a built-in TinyLM over a
character-level tokenizer (:data:`ALPHABET`). Each episode's prompt is one token, the first stop
id (a document boundary); the environment's reset observation follows it. Each prompt draws a
row id in ``[0, 2**20)`` from the iteration's key, shared by its group (``--group-size``): the
guessing game's secret is ``lo + row % (hi - lo + 1)``; a user's environment with a table of
rows reads ``row % len(table)``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import setting
from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
from purejaxppo.lm.envs.episode_ppo import make_episode_ppo
from purejaxppo.lm.envs.guess_number import GuessNumber
from purejaxppo.lm.ppo.token_config import TokenPPOConfig

#: the built-in environments: JAX ones by name, Python ones (None) refused from the command line
BUILTIN = {"guess-number": GuessNumber, "calculator": None}
#: the built-in TinyLM's characters (every digit one token, as the guessing game reads them)
ALPHABET = "0123456789 abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,:;?!+-*/=()<>'\"\n"
#: row ids drawn per prompt: ``[0, ROWS)``
ROWS = 2**20
PYTHON_ENV = (
    "is a Python environment, whose episodes are sampled on the host: the command line runs JAX "
    "environments only; train it through the Python API (make_episode_ppo(...).learn with "
    "host_python_episode, docs/multiturn.md)"
)


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    """The environment fields of ``RLHFSettings`` (declared here, held there under the same names)."""

    env: Optional[str] = setting(
        None,
        "train on a multi-turn JAX environment instead of a task: a built-in (guess-number) or FILE.py:FACTORY, "
        "FACTORY(tokenizer, **options) -> a JaxTextEnv; with --model DIR or a built-in TinyLM (--d-model, "
        "--layers, --heads); --max-new-tokens is the episode's whole budget",
        metavar="NAME|FILE.py:FACTORY",
    )
    env_options: tuple = setting(
        (),
        "an option of the environment, e.g. hi=20 (guess-number: lo, hi, intro) or your factory's keyword",
        flag="--env-option",
        repeat=True,
        metavar="FIELD=VALUE",
    )
    max_turns: int = setting(4, "with --env: the model's turns per episode (guess-number: its guesses)", lo=1)
    turn_tokens: int = setting(4, "with --env: the tokens of one turn's action", lo=1)

    @classmethod
    def declared(cls, name: str) -> dataclasses.Field:
        """A fresh field of the declaration of ``name``, for ``RLHFSettings`` to hold."""
        f = cls.__dataclass_fields__[name]
        return dataclasses.field(default=f.default, metadata=f.metadata)


#: the fields, in the order of their flags
ENV_FIELDS = tuple(f.name for f in dataclasses.fields(EnvSettings))


@dataclasses.dataclass(frozen=True, eq=False)
class EnvTask:
    """What the program and the model read of an environment run, in a task's names.

    Attributes:
      env: the :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv`; tokenizer: its tokenizer.
      vocab_size, prompt_len (1), max_new (the episode's budget ``T``), stop_ids, pad_id.
      max_turns, turn_tokens: as :class:`~purejaxppo.lm.envs.episode.EpisodeConfig`.
    """

    env: Any
    tokenizer: Any
    vocab_size: int
    max_new: int
    stop_ids: tuple
    pad_id: int
    max_turns: int
    turn_tokens: int
    prompt_len: int = 1
    diagnostics: Optional[Callable] = None

    def prompts(self, key, n: int):
        """``(prompt [n, 1], prompt_valid [n, 1], row [n])``: the first stop id, a drawn row id."""
        prompt = jnp.full((n, 1), self.stop_ids[0], jnp.int32)
        return prompt, jnp.ones((n, 1), bool), jax.random.randint(key, (n,), 0, ROWS, jnp.int32)


def whole_game(obs_width: int, max_turns: int, turn_tokens: int) -> int:
    """The budget of every turn with its observation after the reset observation: ``O + turns * (A + O)``."""
    return obs_width + max_turns * (turn_tokens + obs_width)


@functools.lru_cache(maxsize=4)
def env_task(settings) -> EnvTask:
    """The :class:`EnvTask` of ``settings`` (an ``RLHFSettings`` with ``env`` set), built once per
    process. ``max_new_tokens`` 0: :func:`whole_game`'s budget.

    Raises:
      ConfigError: an unknown name, a factory that cannot be loaded or fails, a Python
        environment, an option the environment does not take, a tokenizer whose digits are not
        single tokens (the guessing game), or a budget that cannot hold one turn.
    """
    if settings.model_dir:
        from purejaxppo.lm.checkpoints.pretrained import read_config
        from purejaxppo.lm.checkpoints.tokenizer import load_tokenizer

        vocab = int(read_config(settings.model_dir)["vocab_size"])
        tokenizer = load_tokenizer(settings.model_dir, vocab)
    else:
        tokenizer = CharTokenizer(ALPHABET)
        vocab = tokenizer.vocab_size
    env = make_env(settings.env, tokenizer, dict(settings.env_options), settings.max_turns)
    budget = settings.max_new_tokens or whole_game(env.obs_width, settings.max_turns, settings.turn_tokens)
    task = EnvTask(
        env,
        tokenizer,
        vocab,
        budget,
        tuple(tokenizer.stop_ids),
        int(tokenizer.pad_id),
        settings.max_turns,
        settings.turn_tokens,
    )
    from purejaxppo.lm.envs.episode import EpisodeConfig

    try:
        EpisodeConfig(task.max_turns, task.turn_tokens, budget, task.stop_ids, task.pad_id).check(env.obs_width)
    except ConfigError as e:
        raise ConfigError(f"--env {settings.env}: --max-new-tokens {budget}: {e}") from None
    return task


def make_env(spec: str, tokenizer, options: dict, max_turns: int):
    """The JAX environment ``spec`` names, built with ``tokenizer`` and ``options``
    (:class:`ConfigError` naming ``--env`` or ``--env-option`` and the fix)."""
    if spec in BUILTIN:
        if BUILTIN[spec] is None:
            raise ConfigError(f"--env {spec} {PYTHON_ENV}")
        merged = merged_digits(tokenizer)
        if merged is not None:
            raise ConfigError(
                f"--env {spec} reads one digit per token, and the tokenizer holds {merged[1]!r} (id {merged[0]}), "
                "several digits in one token; use a model whose tokenizer splits digits (Qwen2.5, Llama 2) or "
                "the built-in TinyLM (no --model)"
            )
        try:
            env = GuessNumber.from_tokenizer(tokenizer, max_turns=max_turns, **options)
        except TypeError as e:
            raise ConfigError(f"--env-option: {e}; {spec} takes lo, hi and intro") from None
        except ValueError as e:  # a digit of several tokens, lo > hi, a character the tokenizer lacks
            raise ConfigError(f"--env {spec}: {e}") from None
    else:
        factory = _load_factory(spec)
        try:
            env = factory(tokenizer, **options)
        except Exception as e:  # the user's code: its failure named, not a deep trace
            raise ConfigError(f"--env {spec}: the factory failed: {type(e).__name__}: {e}") from None
    if not hasattr(env, "obs_width"):
        if callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None)):
            raise ConfigError(f"--env {spec}: the factory's environment (no obs_width) {PYTHON_ENV}")
        raise ConfigError(f"--env {spec}: the factory returned {type(env).__name__}, not a JaxTextEnv")
    return env


def merged_digits(tokenizer) -> Optional[tuple]:
    """``(id, text)`` of the first token of ``tokenizer`` whose text holds two digits in a row,
    or None: a tokenizer that splits digits."""
    for i in range(int(tokenizer.vocab_size)):
        text = tokenizer.decode([i])
        if re.search(r"\d\d", text):
            return i, text
    return None


def _load_factory(spec: str) -> Callable:
    where, sep, name = spec.rpartition(":")
    if not sep or not where.endswith(".py") or not name:
        raise ConfigError(
            f"--env {spec!r}: give a built-in ({', '.join(BUILTIN)}) or FILE.py:FACTORY (e.g. my_env.py:make_env)"
        )
    if not os.path.isfile(where):
        raise ConfigError(f"--env {spec}: {where} does not exist (give FILE.py:FACTORY with a path to a Python file)")
    loader = importlib.util.spec_from_file_location(f"_purejaxppo_env_{abs(hash(os.path.abspath(where)))}", where)
    module = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"--env {spec}: {where} failed to import: {type(e).__name__}: {e}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(f"--env {spec}: {where} has no function {name!r}")
    return factory


class EnvPPO(NamedTuple):
    """The part of :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPO` the program drives."""

    init: Callable  # (key, policy, reference, critic=None, reward=None) -> state
    run: Callable  # (state, n) -> (state, metrics [n])


def env_build(config: TokenPPOConfig, lm, task: EnvTask, critic=None) -> Callable[..., EnvPPO]:
    """``build(axis_name=, num_devices=) -> EnvPPO``: the episode iteration of ``task`` (one device)."""

    def build(axis_name=None, num_devices: int = 1) -> EnvPPO:
        if num_devices != 1:
            raise ConfigError("--env runs on one device; drop --devices")
        ep = make_episode_ppo(
            config,
            lm,
            task.env,
            max_turns=task.max_turns,
            turn_tokens=task.turn_tokens,
            prompts=task.prompts,
            critic=critic,
        )

        def init(key, policy, reference, critic_params=None, reward_params=None):
            return ep.init(key, policy, reference, critic_params)

        def run(state, n: int, cfg=None):
            return jax.lax.scan(lambda s, _: ep.iteration(s), state, None, length=n)

        return EnvPPO(init, run)

    return build
