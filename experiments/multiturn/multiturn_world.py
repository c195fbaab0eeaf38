"""The guessing-game world of the multi-turn experiment: the tokenizer, the game, a tiny Llama,
the SFT transcripts and their training, the held-out evaluation and the interval helper.

A transcript is what a whole episode's response buffer holds: the game's intro, then per turn
the guess's digits and EOS (the model's action) and the feedback text (the game's observation).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from purejaxppo.lm import (
    CharTokenizer,
    EpisodeConfig,
    FlaxLM,
    GuessNumber,
    Llama,
    LlamaConfig,
    run_episode,
    token_logprobs,
)

ALPHABET = "0123456789 abcdefghilmnorstuwGN.\n"
TOK = CharTokenizer(ALPHABET)
#: the one-token prompt before the game's intro
PROMPT_TEXT = "\n"
#: the game's observations, in GuessNumber's feedback order (higher, lower, correct, invalid)
FEEDBACK = (" higher\n", " lower\n", " correct\n", " no number\n")
HIGHER, LOWER, CORRECT = 0, 1, 2
#: two-sided 97.5% Student t quantiles by degrees of freedom (1..10), for the 95% interval
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def make_env(hi: int, max_turns: int) -> GuessNumber:
    """The game: a secret in ``1..hi``, the range stated in the intro, ``max_turns`` guesses."""
    return GuessNumber.from_tokenizer(
        TOK, lo=1, hi=hi, max_turns=max_turns, intro=f"Guess 1 to {hi}.\n", texts=FEEDBACK
    )


def turn_tokens(hi: int) -> int:
    """An action's token budget: the digits of ``hi`` and the EOS."""
    return len(str(hi)) + 1


def budget(env: GuessNumber, max_turns: int, hi: int) -> int:
    """The response buffer that holds the intro and ``max_turns`` whole turns (the episode's
    budget rule reserves ``turn_tokens + obs_width`` slots per turn)."""
    return env.obs_width + max_turns * (turn_tokens(hi) + env.obs_width)


def make_model(width: int, layers: int, positions: int, key) -> tuple:
    """``(FlaxLM(Llama), params)``: a tiny Llama (GQA: ``width // 8`` heads, half as many
    key/value heads, tied head) over the character vocabulary."""
    heads = max(2, width // 8)
    cfg = LlamaConfig(
        model_type="llama",
        vocab_size=TOK.vocab_size,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        head_dim=width // heads,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
    )
    module = Llama(cfg)
    params = jax.jit(module.init)(key, jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), bool))
    return FlaxLM(module), params


def feedback_kind(guess: int, secret: int) -> int:
    """HIGHER when the secret is above the guess, LOWER when below, CORRECT on it."""
    return HIGHER if guess < secret else LOWER if guess > secret else CORRECT


def bisection_guesses(secret: int, lo: int, hi: int) -> list:
    """The guesses of bisection (``(lo + hi) // 2`` of the interval still possible) until the
    secret: ``[(guess, kind), ...]``, the last kind CORRECT."""
    out = []
    while True:
        g = (lo + hi) // 2
        k = feedback_kind(g, secret)
        out.append((g, k))
        if k == CORRECT:
            return out
        lo, hi = (g + 1, hi) if k == HIGHER else (lo, g - 1)


def consistent_guesses(secret: int, lo: int, hi: int, rng: np.random.Generator, max_turns: int) -> list:
    """Guesses drawn uniformly from the interval still possible (each consistent with the
    feedback so far, not the best one), at most ``max_turns``: ``[(guess, kind), ...]``."""
    out = []
    while len(out) < max_turns:
        g = int(rng.integers(lo, hi + 1))
        k = feedback_kind(g, secret)
        out.append((g, k))
        if k == CORRECT:
            break
        lo, hi = (g + 1, hi) if k == HIGHER else (lo, g - 1)
    return out


def transcript_ids(guesses: list, hi: int) -> tuple:
    """``(ids, action)``: the episode's tokens (intro, then each guess's digits + EOS and its
    feedback) and a same-length list of bools, True on the model's tokens."""
    ids = TOK.encode(f"Guess 1 to {hi}.\n")
    action = [False] * len(ids)
    for g, k in guesses:
        guess = TOK.encode(str(g)) + [TOK.stop_ids[0]]
        obs = TOK.encode(FEEDBACK[k])
        ids += guess + obs
        action += [True] * len(guess) + [False] * len(obs)
    return ids, action


def sft_batch(n: int, hi: int, max_turns: int, width: int, seed: int, bisect_share: float) -> tuple:
    """``n`` transcripts (random secrets; a ``bisect_share`` of them bisection, the rest
    consistent random guesses), right-padded to ``width``: ``(tokens [n, W], valid, action)``."""
    rng = np.random.default_rng(seed)
    toks = np.full((n, width), TOK.pad_id, np.int32)
    valid, action = np.zeros((n, width), bool), np.zeros((n, width), bool)
    for i in range(n):
        s = int(rng.integers(1, hi + 1))
        if rng.random() < bisect_share:
            gs = bisection_guesses(s, 1, hi)[:max_turns]
        else:
            gs = consistent_guesses(s, 1, hi, rng, max_turns)
        ids, act = transcript_ids(gs, hi)
        toks[i, : len(ids)], valid[i, : len(ids)], action[i, : len(ids)] = ids, True, act
    return toks, valid, action


def prompt_batch(n: int) -> tuple:
    """``(prompt [n, 1], prompt_valid [n, 1])``: the one-token prompt."""
    p = jnp.full((n, 1), TOK.encode(PROMPT_TEXT)[0], jnp.int32)
    return p, jnp.ones((n, 1), bool)


def train_sft(lm, params, data: tuple, steps: int, batch: int, lr: float, seed: int) -> tuple:
    """``steps`` Adam steps of next-token NLL on the transcripts' ACTION tokens only (the
    feedback is context, as in RL), one compiled scan. Returns ``(params, losses [steps])``."""
    toks, valid, action = (jnp.asarray(x) for x in data)
    prompt, pvalid = prompt_batch(batch)
    opt = optax.adam(lr)

    def loss_fn(p, idx):
        seq = jnp.concatenate([prompt, toks[idx]], axis=1)
        ok = jnp.concatenate([pvalid, valid[idx]], axis=1)
        target = jnp.concatenate([jnp.zeros_like(pvalid), action[idx]], axis=1)
        logp = token_logprobs(lm.logits(p, seq, ok), seq)
        return -jnp.sum(logp * target) / jnp.sum(target)

    def step(carry, k):
        p, s = carry
        idx = jax.random.randint(k, (batch,), 0, toks.shape[0])
        loss, g = jax.value_and_grad(loss_fn)(p, idx)
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), loss

    run = jax.jit(lambda p, key: jax.lax.scan(step, (p, opt.init(p)), jax.random.split(key, steps)))
    (params, _), losses = run(params, jax.random.PRNGKey(seed))
    return params, losses


class EvalResult(NamedTuple):
    solve_rate: float  # share of episodes ended by the correct guess
    turns_to_solve: float  # mean turns of the solved episodes (nan: none solved)
    invalid_rate: float  # share of turns whose action held no number


def make_evaluator(lm, env: GuessNumber, cfg: EpisodeConfig, episodes: int, seed: int):
    """``stats(params) -> (solve_rate, turns_to_solve, invalid_rate)`` float32 scalars (pure:
    ``jax.vmap`` it over stacked seeds; :func:`evaluate` for one as an :class:`EvalResult`):
    ``episodes`` episodes with FIXED keys (one per row, from ``seed``), every secret equally
    often (row ``i`` plays ``1 + i % hi``)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    prompt, pvalid = prompt_batch(episodes)
    rows = jnp.arange(episodes, dtype=jnp.int32)
    invalid = TOK.encode(FEEDBACK[3])[1]  # " no number": no other feedback has an 'n' second

    def stats(params):
        ep = run_episode(lm, params, env, keys, prompt, pvalid, rows, cfg)
        solved = ep.terminated.astype(jnp.float32)
        turns = ep.turns.astype(jnp.float32)
        # a parse failure's observation: its first slot follows an action's last, its second is 'n'
        starts = ep.action_mask[:, :-2] & ~ep.action_mask[:, 1:-1] & (ep.tokens[:, 2:] == invalid)
        return jnp.mean(solved), jnp.sum(turns * solved) / jnp.sum(solved), jnp.sum(starts) / jnp.sum(turns)

    return stats


def evaluate(stats, params) -> EvalResult:
    """One model's :class:`EvalResult` from :func:`make_evaluator`'s ``stats``."""
    return EvalResult(*(float(x) for x in jax.jit(stats)(params)))


def t_interval(values) -> tuple:
    """``(mean, half-width)`` of the 95% Student t interval over the values (the seeds);
    half-width 0 for one value, nan when a value is nan."""
    x = np.asarray(values, np.float64)
    n = len(x)
    if n == 0:
        raise ValueError("t_interval: no values; give at least one")
    m = float(np.mean(x))
    if n == 1:
        return m, 0.0
    if n - 1 > len(T975):
        raise ValueError(f"t_interval: {n} values; the table holds up to {len(T975) + 1}")
    return m, T975[n - 2] * float(np.std(x, ddof=1)) / math.sqrt(n)
