"""The number-guessing game: parsing, feedback, rewards and ends against a Python reference."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
from purejaxppo.lm.envs.guess_number import FEEDBACK_TEXTS, GuessNumber, GuessState, parse_number

TOK = CharTokenizer("0123456789 abcdefghilmnorstuwGN.\n")
GAME = GuessNumber.from_tokenizer(TOK, lo=1, hi=100, max_turns=3)


def reference_parse(text: str):
    """The first run of digits in the text, or None (none, or more than 9 digits)."""
    m = re.search(r"\d+", text)
    return None if m is None or len(m.group()) > 9 else int(m.group())


def test_parse_matches_regex_on_random_actions():
    rng = np.random.default_rng(0)
    parse = jax.jit(jax.vmap(lambda a, n: parse_number(a, n, GAME.digit_ids)))
    pieces = list("0123456789") * 3 + list(" ab.") + [TOK.decode([1])]
    texts = ["".join(rng.choice(pieces, size=rng.integers(1, 13))) for _ in range(400)]
    texts += ["12345678901", "007", "a", "9" * 9]
    width = 14
    ids = np.zeros((len(texts), width), np.int32)
    lengths = np.zeros(len(texts), np.int32)
    for i, t in enumerate(texts):
        enc = [1 if piece == "<eos>" else TOK.encode(piece)[0] for piece in re.findall(r"<eos>|.", t, re.S)]
        ids[i, : len(enc)], lengths[i] = enc, len(enc)
        ids[i, len(enc) :] = TOK.encode("7")[0]  # digits past the length must not be read
    ok, value = (np.asarray(x) for x in parse(jnp.asarray(ids), jnp.asarray(lengths)))
    for i, t in enumerate(texts):
        want = reference_parse(t.replace("<eos>", " "))
        assert (bool(ok[i]), int(value[i])) == (want is not None, want or 0), t


def feedback_of(obs, length) -> str:
    return TOK.decode(np.asarray(obs)[: int(length)])


@pytest.mark.parametrize("guess,secret,kind", [("50", 73, 0), ("99", 73, 1), ("73", 73, 2), ("no", 73, 3)])
def test_step_feedback_reward_and_ends(guess, secret, kind):
    action = jnp.asarray(TOK.encode(guess + "  "), jnp.int32)
    st = GAME.step(jax.random.PRNGKey(0), GuessState(jnp.int32(secret), jnp.int32(0)), action, jnp.int32(len(guess)))
    assert feedback_of(st.obs, st.length) == FEEDBACK_TEXTS[kind]
    assert float(st.reward) == (1.0 if kind == 2 else 0.0)
    assert bool(st.terminated) == (kind == 2) and not bool(st.truncated)
    assert int(st.state.guesses) == 1


def test_truncated_at_max_turns_without_the_secret():
    state = GuessState(jnp.int32(5), jnp.int32(GAME.max_turns - 1))
    wrong = GAME.step(jax.random.PRNGKey(0), state, jnp.asarray(TOK.encode("4"), jnp.int32), jnp.int32(1))
    right = GAME.step(jax.random.PRNGKey(0), state, jnp.asarray(TOK.encode("5"), jnp.int32), jnp.int32(1))
    assert bool(wrong.truncated) and not bool(wrong.terminated)
    assert bool(right.terminated) and not bool(right.truncated)


def test_reset_secret_from_row_or_key():
    keys = jax.random.split(jax.random.PRNGKey(1), 300)
    drawn = jax.vmap(GAME.reset)(keys, jnp.full((300,), -1, jnp.int32))[0].secret
    drawn = np.asarray(drawn)
    assert drawn.min() >= 1 and drawn.max() <= 100 and len(set(drawn.tolist())) > 50
    state, obs, length = GAME.reset(keys[0], jnp.int32(250))
    assert int(state.secret) == 1 + 250 % 100
    assert feedback_of(obs, length) == "Guess a number from 1 to 100.\n"


class MergedDigits:
    """A tokenizer whose digits are two ids each: outside the game's contract."""

    pad_id = 0

    def encode(self, text):
        return [5, 6] * len(text)


def test_tokenizer_without_single_digit_tokens_is_refused():
    with pytest.raises(ValueError, match="single tokens"):
        GuessNumber.from_tokenizer(MergedDigits())
    with pytest.raises(ValueError, match="10 distinct"):
        GuessNumber(tuple(range(9)), (1,), ((1,),) * 4)
