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

import numbers
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
AGGREGATIONS = ("token-mean", "seq-mean", "token-sum-norm")
IMPORTANCE_LEVELS = ("token", "sequence")


def _clean(x: jax.Array, mask: jax.Array, fill=0.0) -> jax.Array:
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
        logp, logp_ref = _clean(logp, mask), _clean(logp_ref, mask)
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
    return jnp.sum(_clean(kl, mask), axis=1)


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
    rewards = -beta * _clean(kl, mask)
    rewards = rewards + jnp.where(last_valid_mask(mask), score[:, None], 0.0)
    return _clean(rewards, mask)


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
    rewards, values = _clean(rewards, mask), _clean(values, mask)
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


# --- losses -----------------------------------------------------------------------------
def aggregation_weights(
    mask: jax.Array, aggregation: str = "token-mean", max_new_tokens: Optional[int] = None
) -> Optional[jax.Array]:
    """Per-token weights turning a token-mean into the requested aggregation.

    ``token-mean``: None (every valid token of the batch counts once).
    ``seq-mean``: ``w_bt = N / (B' * n_b)`` on valid slots (``n_b`` valid tokens in row b,
    ``N`` in the batch, ``B'`` non-empty rows), so ``token_mean(w * x) = mean_b mean_t x``.
    ``token-sum-norm`` (Dr. GRPO, Liu et al. 2025): ``w_bt = N / (B * T)`` on valid slots
    (``B`` rows, empty ones too, ``T = max_new_tokens``), so ``token_mean(w * x) = sum_bt x /
    (B * T)``: a constant divisor, the same for a short response's tokens as a long one's.

    Args:
      mask: ``[B, L]``; aggregation: one of :data:`AGGREGATIONS`.
      max_new_tokens: ``T`` of ``token-sum-norm`` (static): the response budget, never the width
        a batch is cut to (:mod:`purejaxppo.lm.models.length_buckets`) nor ``L``.
    Returns:
      None (token-mean) or ``[B, L]`` float32 weights, 0 off ``mask``.
    Raises:
      ValueError: an unknown ``aggregation``, or ``token-sum-norm`` without ``max_new_tokens``.
    """
    if aggregation == "token-mean":
        return None
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    maskf = mask.astype(jnp.float32)
    if aggregation == "token-sum-norm":
        if max_new_tokens is None:
            raise ValueError("token-sum-norm divides by the rows x max_new_tokens: give max_new_tokens (the budget)")
        w = jnp.sum(maskf) / (mask.shape[0] * max_new_tokens)
        return jnp.where(mask.astype(bool), w, 0.0)
    n_b = jnp.sum(maskf, axis=1, keepdims=True)
    n_rows = jnp.maximum(jnp.sum(n_b > 0), 1)
    w = jnp.sum(maskf) / (n_rows * jnp.maximum(n_b, 1.0))
    return jnp.where(mask.astype(bool), w, 0.0)


def _concrete_zero(x) -> bool:
    """Whether ``x`` is a Python (not traced) number equal to 0, or None: a setting left off."""
    return x is None or (isinstance(x, numbers.Real) and x == 0)


def sequence_ratio_logprobs(logp_new: jax.Array, logp_old: jax.Array, mask: jax.Array) -> jax.Array:
    """``logp_new`` turned so the clipped loss's token ratio is GSPO's sequence ratio (Zheng et al.
    2025, its GSPO-token form): ``s_b = exp(mean_t (logp_new - logp_old))`` over row b's valid
    tokens in value, each token's gradient ``s_b * grad logp_new[b, t]``.

    The value is ``logp_old + sg(m_b)`` (``m_b`` the mean log ratio) and the gradient that of
    ``logp_new`` (``logp_new - sg(logp_new)``); with one advantage per sequence, the
    ``seq-mean`` of the clipped loss is GSPO's objective, gradient and all.

    Args:
      logp_new, logp_old: ``[B, L]``, cleaned; mask: ``[B, L]`` bool.
    Returns:
      ``[B, L]``, for ``logp_new``'s place in the clipped loss.
    """
    m = masked_mean(logp_new - logp_old, mask, axis=1)[:, None]
    return logp_old + jax.lax.stop_gradient(m) + (logp_new - jax.lax.stop_gradient(logp_new))


def dual_clip_logprobs(logp_new: jax.Array, logp_old: jax.Array, advantages: jax.Array, dual_clip) -> jax.Array:
    """``logp_new`` capped so the ratio of a negative-advantage token is at most ``dual_clip``
    (dual-clip PPO, Ye et al. 2020): the clipped loss of such a token,
    ``-A * max(r, 1 - eps)``, then becomes ``min(-A * max(r, 1 - eps), -dual_clip * A)``
    (``dual_clip > 1 > 1 - eps``) and carries no gradient past the cap.

    Args:
      logp_new, logp_old, advantages: ``[B, L]``, cleaned.
      dual_clip: scalar ``> 1``, or 0 (off; may be traced).
    Returns:
      ``[B, L]``, for ``logp_new``'s place in the clipped loss.
    """
    cap = logp_old + jnp.log(jnp.maximum(dual_clip, 1.0))
    on = advantages < 0
    if not isinstance(dual_clip, numbers.Real):  # traced: 0 keeps logp_new
        on = on & (dual_clip > 0)
    return jnp.where(on, jnp.minimum(logp_new, cap), logp_new)


def clip_range(advantages: jax.Array, clip_eps, clip_eps_high=None):
    """The clip range of each token for an asymmetric clip (DAPO's clip-higher): the ratio
    clipped to ``[1 - clip_eps, 1 + clip_eps_high]``.

    For ``A > 0`` only the upper bound can bind (``min(rA, clip(r) A) = A min(r, 1 + hi)``), for
    ``A < 0`` only the lower one, so the shared symmetric clip with ``clip_eps_high`` on the
    positive-advantage tokens and ``clip_eps`` elsewhere is the asymmetric clip.

    Args:
      advantages: ``[B, L]``; clip_eps: the low side; clip_eps_high: the high side (None or 0:
        ``clip_eps``); scalars, may be traced.
    Returns:
      ``clip_eps`` itself when there is no high side, else ``[B, L]``.
    """
    if _concrete_zero(clip_eps_high):
        return clip_eps
    high = clip_eps_high
    if not isinstance(clip_eps_high, numbers.Real):  # traced: 0 means clip_eps
        high = jnp.where(clip_eps_high > 0, clip_eps_high, clip_eps)
    return jnp.where(advantages > 0, high, clip_eps)


def token_ppo_loss(
    logp_new: jax.Array,
    entropy: jax.Array,
    values_new: jax.Array,
    logp_old: jax.Array,
    values_old: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    mask: jax.Array,
    *,
    clip_eps,
    vf_coef,
    ent_coef,
    vf_clip_eps=None,
    aggregation: str = "token-mean",
    clip_eps_high=None,
    dual_clip=None,
    importance_level: str = "token",
    max_new_tokens: Optional[int] = None,
) -> tuple[jax.Array, dict]:
    """Masked PPO loss over valid response tokens: ``losses.ppo_loss`` on ``[B, L]``.

    All inputs are ``[B, L]`` and aligned; ``mask [B, L]`` marks valid response tokens.
    Every input is cleaned on masked slots before any arithmetic. Advantages are used as
    given (whiten them with :func:`masked_whiten` first if wanted). The KL penalty lives
    in the rewards and is NOT added again here.

    ``aggregation="seq-mean"`` averages tokens within each sequence, then sequences.
    It reuses the token-mean losses exactly: the clipped surrogate and the entropy are
    positively homogeneous in ``A`` and ``H`` (scale them by ``w``), and the (clipped)
    squared value error scales by ``w`` when ``V, V_old, R`` and the value clip are
    scaled by ``sqrt(w)``. ``approx_kl``/``clip_frac`` diagnostics stay token-means.
    ``token-sum-norm`` is weighted the same way (:func:`aggregation_weights`).

    The loss family changes the shared clipped loss's inputs, never its formula:
    ``clip_eps_high`` gives each positive-advantage token the high clip range
    (:func:`clip_range`); ``importance_level="sequence"`` puts GSPO's sequence ratio in
    each token's place (:func:`sequence_ratio_logprobs`); ``dual_clip`` caps the ratio of the
    negative-advantage tokens (:func:`dual_clip_logprobs`). ``approx_kl`` and ``clip_frac`` then
    read the ratio the loss used. Left at their defaults they add no operation.

    Args:
      logp_new, entropy, values_new: ``[B, L]``, the current parameters' (gradients through
        them); logp_old, values_old, advantages, returns: ``[B, L]``, the batch's.
      mask: ``[B, L]``; clip_eps, vf_coef, ent_coef, vf_clip_eps (None: no value clip):
        scalars, may be traced; aggregation: one of :data:`AGGREGATIONS`.
      clip_eps_high: the clip range above 1 (None or 0: ``clip_eps``); dual_clip: the cap of a
        negative-advantage token's loss, in ``|A|`` (None or 0: off, else > 1); scalars, may
        be traced.
      importance_level: ``"token"`` or ``"sequence"`` (GSPO), static.
      max_new_tokens: the response budget, static; read by ``token-sum-norm`` only.
    Returns:
      ``(loss, metrics)``: the scalar loss and ``losses.ppo_loss``'s dict of scalars.
    """
    shape = same_shape(
        "token_ppo_loss",
        "logp_new",
        {
            "logp_new": logp_new,
            "entropy": entropy,
            "values_new": values_new,
            "logp_old": logp_old,
            "values_old": values_old,
            "advantages": advantages,
            "returns": returns,
        },
    )
    check_rank("token_ppo_loss", "logp_new", logp_new, 2, "[B, L]")
    check_mask("token_ppo_loss", mask, shape)
    mask = mask.astype(bool)
    logp_new, entropy, values_new, logp_old, values_old, advantages, returns = (
        _clean(x, mask) for x in (logp_new, entropy, values_new, logp_old, values_old, advantages, returns)
    )
    if importance_level == "sequence":
        logp_new = sequence_ratio_logprobs(logp_new, logp_old, mask)
    elif importance_level != "token":
        raise ValueError(f"unknown importance_level {importance_level!r}; use one of {IMPORTANCE_LEVELS}")
    if not _concrete_zero(dual_clip):
        logp_new = dual_clip_logprobs(logp_new, logp_old, advantages, dual_clip)
    clip_eps = clip_range(advantages, clip_eps, clip_eps_high)
    w = aggregation_weights(mask, aggregation, max_new_tokens)
    if w is not None:
        w = jax.lax.stop_gradient(w)
        sw = jnp.sqrt(w)
        advantages, entropy = advantages * w, entropy * w
        values_new, values_old, returns = values_new * sw, values_old * sw, returns * sw
        if vf_clip_eps is not None:
            vf_clip_eps = vf_clip_eps * sw
    return losses_lib.ppo_loss(
        logp_new,
        entropy,
        values_new,
        logp_old,
        values_old,
        advantages,
        returns,
        clip_eps=clip_eps,
        vf_coef=vf_coef,
        ent_coef=ent_coef,
        vf_clip_eps=vf_clip_eps,
        mask=mask,
    )


# --- adaptive KL coefficient ------------------------------------------------------------
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
