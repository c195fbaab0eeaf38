"""Token-level PPO (language-model style) as pure functions (docs/conventions.md, "Token-level PPO").

The same PPO, on sequences: the state is prompt + tokens so far, the action is the
next token. Everything here is a thin layer that puts token data into the shape
``gae.py`` and ``losses.py`` expect; the GAE recursion and the clipped losses are
those modules' code, not copies.

Layout and conventions
----------------------
* A batch is ``tokens [B, L]``: a (left-padded) prompt followed by a (right-padded)
  response. ``mask [B, L]`` (bool, or integer; floats are refused) marks the valid RESPONSE tokens, i.e. the actions
  (the EOS token, when generated, is an action and is valid; prompt and padding are not).
* Per-token quantities are ALIGNED to the token they are about: ``x[:, t]`` concerns
  the action ``tokens[:, t]``, taken in state ``tokens[:, :t]``. A causal model's output
  at position ``t - 1`` is what scores token ``t``, so :func:`token_logprobs` and
  :func:`shift_right` move model outputs one step right (column 0 is never an action).
* Time is axis 1 here (``[B, L]``); :func:`token_gae` transposes to the ``[L, B]``
  time-leading layout of ``gae.py`` and back.
* Masked slots are cleaned with ``where`` BEFORE any arithmetic, so NaN/inf stored in
  padding (old log-probs, values, advantages, returns) changes neither the loss nor its
  gradient.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo.stages import gae as gae_lib
from purejaxppo.stages import losses as losses_lib
from purejaxppo.stages.distributions import categorical_entropy, categorical_log_prob
from purejaxppo.stages.shapes import check_mask, check_rank, same_shape

# Re-exported so token code has one import; same function, token-mean over valid slots.
masked_mean = losses_lib.masked_mean

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")


def cleaned(x: jax.Array, mask: jax.Array, fill=0.0) -> jax.Array:
    """``x`` with ``fill`` on its masked slots, before any arithmetic (NaN there changes nothing)."""
    return jnp.where(mask, x, jnp.asarray(fill, x.dtype))


def masked_whiten(x: jax.Array, mask: Optional[jax.Array] = None, eps: float = 1e-8) -> jax.Array:
    """``(x - mean) / (std + eps)`` over the valid entries (``losses.normalize``).

    Args:
      x: ``[B, L]``; mask: ``[B, L]`` bool, or None (every entry valid); eps: scalar.
    Returns:
      ``[B, L]``, 0 on masked entries.
    """
    return losses_lib.normalize(x, mask, eps)


# --- alignment --------------------------------------------------------------------------
def shift_right(x: jax.Array, fill=0.0) -> jax.Array:
    """Aligns a causal model's per-position output (e.g. the value head, ``V`` of the prefix
    ending at position ``t-1``) with the token it precedes.

    Args:
      x: ``[B, L, ...]``; fill: the value of column 0.
    Returns:
      ``[B, L, ...]``, ``out[:, t] = x[:, t-1]``, ``out[:, 0] = fill``.
    """
    pad = jnp.full_like(x[:, :1], fill)
    return jnp.concatenate([pad, x[:, :-1]], axis=1)


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """Log-probs of the given tokens from ONE teacher-forced causal pass.

    Args:
      logits: ``[B, L, V]``; ``logits[:, t]`` is the model's prediction after reading
        ``tokens[:, :t+1]`` (causal mask).
      tokens: ``[B, L]`` ints.
    Returns:
      ``[B, L]`` with ``out[:, t] = log p(tokens[:, t] | tokens[:, :t])`` (``log_softmax``,
      stable) and ``out[:, 0] = 0``. Mask the result with the response mask.
    """
    logp = categorical_log_prob(logits[:, :-1], tokens[:, 1:])
    return jnp.concatenate([jnp.zeros_like(logp[:, :1]), logp], axis=1)


def token_entropy(logits: jax.Array) -> jax.Array:
    """The entropy of each token's distribution, aligned like :func:`token_logprobs`.

    Args:
      logits: ``[B, L, V]``, one teacher-forced causal pass.
    Returns:
      ``[B, L]``; ``out[:, t]`` the entropy of the law token ``t`` is drawn from, ``out[:, 0] = 0``.
    """
    return shift_right(categorical_entropy(logits))


def last_valid_mask(mask: jax.Array) -> jax.Array:
    """The last valid slot of each row.

    Args:
      mask: ``[B, L]`` bool or integer.
    Returns:
      ``[B, L]`` bool, True only at each row's last valid slot (nowhere in an empty row).
    """
    mask = mask.astype(bool)
    length = mask.shape[1]
    last = length - 1 - jnp.argmax(mask[:, ::-1], axis=1)
    return (jnp.arange(length)[None, :] == last[:, None]) & jnp.any(mask, axis=1, keepdims=True)


# --- KL and rewards ---------------------------------------------------------------------
def kl_penalty(logp: jax.Array, logp_ref: jax.Array, kind: str = "k1", mask: Optional[jax.Array] = None) -> jax.Array:
    """Per-token estimate of ``KL(pi || pi_ref)`` from the sampled token's log-probs.

    With ``d = logp - logp_ref`` (tokens sampled from ``pi``):
    ``k1 = d`` (unbiased, can be negative), ``k2 = d^2 / 2``, ``k3 = exp(-d) - 1 + d``
    (unbiased, >= 0; computed as ``expm1(-d) + d`` for small ``d``), ``abs = |d|``.

    Args:
      logp, logp_ref: ``[B, L]``, the policy's and the reference's log-probs of the tokens.
      kind: one of :data:`KL_ESTIMATORS`.
      mask: optional ``[B, L]``; masked slots are cleaned first.
    Returns:
      ``[B, L]``, 0 on masked slots.
    Raises:
      ValueError: an unknown ``kind``.
    """
    shape = same_shape("kl_penalty", "logp", {"logp": logp, "logp_ref": logp_ref})
    check_mask("kl_penalty", mask, shape)
    if mask is not None:
        mask = mask.astype(bool)
        logp, logp_ref = cleaned(logp, mask), cleaned(logp_ref, mask)
    d = logp - logp_ref
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        return jnp.expm1(-d) + d
    if kind == "abs":
        return jnp.abs(d)
    raise ValueError(f"kl_penalty: unknown kind {kind!r}; use one of {KL_ESTIMATORS}")


def sequence_kl(kl: jax.Array, mask: jax.Array) -> jax.Array:
    """The KL of each sequence: the per-token estimates summed over its valid tokens.

    Args:
      kl: ``[B, L]`` per-token estimates (:func:`kl_penalty`); mask: ``[B, L]``.
    Returns:
      ``[B]``.
    """
    check_rank("sequence_kl", "kl", kl, 2, "[B, L]")
    check_mask("sequence_kl", mask, jnp.shape(kl))
    mask = mask.astype(bool)
    return jnp.sum(cleaned(kl, mask), axis=1)


def shaped_rewards(score: jax.Array, kl: jax.Array, mask: jax.Array, beta) -> jax.Array:
    """RLHF rewards ``[B, L]``: ``-beta * kl_t`` on every valid response token, plus the
    task ``score [B]`` on the LAST valid response token; prompt and padding get 0.

    A sequence's rewards sum to ``score - beta * sum_t kl_t`` (a row with no valid token gets
    nothing, not its score).

    Args:
      score: ``[B]``; kl: ``[B, L]`` per-token estimates; mask: ``[B, L]`` the response tokens.
      beta: a scalar or ``[B]``; may be traced.
    Returns:
      ``[B, L]`` float rewards, 0 off ``mask``.
    """
    check_rank("shaped_rewards", "kl", kl, 2, "[B, L]")
    check_mask("shaped_rewards", mask, jnp.shape(kl))
    if tuple(jnp.shape(score)) != tuple(jnp.shape(kl)[:1]):
        raise ValueError(
            f"shaped_rewards: score has shape {tuple(jnp.shape(score))}, expected "
            f"{tuple(jnp.shape(kl)[:1])} (one score per sequence, [B])"
        )
    mask = mask.astype(bool)
    beta = jnp.asarray(beta)
    if beta.ndim == 1:
        beta = beta[:, None]
    rewards = -beta * cleaned(kl, mask)
    rewards = rewards + jnp.where(last_valid_mask(mask), score[:, None], 0.0)
    return cleaned(rewards, mask)


# --- advantages -------------------------------------------------------------------------
def _next_valid(values: jax.Array, mask: jax.Array) -> jax.Array:
    """``out[:, t]`` = value at the next valid slot after ``t`` (0 if none). ``[B, L]``."""

    def step(carry, x):
        v, m = x
        return jnp.where(m, v, carry), carry

    _, nxt = jax.lax.scan(step, jnp.zeros_like(values[:, 0]), (values.T, mask.T), reverse=True)
    return nxt.T


def token_gae(rewards: jax.Array, values: jax.Array, mask: jax.Array, gamma, gae_lambda) -> tuple[jax.Array, jax.Array]:
    """Masked GAE over response tokens only: ``(advantages [B, L], returns [B, L])``.

    ``values[:, t]`` is ``V(tokens[:, :t])`` (aligned, see :func:`shift_right`). The
    next state of a valid token is the next VALID slot (so a mask with holes, e.g.
    interleaved non-action tokens, still chains correctly); the last valid token is
    ``terminated`` (the score is its terminal reward; nothing is bootstrapped). Runs
    ``gae.gae(..., mask=...)`` right to left.

    Args:
      rewards, values: ``[B, L]`` (aligned); mask: ``[B, L]`` the response tokens.
      gamma, gae_lambda: scalars; may be traced.
    Returns:
      ``(advantages [B, L], returns [B, L])``, ``A = R = 0`` on masked slots.
    """
    shape = same_shape("token_gae", "rewards", {"rewards": rewards, "values": values})
    check_rank("token_gae", "rewards", rewards, 2, "[B, L]")
    check_mask("token_gae", mask, shape)
    mask = mask.astype(bool)
    rewards, values = cleaned(rewards, mask), cleaned(values, mask)
    next_values = _next_valid(values, mask)
    terminated = last_valid_mask(mask)
    adv, ret = gae_lib.gae(
        rewards.T, values.T, next_values.T, terminated.T, jnp.zeros_like(terminated.T), gamma, gae_lambda, mask=mask.T
    )
    return adv.T, ret.T


def discounted_returns(rewards: jax.Array, mask: jax.Array, gamma) -> jax.Array:
    """Each valid token's return ``R_t = sum_{s >= t} gamma^(s - t) r_s`` over the valid tokens
    from it on (REINFORCE's, no critic): :func:`token_gae` with zero values and ``lambda = 1``.

    Args:
      rewards: ``[B, L]`` (e.g. :func:`shaped_rewards`); mask: ``[B, L]`` the response tokens.
      gamma: scalar; may be traced.
    Returns:
      ``[B, L]``, 0 on masked slots.
    """
    return token_gae(rewards, jnp.zeros_like(rewards), mask, gamma, 1.0)[1]


def overlong_penalty(lengths: jax.Array, max_new_tokens: int, buffer: int, factor) -> jax.Array:
    """DAPO's soft overlong punishment (Yu et al. 2025) of responses ``lengths`` tokens long: 0 up
    to ``max_new_tokens - buffer`` tokens, then falling linearly to ``-factor`` at
    ``max_new_tokens``: ``min(-(n - (T - buffer)) / buffer * factor, 0)``.

    Args:
      lengths: ``[B]`` response lengths in tokens (the stop token counted).
      max_new_tokens: ``T``, the response budget; buffer: the ramp's length in tokens (> 0;
        one longer than ``T`` counts as ``T``); all static.
      factor: the penalty at the budget; may be traced.
    Returns:
      ``[B]`` float32, ``<= 0``: added to the sequence scores.
    """
    buffer = min(buffer, max_new_tokens)
    if buffer <= 0:
        raise ValueError(f"overlong_penalty: buffer={buffer} must be > 0")
    excess = lengths.astype(jnp.float32) - (max_new_tokens - buffer)
    return jnp.minimum(-excess / buffer * factor, 0.0)


def adaptive_kl_update(beta, kl, target, n_steps, horizon):
    """Ziegler et al. (2019) proportional controller, pure and traceable.

    ``e = clip(KL / target - 1, -0.2, 0.2)``; ``beta <- beta * (1 + e * n_steps / horizon)``.
    ``kl`` is the measured KL per sequence (mean over the batch), ``n_steps`` the
    number of samples in the batch.

    Args:
      beta, kl, target, n_steps, horizon: scalars; all may be traced, so updating ``beta``
        inside a jitted step never recompiles.
    Returns:
      The next ``beta``, a scalar.
    """
    e = jnp.clip(kl / target - 1.0, -0.2, 0.2)
    return beta * (1.0 + e * n_steps / horizon)
