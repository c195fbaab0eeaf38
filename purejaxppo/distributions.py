"""Action distributions as pure functions over their parameters (no distrax).

A distribution is a :class:`Distribution` of four pure functions. Parameters are
plain arrays (or a tuple of arrays) with arbitrary leading batch dims ``[...]``:

* categorical: ``logits`` of shape ``[..., A]``; actions are ints ``[...]``.
* diagonal Gaussian: ``(mean, log_std)`` each ``[..., D]``; actions ``[..., D]``.

All log-densities are computed in log space (``log_softmax``, no ``log(exp(.))``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

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
