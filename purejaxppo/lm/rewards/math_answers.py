"""The ``math`` reward: a completion's final answer against the row's gold answer, equal for
math-verify (``1,000 == 1000``, ``0.5 == 1/2``, LaTeX such as ``\\frac{1}{2}``).

The final answer (:func:`final_answer`), first found of:

1. the last ``<answer>...</answer>`` tag (its content then read by the rules below, else whole);
2. the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces matched;
3. the text after the last ``####`` (GSM8K's form), to the end of its line;
4. the last number (``-1,234.5``, ``3/4``, ``\\frac{3}{4}``).

The gold answer is read the same way (a GSM8K solution ``... #### 72``, a MATH solution's
``\\boxed{}``), falling back to the whole string. Equal strings (after dropping thousands
separators and a trailing period) score 1 at once; the rest go to math-verify in worker
processes (:class:`~purejaxppo.lm.rewards.check_pool.CheckPool`) with math-verify's own
timeouts off (they use SIGALRM, which works only on the main thread, and a reward runs off it):
a check past ``timeout`` seconds is killed, scores 0 and is counted.
"""

from __future__ import annotations

import re
from typing import Optional

import purejaxppo.lm.rewards.check_pool as cp
from purejaxppo.lm.rewards.reward_columns import Tally, optional_import

TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
HASHES = re.compile(r"####\s*([^\n]*)")
NUMBER = re.compile(
    r"\\d?frac\{[^{}]*\}\{[^{}]*\}|-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|-?\.\d+"
)


def last_boxed(text: str) -> Optional[str]:
    """The content of the last ``\\boxed{...}`` of ``text``, nested braces matched (None: none,
    or never closed)."""
    starts = [m.end() for m in BOXED.finditer(text)]
    if not starts:
        return None
    depth, begin = 1, starts[-1]
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip()
    return None


def final_answer(text: str, whole: bool = False) -> Optional[str]:
    """A text's final answer by the module's rules (None: none found).

    Args:
      text: a completion (or a gold solution).
      whole: return the stripped text when no rule finds an answer (a gold answer's fallback).

    Returns:
      The answer's text, or None.
    """
    tags = TAG.findall(text)
    if tags:
        inner = final_answer(tags[-1], whole=True)
        return inner or None
    boxed = last_boxed(text)
    if boxed:
        return boxed
    hashes = HASHES.findall(text)
    if hashes and hashes[-1].strip():
        return hashes[-1].strip()
    if whole and text.strip():
        return text.strip()
    numbers = NUMBER.findall(text)
    return numbers[-1].strip() if numbers else None


def normal(text: str) -> str:
    """A string compared as is: thousands separators and a trailing period dropped, spaces
    squeezed."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.strip().rstrip(".").strip())
    return " ".join(text.split())


class MathReward:
    """``fn(prompts, completions, **columns) -> [1.0 | 0.0 | None]``: the completion's final
    answer equals the row's gold answer (the module's rules); None where the row has no gold
    answer, 0.0 where the completion has no answer or its check runs past ``timeout``.

    Args:
      answer_column: the column holding the gold answer.
      timeout: seconds per check (one completion against its gold answer).
      workers: worker processes checking at once.
      check: the equality, run in the workers: ``"math"`` (math-verify) or
        ``"module:function"`` (``fn(gold: str, answer: str) -> bool``) under the same limit.

    Attributes:
      answer_column, timeout: as given.
      pool: the :class:`~purejaxppo.lm.rewards.check_pool.CheckPool`.
      tally: counts since the last :meth:`take_counts`.
    """

    def __init__(self, answer_column: str = "answer", timeout: float = 5.0, workers: int = 2, check: str = "math"):
        self.__name__ = "math"
        if check == "math":
            optional_import("math_verify", "the math reward")
        self.answer_column, self.timeout = answer_column, timeout
        self.pool = cp.CheckPool(check, workers, timeout)
        self.tally = Tally()

    def take_counts(self) -> dict:
        """``{"timeouts": n, "failed": n}``: checks killed at the limit, and checks that raised
        (both scored 0), since the last take.

        Returns:
          The counts, each a float.
        """
        counts = self.tally.take()
        return {"timeouts": counts.get("timeouts", 0.0), "failed": counts.get("failed", 0.0)}

    def __call__(self, prompts: list, completions: list, **columns) -> list:
        """The scores.

        Args:
          prompts, completions: the texts, one per completion.
          **columns: the rows' columns; :attr:`answer_column` is read (absent: all None).

        Returns:
          One 1.0, 0.0 or None per completion.
        """
        golds = columns.get(self.answer_column) or [None] * len(completions)
        out, tasks, where = [], [], []
        for i, (gold, text) in enumerate(zip(golds, completions)):
            answer = final_answer(text)
            if gold is None:
                out.append(None)
                continue
            gold = final_answer(str(gold), whole=True) or ""
            if answer is None or not gold:
                out.append(0.0)
            elif normal(answer) == normal(gold):
                out.append(1.0)
            else:
                out.append(0.0)
                tasks.append((gold, answer))
                where.append(i)
        results = self.pool.run(tasks) if tasks else []
        for i, r in zip(where, results):
            out[i] = 1.0 if r is True else 0.0
        self.tally.add(timeouts=sum(r == cp.TIMEOUT for r in results), failed=sum(r == cp.FAILED for r in results))
        return out
