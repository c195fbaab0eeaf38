"""A character-level tokenizer: one token per character of a fixed alphabet, plus a pad and an
EOS id. The built-in text environments' tests and demonstrations use it (every digit is one
token, so :class:`~purejaxppo.lm.envs.guess_number.GuessNumber` reads numbers exactly), and it
has the ``encode`` / ``decode`` / ``stop_ids`` / ``pad_id`` face of
:class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

PAD_ID, EOS_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class CharTokenizer:
    """Ids: ``0`` pad, ``1`` EOS, then ``alphabet[i]`` is ``i + 2``.

    Attributes:
      alphabet: the characters, each once.
    """

    alphabet: str

    def __post_init__(self):
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("CharTokenizer: the alphabet repeats a character; give each character once")

    @property
    def stop_ids(self) -> tuple:
        return (EOS_ID,)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 2

    def encode(self, text: str) -> list:
        """``text -> [len(text)]`` ids.

        Raises:
          ValueError: a character outside the alphabet (named, with the fix).
        """
        out = []
        for ch in text:
            i = self.alphabet.find(ch)
            if i < 0:
                raise ValueError(f"CharTokenizer: {ch!r} is not in the alphabet; add it to the alphabet")
            out.append(i + 2)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text: pad dropped, EOS written ``<eos>``, an id past the alphabet ``<?>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == PAD_ID:
                continue
            out.append("<eos>" if i == EOS_ID else self.alphabet[i - 2] if i - 2 < len(self.alphabet) else "<?>")
        return "".join(out)
