"""Shared pieces of the episode tests: the character tokenizer they use and a Python copy of
the guessing game (the Python-environment path's reference for the JAX ``GuessNumber``)."""

from __future__ import annotations

import re

from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
from purejaxppo.lm.envs.guess_number import FEEDBACK_TEXTS
from purejaxppo.lm.envs.python_env import TextStep

TOK = CharTokenizer("0123456789 abcdefghilmnorstuwGN.\n")


class PyGuess:
    """The guessing game on text: secret ``1 + row % 3``, the first run of digits is the guess,
    truncated after ``max_guesses`` wrong ones."""

    def __init__(self, max_guesses: int, intro: str = "Guess 1 to 3.\n"):
        self.max_guesses, self.intro = max_guesses, intro

    def reset(self, rows):
        self.secret = [1 + r["row"] % 3 for r in rows]
        self.guesses = [0] * len(rows)
        return [self.intro] * len(rows)

    def step(self, actions, active):
        out = []
        for i, text in enumerate(actions):
            if not active[i]:
                out.append(TextStep("", 0.0, False, False))
                continue
            self.guesses[i] += 1
            m = re.search(r"\d+", text)
            if m is None or len(m.group()) > 9:
                k = 3
            else:
                v = int(m.group())
                k = 0 if v < self.secret[i] else 1 if v > self.secret[i] else 2
            truncated = k != 2 and self.guesses[i] >= self.max_guesses
            out.append(TextStep(FEEDBACK_TEXTS[k], float(k == 2), k == 2, truncated))
        return out
