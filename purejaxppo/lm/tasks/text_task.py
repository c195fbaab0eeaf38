"""The user's own data as a task: a model folder's tokenizer, a prompt file, a text reward (or a
reward model), optional SFT pairs. :class:`TextTask` meets :class:`purejaxppo.lm.tasks.task_protocol.Task`, so
SFT, the evaluation and token-level PPO take it as they take the built-in tasks.

``make_text_task`` reads every file and checks every size BEFORE any compiled work: the
prompts and responses against the model's position table, the ids against its vocabulary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.data import prompts as pd
from purejaxppo.lm.data import row_sources as rs
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError, read_config
from purejaxppo.lm.checkpoints.tokenizer import load_tokenizer, strip_special

POSITION_KEYS = ("n_positions", "max_position_embeddings")  # GPT-2's, then the Llama family's


def model_shape(folder: str) -> tuple:
    """``(vocab_size, positions)`` of a model folder's config.json (positions: None when it
    names none)."""
    cfg = read_config(folder)
    vocab = cfg.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        raise CheckpointFolderError(f"{folder}/config.json has no vocab_size")
    positions = next((cfg[k] for k in POSITION_KEYS if isinstance(cfg.get(k), int)), None)
    return vocab, positions


def file_hash(*paths: str) -> str:
    """sha256 over the named files' bytes (each preceded by its base name), in the order given."""
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def folder_hashes(folder: str) -> dict:
    """``{"weights": ..., "tokenizer": ...}``: sha256 of the folder's ``*.safetensors`` (sorted by
    name) and of its tokenizer files (tokenizer.json, tokenizer_config.json, generation_config.json,
    chat_template.jinja, those present)."""
    names = sorted(os.listdir(folder))
    weights = [os.path.join(folder, n) for n in names if n.endswith(".safetensors")]
    tok = [
        os.path.join(folder, n)
        for n in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja")
        if n in names
    ]
    return {"weights": file_hash(*weights), "tokenizer": file_hash(*tok)}


class BoundReward:
    """A reward model as a task's score: ``fn(params, prompt, prompt_valid, response, mask) -> [B]``
    with its ``params`` and its model ``lm`` (a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` whose value
    head is the score head: the critic's starting point). Token-level PPO passes ``params`` through
    its state (``reward_params``); the evaluations call it bound (the params then constants of
    their program)."""

    def __init__(self, fn: Callable, params, lm=None):
        self.fn, self.params, self.lm = fn, params, lm

    def __call__(self, prompt, prompt_valid, response, response_mask):
        return self.fn(self.params, prompt, prompt_valid, response, response_mask)


class TextTask:
    """The user's own data as a :class:`~purejaxppo.lm.tasks.task_protocol.Task`: prompts drawn
    from a table, responses of up to ``max_new`` tokens scored by ``reward``. Hashable by
    identity (a static argument under ``jit``). Made by :func:`make_text_task`.

    Args:
      tokenizer: the model folder's :class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer`
        (its ``pad_id`` and ``stop_ids`` become the task's).
      table: the training prompts, a :class:`~purejaxppo.lm.data.prompts.PromptTable`.
      eval_table: the fixed evaluation prompts (:meth:`evaluation_prompts`).
      max_new: ``T``, the response budget.
      vocab_size: the model's vocabulary ``V``.
      reward: ``reward(prompt, prompt_valid, response, mask[, rows]) -> [B]`` float32,
        jittable: a :class:`~purejaxppo.lm.rewards.python_reward.TextReward` (given the
        task's :attr:`rows` here: :meth:`~purejaxppo.lm.rewards.python_reward.TextReward.bind_rows`)
        or a bound reward model.
      sft: ``(PromptTable, response [N, T] int32, mask [N, T] bool)`` of SFT pairs, or None.

    Attributes:
      name: ``"text"``.
      prompt_len: ``P``, the widest of the tables.
      pad_id, stop_ids: the tokenizer's.
      prompts: ``prompts(key, batch) -> (prompt [B, P], prompt_valid [B, P])`` over ``table``.
      row_prompts: the same draws with their row ids, ``-> (prompt, prompt_valid, row [B]
        int32)``: the prompt source that lets each response be scored with its row's columns.
      rows: every row's columns, ``table``'s (ids ``0..N-1``) then ``eval_table``'s when it is
        another table (ids from :attr:`eval_offset`).
      eval_offset: the row id of ``eval_table``'s first row.
      tokenizer, table, eval_table, max_new, vocab_size, reward, sft: as given.
    """

    name = "text"

    def __init__(
        self,
        tokenizer,
        table: pd.PromptTable,
        eval_table: pd.PromptTable,
        max_new: int,
        vocab_size: int,
        reward: Optional[Callable],
        sft: Optional[tuple] = None,
    ):
        self.tokenizer, self.table, self.eval_table, self.sft = tokenizer, table, eval_table, sft
        self.vocab_size, self.max_new, self.reward = vocab_size, max_new, reward
        self.pad_id, self.stop_ids = tokenizer.pad_id, tuple(tokenizer.stop_ids)
        self.prompt_len = max(table.prompt_len, eval_table.prompt_len, sft[0].prompt_len if sft else 0)
        self.prompts = pd.table_prompts(table)
        self.row_prompts = pd.table_prompts(table, rows=True)
        self.eval_offset = 0 if eval_table is table else len(table.texts)
        self.rows = tuple(table.columns) + (() if eval_table is table else tuple(eval_table.columns))
        if hasattr(reward, "bind_rows"):
            reward.bind_rows(self.rows)

    def evaluation_prompts(self, batch: int):
        return pd.first_rows(self.eval_table, batch)

    def evaluation_rows(self, batch: int):
        """The row ids of :meth:`evaluation_prompts`' ``batch`` prompts, ``[batch]`` int32 (pass
        them to :meth:`score` so an evaluation's rewards read the rows' columns)."""
        return jnp.asarray(np.arange(batch) % len(self.eval_table.texts) + self.eval_offset, jnp.int32)

    def demonstrations(self, key, batch: int):
        if self.sft is None:
            raise ValueError("no SFT data was given (--sft-data FILE)")
        table, response, mask = self.sft
        rows = jax.random.randint(key, (batch,), 0, table.tokens.shape[0])
        return (
            jnp.asarray(table.tokens)[rows],
            jnp.asarray(table.valid)[rows],
            jnp.asarray(response)[rows],
            jnp.asarray(mask)[rows],
        )

    def score(self, prompt, prompt_valid, response, response_mask, rows=None):
        """The reward's scores ``[..., B]``; ``rows``: the responses' row ids (a reward that
        takes them reads their columns; None: none)."""
        if rows is not None and hasattr(self.reward, "bind_rows"):
            return self.reward(prompt, prompt_valid, response, response_mask, rows=rows)
        return self.reward(prompt, prompt_valid, response, response_mask)

    def reward_fn(self, reward_params, prompt, prompt_valid, response, response_mask, rows=None):
        """The task's score as token-level PPO's reward function
        (:class:`~purejaxppo.lm.ppo.experience.Models`'s ``reward``) for a reward with no
        parameters (``reward_params`` unused), taking the row ids the iteration carries."""
        return self.score(prompt, prompt_valid, response, response_mask, rows=rows)

    def diagnostics(self, prompt, prompt_valid, response, response_mask):
        return {}

    def reward_error(self) -> Optional[str]:
        """The text reward's first failure (None: none, or a reward model)."""
        return getattr(self.reward, "error", None)

    def check_reward(self, before: Optional[str] = None) -> None:
        """Raise the text reward's failure if one happened since ``before`` (:meth:`reward_error`
        taken before a call): a host-side check after an evaluation ran it."""
        if hasattr(self.reward, "raise_if_failed") and self.reward.error != before:
            self.reward.raise_if_failed()

    def decode(self, tokens) -> str:
        """Host side: a response's text (up to, not including, its first stop token; padding dropped)."""
        return self.tokenizer.decode(strip_special(np.asarray(tokens).tolist(), self.stop_ids, self.pad_id))

    def decode_prompt(self, tokens, valid) -> str:
        """Host side: a prompt's text, its valid tokens all (a chat template's EOS included)."""
        return self.tokenizer.decode(np.asarray(tokens)[np.asarray(valid, bool)].tolist())


class RewardModelError(CheckpointFolderError):
    """The ``--reward-model`` folder cannot score the policy's responses (unreadable, another
    vocabulary or tokenizer, no score head): the message names the folder and the fix."""


def load_bound_reward_model(folder: str, policy_folder: str, dtype) -> BoundReward:
    """The reward model in ``folder`` (:func:`purejaxppo.lm.rewards.reward_model.load_reward_trunk`), refused
    (:class:`RewardModelError`) unless it reads the policy's token ids: the same vocabulary
    size and, when both folders hold one, the same tokenizer.json. (Re-tokenising through text is
    not done: the reward model scores the policy's ids as they are.)"""
    from purejaxppo.lm.rewards.reward_model import load_reward_trunk, make_reward_fn

    mine = model_shape(policy_folder)[0]
    try:
        theirs = model_shape(folder)[0]
    except CheckpointFolderError as e:
        raise RewardModelError(f"--reward-model {folder}: {e}") from None
    if mine != theirs:
        raise RewardModelError(
            f"--reward-model {folder}: its vocabulary ({theirs}) differs from the policy's "
            f"({mine}); give a reward model trained on the policy's tokenizer"
        )
    toks = [os.path.join(f, "tokenizer.json") for f in (policy_folder, folder)]
    if all(os.path.isfile(t) for t in toks) and file_hash(toks[0]) != file_hash(toks[1]):
        raise RewardModelError(
            f"--reward-model {folder}: its tokenizer.json differs from the policy's; give a "
            "reward model trained on the policy's tokenizer (ids are not re-tokenised)"
        )
    try:
        lm, params, has_head = load_reward_trunk(folder, dtype)
    except CheckpointFolderError as e:
        raise RewardModelError(f"--reward-model {folder}: {e}") from None
    if not has_head:
        raise RewardModelError(
            f"--reward-model {folder} holds no score head: it is not a reward model (train "
            "one with python -m purejaxppo reward --model DIR --pairs FILE.jsonl)"
        )
    return BoundReward(make_reward_fn(lm), params, lm)


@dataclasses.dataclass(frozen=True)
class TextData:
    """What ``make_text_task`` read, for the run's record: ``cut`` prompts per file and hashes."""

    cut: dict
    hashes: dict


def make_text_task(
    model: str,
    prompts: str,
    reward_for: Callable,
    *,
    max_new: int,
    eval_prompts: Optional[str] = None,
    sft_data: Optional[str] = None,
    max_prompt_tokens: int = 0,
    truncate: bool = False,
    chat: bool = False,
    columns: Optional[dict] = None,
    source_options: Optional[dict] = None,
    held_out: float = 0,
    split_seed: int = 0,
) -> tuple:
    """The user's model folder and files as a task; every file is read and every size checked
    (prompts and responses against the model's positions, ids against its vocabulary) BEFORE
    any compiled work.

    Args:
      model: the local model folder (its ``config.json`` and tokenizer are read).
      prompts: the training prompts: a ``.jsonl`` / ``.txt`` / ``.parquet`` file, a folder
        saved by ``datasets``, or ``reasoning-gym:NAME``
        (:func:`~purejaxppo.lm.data.row_sources.read_rows`); each row's other columns reach
        a :class:`~purejaxppo.lm.rewards.python_reward.TextReward` by row id.
      reward_for: ``reward_for(tokenizer) -> reward``, the task's score.
      max_new: ``T``, the response budget.
      eval_prompts: fixed evaluation prompts, a source as ``prompts`` (default: ``prompts``).
      sft_data: a ``.jsonl`` file of prompt/response pairs (``TextTask.demonstrations``).
      max_prompt_tokens: the prompt budget; 0: the model's positions minus ``max_new``
        (1024 when ``config.json`` names no positions).
      truncate: cut a prompt over the budget from the left instead of refusing it.
      chat: render plain prompts as one user message through the chat template.
      columns: a column map ``{name: column of the source}`` (``"prompt"``: the prompt's).
      source_options: ``read_rows``' ``size``, ``seed``, ``config`` (reasoning-gym) or
        ``split`` (a saved ``DatasetDict``), for ``prompts`` and ``eval_prompts``.
      held_out: the evaluation prompts held out of ``prompts`` instead (a fraction or a count,
        :func:`~purejaxppo.lm.data.row_sources.split_rows`), not trained on; not with
        ``eval_prompts``.
      split_seed: the held-out split's seed.

    Returns:
      ``(TextTask, TextData)``: the task, and what was read for the run's record (prompts
      cut per file, hashes of the sources and of the folder's weights and tokenizer).

    Raises:
      CheckpointFolderError: a model folder without a usable ``config.json`` or tokenizer,
        or a tokenizer larger than the model's vocabulary.
      PromptFileError: a bad prompt or SFT file, or budgets that do not fit the model's
        positions (the message names the flag and ``file:line``).
      RewardSpecError: the reward takes a column the rows lack.
      MissingExtraError: a source's optional package is not installed.
    """
    vocab, positions = model_shape(model)
    tokenizer = load_tokenizer(model, model_vocab=vocab)
    if tokenizer.vocab_size > vocab:
        raise CheckpointFolderError(
            f"{model}: tokenizer.json has {tokenizer.vocab_size} tokens but the model only "
            f"{vocab} embedding rows; the tokenizer belongs to another model"
        )
    room = None if positions is None else positions - max_new
    if room is not None and room < 1:
        raise pd.PromptFileError(
            f"--max-new-tokens {max_new} leaves no room for a prompt in the model's {positions} positions; lower it"
        )
    budget = max_prompt_tokens or room or 1024
    if room is not None and budget > room:
        raise pd.PromptFileError(
            f"--max-prompt-tokens {budget} + --max-new-tokens {max_new} exceed the model's "
            f"{positions} positions; lower one of them"
        )

    def encode(records, flag, sft=False):  # the rows' table (and responses), its errors naming the flag
        try:
            table = pd.encode_prompts(records, tokenizer, budget, truncate, chat)
            return (table, *pd.encode_responses(records, tokenizer, max_new)) if sft else table
        except pd.PromptFileError as e:
            raise pd.PromptFileError(f"{flag} {e}") from None

    def rows(source, flag, sft=False):
        try:
            if sft:
                return pd.read_records(source, need_response=True)
            return rs.read_rows(source, columns=columns, **(source_options or {}))
        except pd.PromptFileError as e:
            raise pd.PromptFileError(f"{flag} {e}") from None

    if held_out and eval_prompts:
        raise pd.PromptFileError("--eval-prompts and a held-out share both name evaluation prompts; give one")
    train = rows(prompts, "--prompts")
    if held_out:
        train, held = rs.split_rows(train, held_out, split_seed)
    table = encode(train, "--prompts")
    cut, hashes = {"prompts": table.cut}, {"prompts": rs.source_hash(prompts, source_options)}
    eval_table = encode(held, "--prompts (held out)") if held_out else table
    if eval_prompts:
        eval_table = encode(rows(eval_prompts, "--eval-prompts"), "--eval-prompts")
        cut["eval_prompts"], hashes["eval_prompts"] = eval_table.cut, rs.source_hash(eval_prompts, source_options)
    if held_out:
        cut["held_out"] = eval_table.cut
    sft = None
    if sft_data:
        sft = encode(rows(sft_data, "--sft-data", sft=True), "--sft-data", sft=True)
        cut["sft_data"], hashes["sft_data"] = sft[0].cut, file_hash(sft_data)
    task = TextTask(tokenizer, table, eval_table, max_new, vocab, reward_for(tokenizer), sft)
    return task, TextData(cut, {**folder_hashes(model), **hashes})
