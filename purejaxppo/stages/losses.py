"""PPO losses (to minimise) as pure functions (docs/conventions.md, "Losses").

Every function takes arrays of one common batch shape ``[...]`` (``[N]`` for a
minibatch of transitions, ``[B, L]`` for tokens) and an optional ``mask`` of that
shape. With a mask, the mean is over valid entries only and masked inputs are cleaned
with ``where`` BEFORE any arithmetic, so NaN/inf in padding cannot leak into the loss
or its gradient.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo.stages.shapes import check_mask, same_shape


def masked_mean(x: jax.Array, mask: Optional[jax.Array] = None, axis=None) -> jax.Array:
    """Mean of ``x`` over valid entries (all entries when ``mask`` is None)."""
    if mask is None:
        return jnp.mean(x, axis=axis)
    check_mask("masked_mean", mask, jnp.shape(x))
    mask = mask.astype(bool)
    total = jnp.sum(jnp.where(mask, x, 0.0), axis=axis)
    return total / jnp.maximum(jnp.sum(mask, axis=axis), 1)


def normalize(x: jax.Array, mask: Optional[jax.Array] = None, eps: float = 1e-8) -> jax.Array:
    """``(x - mean) / (std + eps)`` over valid entries; masked entries become 0."""
    mean = masked_mean(x, mask)
    centred = x - mean if mask is None else jnp.where(mask, x - mean, 0.0)
    std = jnp.sqrt(masked_mean(centred * centred, mask))
    return centred / (std + eps)


def _clean(x, mask, fill=0.0):
    return x if mask is None else jnp.where(mask.astype(bool), x, fill)


def actor_loss(
    logp_new: jax.Array, logp_old: jax.Array, advantages: jax.Array, clip_eps, mask: Optional[jax.Array] = None
) -> tuple[jax.Array, dict]:
    """Clipped surrogate ``-mean(min(rho*A, clip(rho, 1-eps, 1+eps)*A))``.

    ``rho = exp(logp_new - logp_old)`` in log space. Returns ``(loss, diagnostics)``
    with ``approx_kl = mean((rho - 1) - log rho)`` (Schulman's k3, old -> new, >= 0) and
    ``clip_frac = mean(|rho - 1| > eps)``; both carry no gradient.
    """
    shape = same_shape("actor_loss", "logp_new", {"logp_new": logp_new, "logp_old": logp_old, "advantages": advantages})
    check_mask("actor_loss", mask, shape)
    log_ratio = _clean(logp_new, mask) - _clean(logp_old, mask)
    advantages = _clean(advantages, mask)
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)
    loss = -masked_mean(surrogate, mask)
    ratio_sg, log_ratio_sg = jax.lax.stop_gradient(ratio), jax.lax.stop_gradient(log_ratio)
    diagnostics = {
        "approx_kl": masked_mean((ratio_sg - 1.0) - log_ratio_sg, mask),
        "clip_frac": masked_mean((jnp.abs(ratio_sg - 1.0) > clip_eps).astype(jnp.float32), mask),
    }
    return loss, diagnostics


def value_loss(
    values_new: jax.Array,
    values_old: jax.Array,
    returns: jax.Array,
    clip_eps: Optional[float] = None,
    mask: Optional[jax.Array] = None,
) -> jax.Array:
    """``0.5 * mean((V - R)^2)``; with ``clip_eps``, the pessimistic max against
    ``V_old + clip(V - V_old, -clip_eps, clip_eps)``. ``clip_eps=None`` disables clipping."""
    shape = same_shape(
        "value_loss", "values_new", {"values_new": values_new, "values_old": values_old, "returns": returns}
    )
    check_mask("value_loss", mask, shape)
    values_new, values_old, returns = (_clean(v, mask) for v in (values_new, values_old, returns))
    err = jnp.square(values_new - returns)
    if clip_eps is not None:
        clipped = values_old + jnp.clip(values_new - values_old, -clip_eps, clip_eps)
        err = jnp.maximum(err, jnp.square(clipped - returns))
    return 0.5 * masked_mean(err, mask)


def entropy_bonus(entropy: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
    """``mean(entropy)`` over valid entries (the total loss SUBTRACTS ``c_e`` times it)."""
    return masked_mean(_clean(entropy, mask), mask)


def explained_variance(predictions: jax.Array, targets: jax.Array, mask: Optional[jax.Array] = None) -> jax.Array:
    """``1 - Var(R - V) / Var(R)``: 1 is perfect, 0 is a constant predictor, < 0 worse."""
    shape = same_shape("explained_variance", "targets", {"predictions": predictions, "targets": targets})
    check_mask("explained_variance", mask, shape)
    predictions, targets = _clean(predictions, mask), _clean(targets, mask)

    def var(x):
        m = masked_mean(x, mask)
        return masked_mean(_clean(jnp.square(x - m), mask), mask)

    var_t = var(targets)
    return jnp.where(var_t > 0, 1.0 - var(targets - predictions) / jnp.where(var_t > 0, var_t, 1.0), jnp.nan)


def ppo_loss(
    logp_new: jax.Array,
    entropy: jax.Array,
    values_new: jax.Array,
    batch_logp_old: jax.Array,
    batch_values_old: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    *,
    clip_eps,
    vf_coef,
    ent_coef,
    vf_clip_eps=None,
    mask: Optional[jax.Array] = None,
) -> tuple[jax.Array, dict]:
    """``L = L_actor + vf_coef * L_critic - ent_coef * H`` and its diagnostics.

    Inputs are the network's outputs on a minibatch (``logp_new``, ``entropy``,
    ``values_new``) and the fixed rollout data. Advantages are used as given:
    normalise them before calling (see :func:`normalize`) if wanted.
    """
    same_shape(
        "ppo_loss",
        "logp_new",
        {
            "logp_new": logp_new,
            "entropy": entropy,
            "values_new": values_new,
            "batch_logp_old": batch_logp_old,
            "batch_values_old": batch_values_old,
            "advantages": advantages,
            "returns": returns,
        },
    )
    l_actor, diag = actor_loss(logp_new, batch_logp_old, advantages, clip_eps, mask)
    l_critic = value_loss(values_new, batch_values_old, returns, vf_clip_eps, mask)
    ent = entropy_bonus(entropy, mask)
    total = l_actor + vf_coef * l_critic - ent_coef * ent
    metrics = {"actor_loss": l_actor, "critic_loss": l_critic, "entropy": ent, **diag}
    return total, metrics
