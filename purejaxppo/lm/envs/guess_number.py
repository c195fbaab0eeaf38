"""A number-guessing game in pure JAX (a :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv`):
the secret is an integer in ``[lo, hi]``; each turn the model writes a guess and sees
``higher``, ``lower`` or ``correct`` (or a parse-failure message).

Tokenization contract. The guess is read from the action's DIGIT TOKENS: the environment is
given the ten ids of the digits ``0``-``9`` (:meth:`GuessNumber.from_tokenizer` encodes them and
refuses a tokenizer where a digit is not exactly one token; or give ``digit_ids`` yourself). The
number is the first maximal run of consecutive digit tokens among the action's valid tokens
(any other token, the stop token included, ends it): ``"I say 42<eos>"`` reads 42. An action
with no digit, or a run of more than :data:`MAX_DIGITS` digits, is a parse failure: the
``invalid`` observation, no reward, the turn counted. A tokenizer that merges several digits
into one token (many BPEs) does not meet the contract; a character-level one
(:class:`~purejaxppo.lm.envs.char_tokenizer.CharTokenizer`) or a BPE that splits digits does.

Rewards and ends: 1 on the correct guess (``terminated``), 0 otherwise; ``truncated`` after
``max_turns`` guesses without it. The secret: ``lo + row % (hi - lo + 1)`` for a row id ``>= 0``
(a fixed table of games), drawn uniformly from the reset key for ``row < 0``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from purejaxppo.lm.envs.jax_env import EnvStep

#: the longest number read (int32 holds 9 digits)
MAX_DIGITS = 9
#: the observations' order in ``feedback``
FEEDBACK = ("higher", "lower", "correct", "invalid")
HIGHER, LOWER, CORRECT, INVALID = range(4)
#: the default observation texts, in :data:`FEEDBACK` order
FEEDBACK_TEXTS = (" higher\n", " lower\n", " correct\n", " no number\n")


class GuessState(NamedTuple):
    secret: jax.Array  # int32 scalar
    guesses: jax.Array  # int32 scalar: the turns taken


def parse_number(action: jax.Array, length, digit_ids) -> tuple[jax.Array, jax.Array]:
    """The first run of digit tokens among ``action[:length]``.

    Args:
      action: ``[A]`` int token ids; length: int32 scalar; digit_ids: the 10 digit ids.
    Returns:
      ``(ok bool, value int32)``: ``ok`` False when no digit is there or the run is longer than
      :data:`MAX_DIGITS` (``value`` then 0).
    """
    a = action.shape[0]
    idx = jnp.arange(a)
    match = action[:, None] == jnp.asarray(digit_ids, action.dtype)[None, :]
    is_digit = jnp.any(match, axis=1) & (idx < length)
    digit = jnp.argmax(match, axis=1).astype(jnp.int32)
    first = jnp.argmax(is_digit)
    after = idx >= first
    breaks = after & ~is_digit
    end = jnp.where(jnp.any(breaks), jnp.argmax(breaks), a)
    run = after & (idx < end)
    ok = jnp.any(is_digit) & (end - first <= MAX_DIGITS)
    power = jnp.clip(end - 1 - idx, 0, MAX_DIGITS - 1)
    value = jnp.sum(jnp.where(run & ok, digit * (10**power).astype(jnp.int32), 0))
    return ok, value.astype(jnp.int32)


def _table(seqs, width: int, pad: int) -> tuple[jax.Array, jax.Array]:
    ids = [list(s) + [pad] * (width - len(s)) for s in seqs]
    return jnp.asarray(ids, jnp.int32), jnp.asarray([len(s) for s in seqs], jnp.int32)


@dataclasses.dataclass(frozen=True)
class GuessNumber:
    """The guessing game (frozen, hashable: a static ``jit`` argument).

    Attributes:
      digit_ids: the ids of ``"0"`` .. ``"9"``, in order.
      intro: the reset observation's ids (e.g. "Guess a number from 1 to 100.").
      feedback: four id tuples, the observations in :data:`FEEDBACK` order.
      lo, hi: the secret's range, inclusive.
      max_turns: guesses before the episode is truncated.
      pad_id: fills the observation buffers past their lengths.
    """

    digit_ids: tuple
    intro: tuple
    feedback: tuple
    lo: int = 1
    hi: int = 100
    max_turns: int = 8
    pad_id: int = 0

    def __post_init__(self):
        if len(self.digit_ids) != 10 or len(set(self.digit_ids)) != 10:
            raise ValueError("GuessNumber: digit_ids must be the 10 distinct ids of '0'..'9', in order")
        if len(self.feedback) != len(FEEDBACK):
            raise ValueError(f"GuessNumber: feedback must hold {len(FEEDBACK)} id tuples, in the order {FEEDBACK}")
        if not (0 <= self.lo <= self.hi < 10**MAX_DIGITS) or self.max_turns < 1:
            raise ValueError(f"GuessNumber: need 0 <= lo <= hi < 10**{MAX_DIGITS} and max_turns >= 1")

    @classmethod
    def from_tokenizer(cls, tokenizer, lo: int = 1, hi: int = 100, max_turns: int = 8, intro=None, texts=None):
        """The game with its ids from ``tokenizer`` (``encode(text) -> ids``, ``pad_id``).

        Args:
          tokenizer: e.g. a :class:`~purejaxppo.lm.envs.char_tokenizer.CharTokenizer`.
          lo, hi, max_turns: as the attributes.
          intro: the reset text (default: ``"Guess a number from {lo} to {hi}.\\n"``).
          texts: the four observation texts in :data:`FEEDBACK` order (default
            :data:`FEEDBACK_TEXTS`).
        Returns:
          A :class:`GuessNumber`.
        Raises:
          ValueError: a digit that does not encode to exactly one token (the contract above).
        """
        digits = []
        for d in "0123456789":
            ids = list(tokenizer.encode(d))
            if len(ids) != 1:
                raise ValueError(
                    f"GuessNumber reads digits as single tokens, but {d!r} encodes to {ids}; use a "
                    "character-level tokenizer or one that splits digits (or give digit_ids)"
                )
            digits.append(int(ids[0]))
        intro = f"Guess a number from {lo} to {hi}.\n" if intro is None else intro
        feedback = tuple(tuple(tokenizer.encode(t)) for t in (texts or FEEDBACK_TEXTS))
        return cls(tuple(digits), tuple(tokenizer.encode(intro)), feedback, lo, hi, max_turns, tokenizer.pad_id)

    @property
    def obs_width(self) -> int:
        """``O``: the longest of the intro and the feedback texts."""
        return max(len(self.intro), *(len(f) for f in self.feedback))

    def reset(self, key, row):
        """``(GuessState, obs [O] int32, length int32)``: the secret from ``row`` (``>= 0``) or
        ``key``; the intro as the observation."""
        span = self.hi - self.lo + 1
        drawn = jax.random.randint(key, (), self.lo, self.hi + 1, jnp.int32)
        secret = jnp.where(row >= 0, self.lo + jnp.mod(row, span), drawn).astype(jnp.int32)
        obs, length = _table([self.intro], self.obs_width, self.pad_id)
        return GuessState(secret, jnp.zeros((), jnp.int32)), obs[0], length[0]

    def step(self, key, state: GuessState, action, length) -> EnvStep:
        """The guess in ``action[:length]`` judged: :class:`~purejaxppo.lm.envs.jax_env.EnvStep`
        with the feedback observation, reward 1 and ``terminated`` on the secret, ``truncated``
        at ``max_turns`` guesses."""
        ok, value = parse_number(action, length, self.digit_ids)
        kind = jnp.where(
            ~ok, INVALID, jnp.where(value < state.secret, HIGHER, jnp.where(value > state.secret, LOWER, CORRECT))
        )
        guesses = state.guesses + 1
        correct = kind == CORRECT
        table, lengths = _table(self.feedback, self.obs_width, self.pad_id)
        return EnvStep(
            GuessState(state.secret, guesses),
            table[kind],
            lengths[kind],
            correct.astype(jnp.float32),
            correct,
            ~correct & (guesses >= self.max_turns),
        )
