"""Built-in verifiable rewards by name (:func:`get`) and several rewards at once with weights
(:func:`combine`), each ``fn(prompts, completions, **columns) -> list[float | None]``
(:mod:`purejaxppo.lm.rewards.reward_columns`).

A :class:`CombinedReward` keeps, between two :meth:`CombinedReward.take_stats` calls, each
reward's sum over the completions it scored and how many it saw, so that each can be logged
as its own metric columns: ``reward_<name>_mean`` (its mean over the completions it scored,
None left out), ``reward_<name>_scored`` (the fraction it scored) and its own counts
(``reward_math_timeouts``, ...).
"""

from __future__ import annotations

import math
from typing import Callable

from purejaxppo.lm.rewards.math_answers import MathReward
from purejaxppo.lm.rewards.python_reward import RewardSpecError
from purejaxppo.lm.rewards.reward_columns import Tally, call_reward, ratio
from purejaxppo.lm.rewards.rule_rewards import FormatReward, LengthReward, ReasoningGymReward

#: the built-in rewards: name -> the class :func:`get` builds
BUILTIN = {
    "math": MathReward,
    "reasoning-gym": ReasoningGymReward,
    "reasoning_gym": ReasoningGymReward,
    "format": FormatReward,
    "length": LengthReward,
}


def get(name: str, **options) -> Callable:
    """A built-in verifiable reward by name.

    Args:
      name: ``"math"`` (the final answer against the row's ``answer`` column, math-verify),
        ``"reasoning-gym"`` (the generator's scorer on the row's entry), ``"format"`` (a
        regular expression or a tag template) or ``"length"`` (a soft length penalty).
      **options: the reward's own (:class:`~purejaxppo.lm.rewards.math_answers.MathReward`,
        :class:`~purejaxppo.lm.rewards.rule_rewards.ReasoningGymReward`,
        :class:`~purejaxppo.lm.rewards.rule_rewards.FormatReward`,
        :class:`~purejaxppo.lm.rewards.rule_rewards.LengthReward`).

    Returns:
      ``fn(prompts, completions, **columns) -> list[float | None]``.

    Raises:
      RewardSpecError: an unknown name, or options the reward does not take.
      MissingExtraError: its optional package is not installed.
    """
    cls = BUILTIN.get(name)
    if cls is None:
        names = ", ".join(n for n in BUILTIN if n != "reasoning_gym")
        raise RewardSpecError(f"no built-in reward {name!r}; the built-in rewards are {names}")
    try:
        return cls(**options)
    except (TypeError, ValueError) as e:
        raise RewardSpecError(f"reward {name!r} with options {options}: {e}") from None


class CombinedReward:
    """Several rewards as one: the weighted sum of the rewards that score a completion (a None
    contributes 0; None when none of them scores it), with each reward's statistics kept.

    Args:
      parts: ``[(fn, weight, name), ...]``.

    Attributes:
      parts: as given.
      tally: the sums since the last :meth:`take_stats`.
    """

    def __init__(self, parts: list):
        self.parts, self.tally = list(parts), Tally()
        self.__name__ = "+".join(name for _, _, name in self.parts)

    def take_stats(self) -> dict:
        """Host side: each reward's statistics since the last take (the module's metric names).

        Returns:
          ``{"reward_<name>_mean": float, "reward_<name>_scored": float, ...}`` (NaN: nothing
          scored); empty when nothing was called since the last take.
        """
        return self.stats_of(self.take_counts())

    def take_counts(self) -> dict:
        """Host side: the additive counts since the last take, each reward's own counts
        (``"<name>.timeouts"``, ...) among them: counts of several callers (processes) add up
        key by key, and :meth:`stats_of` their sum gives the statistics of all their calls.

        Returns:
          ``{key: float}``.
        """
        counts = self.tally.take()
        for fn, _, name in self.parts:
            if callable(getattr(fn, "take_counts", None)):
                counts.update({f"{name}.{k}": v for k, v in fn.take_counts().items()})
        return counts

    def stats_of(self, counts: dict) -> dict:
        """The metric columns of :meth:`take_counts`' counts (or of several callers' summed).

        Returns:
          As :meth:`take_stats`; empty when the counts hold no completion.
        """
        out = {}
        if not counts.get("rows"):
            return out
        for _, _, name in self.parts:
            out[f"reward_{name}_mean"] = ratio(counts.get(f"{name}_sum", 0.0), counts.get(f"{name}_scored", 0.0))
            out[f"reward_{name}_scored"] = ratio(counts.get(f"{name}_scored", 0.0), counts["rows"])
            out.update(
                {f"reward_{name}_{k[len(name) + 1 :]}": v for k, v in counts.items() if k.startswith(name + ".")}
            )
        return out

    def score(self, prompts: list, completions: list, **columns) -> dict:
        """Each reward's values.

        Args:
          prompts, completions: the texts, one per completion; **columns: the rows' columns.

        Returns:
          ``{name: [float | None per completion]}``.

        Raises:
          ValueError: a reward's result is malformed (its name and the row in the message).
        """
        return {name: call_reward(fn, name, prompts, completions, columns) for fn, _, name in self.parts}

    def __call__(self, prompts: list, completions: list, **columns) -> list:
        """The weighted sums.

        Args:
          prompts, completions: the texts, one per completion; **columns: the rows' columns,
            each reward given those it takes.

        Returns:
          One float or None per completion.
        """
        values = self.score(prompts, completions, **columns)
        counts = {"rows": len(completions)}
        total = [None] * len(completions)
        for _, weight, name in self.parts:
            got = [v for v in values[name] if v is not None]
            counts[f"{name}_sum"], counts[f"{name}_scored"] = math.fsum(got), len(got)
            for i, v in enumerate(values[name]):
                if v is not None:
                    total[i] = (total[i] or 0.0) + weight * v
        self.tally.add(**counts)
        return total


def combine(rewards: list) -> CombinedReward:
    """Several rewards at once, with weights.

    Args:
      rewards: ``[(fn_or_name, weight, name), ...]`` (or ``(fn_or_name, weight)``: the name is
        the built-in's, or the function's ``__name__``); a string is a built-in reward
        (:func:`get`, default options).

    Returns:
      A :class:`CombinedReward`, ``fn(prompts, completions, **columns) -> list[float | None]``
      with :meth:`~CombinedReward.take_stats`.

    Raises:
      RewardSpecError: an empty list, a malformed entry, an unknown built-in, or a name twice.
    """
    parts = []
    for item in rewards:
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise RewardSpecError(f"combine: {item!r} is not (reward, weight) or (reward, weight, name)")
        fn, weight = item[0], float(item[1])
        if isinstance(fn, str):
            name, fn = fn, get(fn)
        else:
            name = getattr(fn, "__name__", type(fn).__name__)
        name = str(item[2]) if len(item) == 3 else name.replace("-", "_")
        if not callable(fn) or not math.isfinite(weight):
            raise RewardSpecError(f"combine: {item!r} needs a callable reward and a finite weight")
        parts.append((fn, weight, name))
    names = [n for _, _, n in parts]
    if not parts or len(set(names)) != len(names):
        raise RewardSpecError(f"combine needs one or more rewards with distinct names (got {names})")
    return CombinedReward(parts)
