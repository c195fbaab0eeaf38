"""Action distributions as pure functions over their parameters (no distrax).

A distribution is a :class:`Distribution` of four pure functions. Parameters are
plain arrays (or a tuple of arrays) with arbitrary leading batch dims ``[...]``:

* categorical: ``logits`` of shape ``[..., A]``; actions are ints ``[...]``.
* masked categorical: ``(logits [..., A], mask [..., A] bool)``; only actions where
  ``mask`` is True are ever sampled, scored or chosen (the environment's legal actions).
* multi-discrete (product of ``K`` categoricals with sizes ``nvec``): ``logits``
  ``[..., sum(nvec)]``, the ``K`` groups side by side; actions are ints ``[..., K]``.
* diagonal Gaussian: ``(mean, log_std)`` each ``[..., D]``; actions ``[..., D]``.

All log-densities are computed in log space (``log_softmax``, no ``log(exp(.))``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

_LOG_2PI = math.log(2.0 * math.pi)


class Distribution(NamedTuple):
    """``sample(key, params) -> action``; ``log_prob(params, action) -> [...]``;
    ``entropy(params) -> [...]``; ``mode(params) -> action``."""

    sample: Callable[[jax.Array, Any], jax.Array]
    log_prob: Callable[[Any, jax.Array], jax.Array]
    entropy: Callable[[Any], jax.Array]
    mode: Callable[[Any], jax.Array]


# --- categorical over logits [..., A] -------------------------------------------------
def categorical_sample(key: jax.Array, logits: jax.Array) -> jax.Array:
    return jax.random.categorical(key, logits, axis=-1)


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits, axis=-1)
    # exp(logp) * logp is 0 * -inf = nan for masked (-inf) logits; where() keeps it finite.
    return -jnp.sum(jnp.where(jnp.isfinite(logp), jnp.exp(logp) * logp, 0.0), axis=-1)


def categorical_mode(logits: jax.Array) -> jax.Array:
    return jnp.argmax(logits, axis=-1)


CATEGORICAL = Distribution(categorical_sample, categorical_log_prob, categorical_entropy, categorical_mode)


# --- masked categorical, params = (logits [..., A], mask [..., A] bool) ----------------------
# Illegal logits are replaced (not offset) by a large FINITE negative number: their
# probability underflows to exactly 0, so they are never sampled, and no -inf/NaN can
# appear in log-probs, entropies or gradients (jnp.where passes a zero gradient to the
# replaced logits), even when a single action is legal. A row with NO legal action
# becomes uniform over all actions; environments never produce one in a live state.
_ILLEGAL = -1e9


def _masked_logits(params) -> jax.Array:
    logits, mask = params
    return jnp.where(mask, logits, _ILLEGAL)


def masked_sample(key: jax.Array, params) -> jax.Array:
    return jax.random.categorical(key, _masked_logits(params), axis=-1)


def masked_log_prob(params, action: jax.Array) -> jax.Array:
    return categorical_log_prob(_masked_logits(params), action)


def masked_entropy(params) -> jax.Array:
    """``-sum_{legal a} p(a) log p(a)``: the entropy of the distribution over legal actions."""
    logp = jax.nn.log_softmax(_masked_logits(params), axis=-1)
    return -jnp.sum(jnp.where(params[1], jnp.exp(logp) * logp, 0.0), axis=-1)


def masked_mode(params) -> jax.Array:
    return jnp.argmax(_masked_logits(params), axis=-1)


MASKED_CATEGORICAL = Distribution(masked_sample, masked_log_prob, masked_entropy, masked_mode)


# --- multi-discrete: K independent categoricals, logits [..., sum(nvec)] -------------------
def multi_discrete(nvec: Sequence[int]) -> Distribution:
    """The product of ``len(nvec)`` categoricals (a MultiDiscrete action space): action
    ``[..., K]`` ints, ``log_prob`` and ``entropy`` the sums over the ``K`` components."""
    bounds = [int(b) for b in (sum(nvec[: i + 1]) for i in range(len(nvec) - 1))]

    def groups(logits):
        return jnp.split(logits, bounds, axis=-1)

    def sample(key, logits):
        keys = jax.random.split(key, len(nvec))
        return jnp.stack([categorical_sample(k, g) for k, g in zip(keys, groups(logits))], axis=-1)

    def log_prob(logits, action):
        return sum(categorical_log_prob(g, action[..., i]) for i, g in enumerate(groups(logits)))

    def entropy(logits):
        return sum(categorical_entropy(g) for g in groups(logits))

    def mode(logits):
        return jnp.stack([categorical_mode(g) for g in groups(logits)], axis=-1)

    return Distribution(sample, log_prob, entropy, mode)


# --- diagonal Gaussian, params = (mean [..., D], log_std [..., D]) ----------------------
def gaussian_sample(key: jax.Array, params) -> jax.Array:
    mean, log_std = params
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)


def gaussian_log_prob(params, action: jax.Array) -> jax.Array:
    mean, log_std = params
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, axis=-1)


def gaussian_entropy(params) -> jax.Array:
    _, log_std = params
    return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)


def gaussian_mode(params) -> jax.Array:
    return params[0]


GAUSSIAN = Distribution(gaussian_sample, gaussian_log_prob, gaussian_entropy, gaussian_mode)
