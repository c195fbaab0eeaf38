"""Built-in rewards on text by rule: ``format`` (a regular expression or a tag template),
``length`` (a soft length penalty) and ``reasoning-gym`` (the generator's own scorer on the
row's entry). Each is ``fn(prompts, completions, **columns) -> list[float | None]``
(:mod:`purejaxppo.lm.rewards.reward_columns`).
"""

from __future__ import annotations

import re
from typing import Optional

from purejaxppo.lm.rewards.reward_columns import Tally, optional_import

THINK_ANSWER = "<think>...</think><answer>...</answer>"


def template_pattern(template: str) -> str:
    """A tag template as a regular expression: each ``...`` any text (the shortest), and any
    whitespace around the fixed parts and between two tags allowed
    (``<think>...</think><answer>...</answer>``)."""
    parts = [r"\s*".join(re.escape(t) for t in re.split(r"(?<=>)\s*(?=<)", p.strip())) for p in template.split("...")]
    return r"\s*" + r"\s*(.*?)\s*".join(parts) + r"\s*"


class FormatReward:
    """``format``: 1.0 when the whole completion matches, else 0.0.

    Args:
      pattern: a regular expression the whole completion must match (``re.fullmatch``,
        ``.`` matching newlines too); or
      template: a tag template (:func:`template_pattern`); default, when neither is given,
        think-then-answer, ``<think>...</think><answer>...</answer>``.

    Attributes:
      regex: the compiled expression.
    """

    def __init__(self, pattern: Optional[str] = None, template: Optional[str] = None):
        if pattern is not None and template is not None:
            raise ValueError("format: give a pattern or a template, not both")
        self.__name__ = "format"
        text = pattern if pattern is not None else template_pattern(template or THINK_ANSWER)
        try:
            self.regex = re.compile(text, re.S)
        except re.error as e:
            raise ValueError(f"format: {text!r} is not a regular expression ({e})") from None

    def __call__(self, prompts: list, completions: list, **columns) -> list:
        """The scores.

        Args:
          prompts, completions: the texts, one per completion; columns: unused.

        Returns:
          One 1.0 or 0.0 per completion.
        """
        return [1.0 if self.regex.fullmatch(c) else 0.0 for c in completions]


class LengthReward:
    """``length``: a soft penalty on long completions (DAPO's overlong shaping). With ``n`` the
    completion's length: 0 up to ``limit - buffer``, then falling linearly to ``-scale`` at
    ``limit``, and on past it (or held at ``-scale`` with ``cap``).

    Args:
      limit: the length where the penalty reaches ``-scale``.
      buffer: the soft zone's width before ``limit`` (default ``limit // 4``, at least 1).
      scale: the penalty at ``limit``.
      cap: no penalty below ``-scale`` past ``limit``.
      unit: ``"tokens"`` (the ``completion_ids`` a :class:`~purejaxppo.lm.rewards.python_reward.TextReward`
        passes) or ``"chars"``.

    Attributes:
      limit, buffer, scale, cap, unit: as given (``buffer`` resolved).
    """

    def __init__(
        self, limit: int, buffer: Optional[int] = None, scale: float = 1.0, cap: bool = True, unit: str = "tokens"
    ):
        if unit not in ("tokens", "chars"):
            raise ValueError(f"length: unit must be 'tokens' or 'chars', not {unit!r}")
        buffer = max(1, int(limit) // 4) if buffer is None else int(buffer)
        if not 0 < buffer <= int(limit):
            raise ValueError(f"length: need 0 < buffer <= limit (got buffer={buffer}, limit={limit})")
        self.__name__ = "length"
        self.limit, self.buffer, self.scale, self.cap, self.unit = int(limit), buffer, float(scale), cap, unit

    def penalty(self, n: int) -> float:
        """The score of a completion of length ``n``."""
        over = (n - (self.limit - self.buffer)) / self.buffer
        if over <= 0:
            return 0.0
        return -self.scale * min(over, 1.0) if self.cap else -self.scale * over

    def __call__(self, prompts: list, completions: list, completion_ids: Optional[list] = None, **columns) -> list:
        """The scores.

        Args:
          prompts, completions: the texts, one per completion.
          completion_ids: their token ids (``unit="tokens"``).
          **columns: unused.

        Returns:
          One score (``<= 0``) per completion.
        """
        if self.unit == "chars":
            return [self.penalty(len(c)) for c in completions]
        if completion_ids is None:
            raise ValueError("length(unit='tokens') needs completion_ids (a TextReward passes them); or unit='chars'")
        return [self.penalty(len(x)) for x in completion_ids]


class ReasoningGymReward:
    """``reasoning-gym``: the generator's own ``score_answer`` of the completion's answer (the
    last ``<answer>`` tag's content, else the whole completion when ``whole``) on the row's
    entry; None where the row has none.

    Args:
      entry_column: the column holding the generator's entry (a ``reasoning-gym:NAME``
        source keeps it); without it, an entry is rebuilt from ``question``, ``answer`` and
        ``metadata`` columns (a saved copy of such a dataset).
      tag: the answer's tag.
      whole: score the whole completion when it has no tag (else such a completion scores 0).

    Attributes:
      entry_column, tag, whole: as given.
    """

    def __init__(self, entry_column: str = "entry", tag: str = "answer", whole: bool = True):
        self.rg = optional_import("reasoning_gym", "the reasoning-gym reward")
        self.__name__ = "reasoning_gym"
        self.entry_column, self.tag, self.whole = entry_column, tag, whole
        self.regex = re.compile(f"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.S)
        self._scorers: dict = {}
        self.tally = Tally()

    def take_counts(self) -> dict:
        """``{"failed": n}``: scorers that raised (scored 0) since the last take.

        Returns:
          The counts, each a float.
        """
        return {"failed": self.tally.take().get("failed", 0.0)}

    def entries(self, n: int, columns: dict) -> list:
        """Each row's entry (None where it has none) from the rows' ``columns``."""
        if self.entry_column in columns:
            return list(columns[self.entry_column])
        meta, answers, questions = (columns.get(k, [None] * n) for k in ("metadata", "answer", "question"))
        return [
            {"question": q, "answer": a, "metadata": m} if isinstance(m, dict) and "source_dataset" in m else None
            for q, a, m in zip(questions, answers, meta)
        ]

    def __call__(self, prompts: list, completions: list, **columns) -> list:
        """The scores.

        Args:
          prompts, completions: the texts, one per completion.
          **columns: the rows' columns (the entry's, see the class).

        Returns:
          One score in ``[0, 1]`` or None per completion.
        """
        out = []
        for entry, text in zip(self.entries(len(completions), columns), completions):
            if not isinstance(entry, dict):
                out.append(None)
                continue
            found = self.regex.findall(text)
            answer = found[-1].strip() if found else (text.strip() if self.whole else None)
            name = entry["metadata"]["source_dataset"]
            try:
                if name not in self._scorers:
                    self._scorers[name] = self.rg.get_score_answer_fn(name)
                out.append(float(self._scorers[name](answer, entry)))
            except Exception:  # a scorer's own failure on an odd answer: 0, counted
                self.tally.add(failed=1)
                out.append(0.0)
        return out
