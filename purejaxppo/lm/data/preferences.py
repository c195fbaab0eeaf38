"""Preference pairs from a ``.jsonl`` file: read, tokenize, pad into a
:class:`~purejaxppo.lm.rewards.bradley_terry.PairBatch`.

Each line is ``{"prompt": str, "chosen": str, "rejected": str}`` with an optional numeric
``"margin"``. The prompt is LEFT-padded to ``P`` tokens (a longer one keeps its last ``P``:
the end is what the response answers), each response RIGHT-padded to ``T`` with the EOS id
appended when one is known (as a sampled response ends), a longer one cut; the cuts are
counted and returned, never silent.

A pair that cannot teach a preference is refused, naming it: an empty (or blank) chosen or
rejected response, the same text on both sides, or two responses that become the same tokens
once cut to the budget (the loss of such a pair is constant: it only adds noise to the
accuracy).
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple, Optional

import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.lm.rewards.bradley_terry import PairBatch


class PairsFileError(ConfigError):
    """A pairs file that cannot be used: the message names the file, the line and the fix."""


class Cuts(NamedTuple):
    """How many prompts and responses were cut to fit ``P`` and ``T``."""

    prompts: int
    responses: int


def read_pairs(path: str) -> list[dict]:
    """Read a preference-pairs file.

    Args:
      path: a ``.jsonl`` file, one ``{"prompt", "chosen", "rejected"}`` object of strings per
        line with an optional finite numeric ``"margin"``; blank lines skipped.

    Returns:
      The rows, a list of dicts.

    Raises:
      PairsFileError: a missing file, a line that is not JSON or lacks a field (naming the
        line), a bad margin, or fewer than 2 pairs (some are held out).
    """
    if not os.path.isfile(path):
        raise PairsFileError(f"--pairs {path}: no such file (give a .jsonl file of prompt/chosen/rejected rows)")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PairsFileError(f"--pairs {path}, line {i}: not JSON ({e.msg})") from None
            if not isinstance(row, dict) or not all(
                isinstance(row.get(k), str) for k in ("prompt", "chosen", "rejected")
            ):
                raise PairsFileError(f"--pairs {path}, line {i}: needs string fields prompt, chosen and rejected")
            if "margin" in row and (
                isinstance(row["margin"], bool)
                or not isinstance(row["margin"], (int, float))
                or not np.isfinite(row["margin"])
            ):
                raise PairsFileError(f"--pairs {path}, line {i}: margin must be a finite number")
            empty = [k for k in ("chosen", "rejected") if not row[k].strip()]
            if empty:
                raise PairsFileError(
                    f"--pairs {path}, line {i}: {' and '.join(empty)} is empty; a pair needs two responses to "
                    "compare (fix the line or drop it)"
                )
            if row["chosen"] == row["rejected"]:
                raise PairsFileError(
                    f"--pairs {path}, line {i}: chosen and rejected are the same text, so the pair teaches no "
                    "preference; fix the line or drop it"
                )
            rows.append(row)
    if len(rows) < 2:
        raise PairsFileError(f"--pairs {path}: {len(rows)} pair(s); need at least 2 (some are held out)")
    return rows


def _left(ids: list, n: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    ids = ids[-n:] if n else []
    out, valid = np.full(n, pad, np.int32), np.zeros(n, bool)
    if ids:
        out[n - len(ids) :], valid[n - len(ids) :] = ids, True
    return out, valid


def _right(ids: list, n: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    ids = ids[:n]
    out, valid = np.full(n, pad, np.int32), np.zeros(n, bool)
    out[: len(ids)], valid[: len(ids)] = ids, True
    return out, valid


def tokenize_pairs(
    rows: list[dict], encode, *, max_prompt: int, max_response: int, eos_id: Optional[int], pad_id: int = 0
) -> tuple[PairBatch, Cuts]:
    """Tokenize and pad pairs into a :class:`~purejaxppo.lm.rewards.bradley_terry.PairBatch`.

    Args:
      rows: :func:`read_pairs`' rows.
      encode: ``encode(text) -> list[int]``, without special tokens.
      max_prompt: the most prompt tokens ``P``; a longer prompt keeps its LAST ``P``.
      max_response: the most response tokens ``T`` (EOS included); a longer one is cut.
      eos_id: appended to every response (as a sampled one ends), or None.
      pad_id: the padding id.

    Returns:
      ``(PairBatch, Cuts)``: NumPy arrays, ``prompt, prompt_valid [N, P]`` LEFT-padded and
      ``chosen, chosen_mask, rejected, rejected_mask [N, T]`` RIGHT-padded (int32 / bool),
      ``margin [N]`` float32, with ``P`` / ``T`` the longest prompt / response up to the
      maxima; and how many prompts and responses were cut.
    """
    prompts = [encode(r["prompt"]) for r in rows]
    tail = [] if eos_id is None else [eos_id]
    chosen = [encode(r["chosen"]) + tail for r in rows]
    rejected = [encode(r["rejected"]) + tail for r in rows]
    p = max(1, min(max_prompt, max(len(x) for x in prompts)))
    t = max(1, min(max_response, max(len(x) for x in chosen + rejected)))
    cuts = Cuts(sum(len(x) > p for x in prompts), sum(len(x) > t for x in chosen + rejected))
    pr, pv = zip(*(_left(x, p, pad_id) for x in prompts))
    ch, cm = zip(*(_right(x, t, pad_id) for x in chosen))
    rj, rm = zip(*(_right(x, t, pad_id) for x in rejected))
    for i in range(len(rows)):
        if np.array_equal(ch[i], rj[i]) and np.array_equal(cm[i], rm[i]):
            raise PairsFileError(
                f"pair {i + 1} (non-blank line {i + 1}): chosen and rejected are the same {t} tokens once cut to "
                f"max_response={max_response} (--max-response), so the pair teaches no preference; raise "
                "--max-response or drop the pair"
            )
    margin = np.asarray([float(r.get("margin", 0.0)) for r in rows], np.float32)
    return PairBatch(*(np.stack(x) for x in (pr, pv, ch, cm, rj, rm)), margin), cuts


def split_pairs(batch: PairBatch, held_out: float, seed: int) -> tuple[PairBatch, PairBatch]:
    """Split pairs into training and held-out sets by a seeded shuffle.

    Args:
      batch: a :class:`~purejaxppo.lm.rewards.bradley_terry.PairBatch` of ``N >= 2`` pairs.
      held_out: the share held out (at least one pair, at most all but one).
      seed: the shuffle's seed.

    Returns:
      ``(train, held_out)``, two :class:`~purejaxppo.lm.rewards.bradley_terry.PairBatch`.
    """
    n = batch.prompt.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    k = min(n - 1, max(1, int(round(n * held_out))))
    pick = lambda idx: PairBatch(*(x[idx] for x in batch))  # noqa: E731
    return pick(order[: n - k]), pick(order[n - k :])
