"""The clipped PPO loss of token-level training, and the loss family's changes to it
(:func:`token_ppo_loss`): asymmetric clip (DAPO's clip-higher), dual clip for negative
advantages, GSPO's sequence-level ratio, and the aggregations (token-mean, sequence-mean of
token-means, Dr. GRPO's token sum over a constant). The layout is :mod:`purejaxppo.lm.ppo.token_stages`'s
(``[B, L]``, values aligned to the token they are about, masked slots cleaned first); the
clipped loss itself is :mod:`purejaxppo.stages.losses`', not a copy.
"""

from __future__ import annotations

import numbers
from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo.lm.ppo.token_stages import cleaned, masked_mean
from purejaxppo.stages import losses as losses_lib
from purejaxppo.stages.shapes import check_mask, check_rank, same_shape

AGGREGATIONS = ("token-mean", "seq-mean", "token-sum-norm")
IMPORTANCE_LEVELS = ("token", "sequence")


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
        cleaned(x, mask) for x in (logp_new, entropy, values_new, logp_old, values_old, advantages, returns)
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
