"""Text prompts (and SFT pairs) from a file, as token tables and a :data:`~purejaxppo.lm.ppo.token_ppo.PromptFn`.

File formats (one record per line, the line numbers named in every error):

* ``.jsonl``: a JSON object per line with a ``"prompt"`` string or a chat ``"messages"`` list
  (``[{"role": "user", "content": "..."}, ...]``, rendered through the model's chat template
  with the generation prompt added); SFT data adds a ``"response"`` string. Blank lines are skipped.
  A ``"question"`` string serves as the prompt when the row has neither, and a column map
  names another column. Every other key of the row is kept as a column (:attr:`Record.columns`),
  which reaches a Python reward by name (:mod:`purejaxppo.lm.rewards.python_reward`).
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
      columns: every other column of the row, ``{name: value}`` (the prompt's own column left
        out), or None; not compared (two records with the same text are equal).
    """

    where: str
    prompt: Optional[str] = None
    messages: Optional[tuple] = None
    response: Optional[str] = None
    columns: Optional[dict] = dataclasses.field(default=None, compare=False)


def read_records(path: str, need_response: bool = False, columns: Optional[dict] = None) -> list:
    """Read a prompt file (``.jsonl`` or ``.txt``) or an SFT file (``.jsonl`` with responses).

    Args:
      path: the file; the formats are in the module's docstring.
      need_response: SFT data: every line needs a ``"response"`` string (``.jsonl`` only).
      columns: a column map ``{name: column of the file}`` (:func:`row_record`), ``.jsonl`` only.

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
        out.append(_jsonl_record(line, where, need_response, columns) if ext == ".jsonl" else Record(where, line))
    if not out:
        raise PromptFileError(f"{path} holds no prompts")
    return out


def _jsonl_record(line: str, where: str, need_response: bool, columns: Optional[dict]) -> Record:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise PromptFileError(f"{where} is not JSON ({e})") from None
    return row_record(obj, where, need_response, columns)


PROMPT_COLUMNS = ("prompt", "messages", "question")  # the prompt's column when no map names one


def row_record(obj, where: str, need_response: bool = False, columns: Optional[dict] = None) -> Record:
    """One row (a dict of columns) as a :class:`Record`.

    Args:
      obj: the row, ``{column: value}``.
      where: how errors name it (``file:line``).
      need_response: SFT data: the row needs a ``"response"`` string.
      columns: a column map ``{name: column of the row}``: ``"prompt"`` names the prompt's
        column (a string, or a chat list); any other entry renames a column (``{"answer":
        "solution"}``: the reward's ``answer`` is the row's ``solution``). Without ``"prompt"``
        the prompt is the row's ``"prompt"`` or ``"messages"`` (exactly one), else its
        ``"question"``.

    Returns:
      A :class:`Record`; every column but the prompt's kept in :attr:`Record.columns`.

    Raises:
      PromptFileError: not a dict, no prompt (or two), a prompt that is not a string or a chat,
        a mapped column the row lacks, or SFT data without a response.
    """
    if not isinstance(obj, dict):
        raise PromptFileError(
            f"{where} holds {type(obj).__name__}; each line must be a JSON object like "
            '{"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}'
        )
    mapping = dict(columns or {})
    missing = [c for c in mapping.values() if c not in obj]
    if missing:
        raise PromptFileError(f"{where} has no column {missing[0]!r} (its columns: {', '.join(map(str, obj))})")
    key = mapping.pop("prompt", None)
    if key is None:
        if "prompt" in obj and "messages" in obj or not any(k in obj for k in PROMPT_COLUMNS):
            raise PromptFileError(
                f'{where} needs exactly one of "prompt" (a string) or "messages" (a chat list) (or a "question")'
            )
        key = next(k for k in PROMPT_COLUMNS if k in obj)
    value, rest = obj[key], {k: v for k, v in obj.items() if k != key}
    for name, col in mapping.items():
        rest[name] = obj[col]
        if col != name and col != key:
            rest.pop(col, None)
    prompt = messages = None
    if isinstance(value, str):
        prompt = value
    elif key != "messages" and not isinstance(value, list):
        raise PromptFileError(f'{where}: "{key}" must be a string, not {type(value).__name__}')
    else:
        good = (
            isinstance(value, list)
            and value
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in value
            )
        )
        if not good:
            raise PromptFileError(
                f'{where}: "{key}" must be a non-empty list of {{"role": "...", "content": "..."}} objects'
            )
        messages = tuple(tuple(sorted(m.items())) for m in value)
    response = obj.get("response")
    if need_response and not isinstance(response, str):
        raise PromptFileError(f"{where} needs a \"response\" string (SFT data is prompt/response pairs)")
    return Record(where, prompt, messages, response if need_response else None, rest)


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
      columns: tuple of the ``N`` rows' other columns (:attr:`Record.columns`, ``{}`` when
        none): row ``i``'s are ``columns[i]``, the row id :func:`table_prompts` draws.
      prompt_len: ``P`` (a property).
    """

    tokens: np.ndarray
    valid: np.ndarray
    texts: tuple
    cut: int
    columns: tuple = ()

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
    return PromptTable(tokens, valid, tuple(texts), len(long), tuple(dict(r.columns or {}) for r in records))


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


def table_prompts(table: PromptTable, rows: bool = False):
    """A table as the prompt source of token-level PPO (``make_token_ppo(..., prompts=...)``).

    Args:
      table: a :class:`PromptTable`; it is copied to the device once.
      rows: also return each drawn prompt's row id (its index in ``table``), which the
        iteration carries to the reward so each response is scored with its row's columns.

    Returns:
      ``prompts(key, batch) -> (prompt [B, P] int32, prompt_valid [B, P] bool)``, with
      ``rows``: ``-> (prompt, prompt_valid, row [B] int32)``: ``batch`` rows drawn uniformly
      with replacement (jittable; ``batch`` static).
    """
    tokens, valid, n = jnp.asarray(table.tokens), jnp.asarray(table.valid), table.tokens.shape[0]

    def prompts(key, batch: int):
        drawn = jax.random.randint(key, (batch,), 0, n)
        return (tokens[drawn], valid[drawn], drawn.astype(jnp.int32)) if rows else (tokens[drawn], valid[drawn])

    return prompts


def first_rows(table: PromptTable, batch: int):
    """The table's first ``batch`` rows (cycling when it holds fewer): fixed evaluation prompts."""
    rows = np.arange(batch) % table.tokens.shape[0]
    return jnp.asarray(table.tokens[rows]), jnp.asarray(table.valid[rows])
