"""Text prompts (and SFT pairs) from a file, as token tables and a :data:`~purejaxppo.lm.ppo.token_ppo.PromptFn`.

File formats (one record per line, the line numbers named in every error):

* ``.jsonl``: a JSON object per line with a ``"prompt"`` string or a chat ``"messages"`` list
  (``[{"role": "user", "content": "..."}, ...]``, rendered through the model's chat template
  with the generation prompt added); SFT data adds a ``"response"`` string. Blank lines are skipped.
* ``.txt``: one prompt per line (its trailing newline dropped); blank lines are skipped. No SFT data.

A prompt longer than the budget (the model's positions minus the response budget, or
``max_prompt_tokens``) is refused naming ``file:line``, or with ``truncate`` cut from the
LEFT (its end, where the question and the generation prompt are, kept) and counted in
:attr:`PromptTable.cut`: never silently.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

FORMATS = (".jsonl", ".txt")


class PromptFileError(ValueError):
    """A prompt or SFT file that cannot be used: the message names ``file:line`` and the fix."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One line of a prompt or SFT file (:func:`read_records`).

    Attributes:
      where: ``file:line``, named by every error about it.
      prompt: the prompt string, or None when the line is a chat.
      messages: the chat, a tuple of ``(key, value)`` item tuples per message (sorted), or None.
      response: the SFT response string (SFT data only), else None.
    """

    where: str
    prompt: Optional[str] = None
    messages: Optional[tuple] = None
    response: Optional[str] = None


def read_records(path: str, need_response: bool = False) -> list:
    """Read a prompt file (``.jsonl`` or ``.txt``) or an SFT file (``.jsonl`` with responses).

    Args:
      path: the file; the formats are in the module's docstring.
      need_response: SFT data: every line needs a ``"response"`` string (``.jsonl`` only).

    Returns:
      A list of :class:`Record`, blank lines skipped.

    Raises:
      PromptFileError: a missing file, an unknown extension, a line that is not a valid record
        (named ``file:line``), or a file with no prompts.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS or (need_response and ext != ".jsonl"):
        allowed = ".jsonl" if need_response else " or ".join(FORMATS)
        raise PromptFileError(f"{path}: expected a {allowed} file")
    if not os.path.isfile(path):
        raise PromptFileError(f"{path} does not exist (or is not a file)")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptFileError(f"{path} cannot be read as UTF-8 text ({e})") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        out.append(_jsonl_record(line, where, need_response) if ext == ".jsonl" else Record(where, prompt=line))
    if not out:
        raise PromptFileError(f"{path} holds no prompts")
    return out


def _jsonl_record(line: str, where: str, need_response: bool) -> Record:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise PromptFileError(f"{where} is not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise PromptFileError(
            f"{where} holds {type(obj).__name__}; each line must be a JSON object like "
            '{"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}'
        )
    prompt, messages, response = obj.get("prompt"), obj.get("messages"), obj.get("response")
    if (prompt is None) == (messages is None):
        raise PromptFileError(f"{where} needs exactly one of \"prompt\" (a string) or \"messages\" (a chat list)")
    if prompt is not None and not isinstance(prompt, str):
        raise PromptFileError(f"{where}: \"prompt\" must be a string, not {type(prompt).__name__}")
    if messages is not None:
        good = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages
            )
        )
        if not good:
            raise PromptFileError(
                f"{where}: \"messages\" must be a non-empty list of {{\"role\": \"...\", \"content\": \"...\"}} objects"
            )
        messages = tuple(tuple(sorted(m.items())) for m in messages)
    if need_response and not isinstance(response, str):
        raise PromptFileError(f"{where} needs a \"response\" string (SFT data is prompt/response pairs)")
    return Record(where, prompt, messages, response if need_response else None)


def render(record: Record, tokenizer, chat: bool) -> str:
    """The prompt's text: ``messages`` through the chat template; a ``prompt`` as it is, or
    (``chat``) as one user message through the template."""
    if record.messages is None and not chat:
        return record.prompt
    messages = (
        [dict(m) for m in record.messages]
        if record.messages is not None
        else [{"role": "user", "content": record.prompt}]
    )
    try:
        return tokenizer.render_chat(messages, add_generation_prompt=True)
    except Exception as e:  # jinja2's own errors, a template's raise_exception
        raise PromptFileError(f"{record.where}: {e}") from None


@dataclasses.dataclass(frozen=True, eq=False)
class PromptTable:
    """Prompts encoded and LEFT-padded to the longest (:func:`encode_prompts`).

    Attributes:
      tokens: ``[N, P]`` int32 NumPy array, LEFT-padded with the tokenizer's ``pad_id``.
      valid: ``[N, P]`` bool, False on padding.
      texts: tuple of the ``N`` rendered prompt strings.
      cut: how many prompts were cut to the budget (``truncate``).
      prompt_len: ``P`` (a property).
    """

    tokens: np.ndarray
    valid: np.ndarray
    texts: tuple
    cut: int

    @property
    def prompt_len(self) -> int:
        """``P``, the table's width."""
        return self.tokens.shape[1]


def encode_prompts(records: list, tokenizer, budget: int, truncate: bool, chat: bool) -> PromptTable:
    """Render and encode records into a table of left-padded prompts.

    Args:
      records: the :class:`Record` list of :func:`read_records`.
      tokenizer: a :class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer` (``encode``,
        ``pad_id``, ``render_chat``).
      budget: the most tokens a prompt may have.
      truncate: cut a longer prompt from the LEFT (its end kept) and count it, instead of
        refusing it.
      chat: render a plain ``prompt`` as one user message through the chat template
        (``messages`` always go through it).

    Returns:
      A :class:`PromptTable`.

    Raises:
      PromptFileError: a prompt over ``budget`` without ``truncate`` (naming its line and how
        many are too long), a prompt that encodes to no tokens, or a template that refuses a chat.
    """
    texts = [render(r, tokenizer, chat) for r in records]
    ids = [tokenizer.encode(t) for t in texts]
    empty = [r.where for r, x in zip(records, ids) if not x]
    if empty:
        raise PromptFileError(f"{empty[0]}: the prompt encodes to no tokens; remove the line or give it text")
    long = [(r.where, len(x)) for r, x in zip(records, ids) if len(x) > budget]
    if long and not truncate:
        raise PromptFileError(
            f"{long[0][0]}: the prompt has {long[0][1]} tokens, over the budget of {budget} "
            f"({len(long)} of {len(ids)} prompts are); shorten them, raise --max-prompt-tokens "
            f"(the model's positions allow prompt + --max-new-tokens), or pass --truncate-prompts "
            f"to keep each one's last {budget} tokens"
        )
    ids = [x[-budget:] for x in ids]
    width = max(len(x) for x in ids)
    tokens = np.full((len(ids), width), tokenizer.pad_id, np.int32)
    valid = np.zeros((len(ids), width), bool)
    for i, x in enumerate(ids):
        tokens[i, width - len(x) :], valid[i, width - len(x) :] = x, True
    return PromptTable(tokens, valid, tuple(texts), len(long))


def encode_responses(records: list, tokenizer, max_new: int) -> tuple:
    """``(response [N, T], mask [N, T])``: each SFT response's ids and its EOS, RIGHT-padded;
    one that does not fit ``max_new`` with its EOS is refused naming its line."""
    ids = [tokenizer.encode(r.response) + [tokenizer.stop_ids[0]] for r in records]
    long = [(r.where, len(x)) for r, x in zip(records, ids) if len(x) > max_new]
    if long:
        raise PromptFileError(
            f"{long[0][0]}: the response has {long[0][1]} tokens with its EOS, over "
            f"--max-new-tokens {max_new} ({len(long)} of {len(ids)} are); raise --max-new-tokens "
            "or shorten them"
        )
    response = np.full((len(ids), max_new), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(ids), max_new), bool)
    for i, x in enumerate(ids):
        response[i, : len(x)], mask[i, : len(x)] = x, True
    return response, mask


def table_prompts(table: PromptTable):
    """A table as the prompt source of token-level PPO (``make_token_ppo(..., prompts=...)``).

    Args:
      table: a :class:`PromptTable`; it is copied to the device once.

    Returns:
      ``prompts(key, batch) -> (prompt [B, P] int32, prompt_valid [B, P] bool)``: ``batch`` rows
      drawn uniformly with replacement (jittable; ``batch`` static).
    """
    tokens, valid, n = jnp.asarray(table.tokens), jnp.asarray(table.valid), table.tokens.shape[0]

    def prompts(key, batch: int):
        rows = jax.random.randint(key, (batch,), 0, n)
        return tokens[rows], valid[rows]

    return prompts


def first_rows(table: PromptTable, batch: int):
    """The table's first ``batch`` rows (cycling when it holds fewer): fixed evaluation prompts."""
    rows = np.arange(batch) % table.tokens.shape[0]
    return jnp.asarray(table.tokens[rows]), jnp.asarray(table.valid[rows])
