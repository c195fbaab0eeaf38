"""The minibatch update: K epochs x M shuffled minibatches, as nested ``lax.scan``.

Data is a pytree whose leaves share a leading "unit" axis ``[N, ...]``: transitions
for feed-forward PPO (``N = H*E``), whole env sequences for recurrent PPO (``N = E``).
Each epoch permutes the units, splits them into ``M`` equal minibatches and takes one
optimizer step per minibatch.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax


class TrainState(NamedTuple):
    params: Any
    opt_state: Any


class AdamState(NamedTuple):
    """Adam moments and the running powers ``b1**t``, ``b2**t`` of its bias correction."""

    mu: Any
    nu: Any
    b1_pow: jax.Array
    b2_pow: jax.Array


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
    """Adam's direction ``m_hat / (sqrt(v_hat) + eps)`` (Kingma & Ba), as in ``optax.scale_by_adam``.

    One difference, on purpose: the bias corrections ``1 / (1 - b**t)`` are computed from
    powers kept as running products in the state, not from ``b ** count``. When the first
    update is compiled together with ``init`` (``jit(train)``) they are constants, and XLA's
    constant folder rounds ``pow`` (and a division by a constant) differently from the same
    ops at run time; PPO amplifies that last bit. Products and explicit reciprocals round
    the same either way, so ``train`` in one program equals ``init`` and chunks of ``run``
    compiled apart (the chunk loop, a resumed run) bit for bit.
    """

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        one = jnp.ones((), jnp.float32)
        return AdamState(zeros, zeros, one, one)

    def update(grads, state, params=None):
        mu = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state.nu, grads)
        b1_pow, b2_pow = state.b1_pow * b1, state.b2_pow * b2
        # Reciprocals taken explicitly: XLA rewrites ``x / constant`` as ``x * (1 / constant)``
        # but never ``x / runtime_value``, which would round differently.
        r1, r2 = 1.0 / (1.0 - b1_pow), 1.0 / (1.0 - b2_pow)
        direction = jax.tree.map(lambda m, v: (m * r1) / (jnp.sqrt(v * r2) + eps), mu, nu)
        return direction, AdamState(mu, nu, b1_pow, b2_pow)

    return optax.GradientTransformation(init, update)


def make_optimizer(max_grad_norm, adam_eps, learning_rate) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam (:func:`scale_by_adam`), then the learning rate.

    All arguments may be traced scalars. ``learning_rate`` is a scalar, or a pytree of
    scalars with the structure of the params (e.g. separate actor and critic rates).
    """

    def scale(updates, state, params=None):
        per_leaf = jax.tree.structure(learning_rate) == jax.tree.structure(updates)
        lrs = learning_rate if per_leaf else jax.tree.map(lambda _: learning_rate, updates)
        return jax.tree.map(lambda u, lr: -lr * u, updates, lrs), state

    return optax.chain(
        optax.clip_by_global_norm(max_grad_norm),
        scale_by_adam(eps=adam_eps),
        optax.GradientTransformation(lambda params: optax.EmptyState(), scale),
    )


def shuffle_split(key: jax.Array, data, num_minibatches: int):
    """Permute the leading axis of every leaf, then reshape ``[N, ...] -> [M, N/M, ...]``."""
    n = jax.tree.leaves(data)[0].shape[0]
    perm = jax.random.permutation(key, n)
    return jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, n // num_minibatches) + x.shape[1:]), data
    )


def update_epochs(
    key: jax.Array,
    state: TrainState,
    data,
    *,
    loss_fn: Callable[[Any, Any], tuple[jax.Array, dict]],
    optimizer: optax.GradientTransformation,
    num_epochs: int,
    num_minibatches: int,
    target_kl: Optional[jax.Array] = None,
    axis_name: Optional[str] = None,
    grad_fn: Optional[Callable] = None,
) -> tuple[TrainState, dict]:
    """Run ``num_epochs`` x ``num_minibatches`` gradient steps of ``loss_fn(params, mb)``.

    ``loss_fn`` returns ``(loss, metrics)``; ``metrics["approx_kl"]`` (computed on the
    minibatch before its step) drives the optional early stop: once it exceeds
    ``target_kl``, this and every later minibatch of the iteration is skipped (params and
    optimizer state unchanged). Returned metrics are means over the steps TAKEN, plus
    ``grad_norm`` (before clipping) and ``minibatches_taken``.

    With ``axis_name`` (inside ``shard_map``/``pmap``), gradients and metrics are averaged
    over that device axis before the step (data-parallel PPO: each device holds an equal
    share of every minibatch, so the mean of their gradients is the global gradient).

    ``grad_fn(params, mb) -> ((loss, metrics), grads)`` replaces
    ``jax.value_and_grad(loss_fn, has_aux=True)`` (``loss_fn`` is then unused), e.g.
    :func:`accumulate_gradients` for a minibatch taken in several passes.
    """
    grad_fn = grad_fn or jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_step(carry, mb):
        state, stopped = carry
        (_, metrics), grads = grad_fn(state.params, mb)
        if axis_name is not None:
            grads, metrics = jax.lax.pmean((grads, metrics), axis_name)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        new_state = TrainState(optax.apply_updates(state.params, updates), opt_state)
        if target_kl is not None:
            stopped = jnp.logical_or(stopped, metrics["approx_kl"] > target_kl)
            new_state = jax.tree.map(lambda old, new: jnp.where(stopped, old, new), state, new_state)
        taken = jnp.logical_not(stopped).astype(jnp.float32)
        return (new_state, stopped), (metrics, taken)

    def epoch(carry, epoch_key):
        minibatches = shuffle_split(epoch_key, data, num_minibatches)
        return jax.lax.scan(minibatch_step, carry, minibatches)

    (state, _), (metrics, taken) = jax.lax.scan(epoch, (state, jnp.asarray(False)), jax.random.split(key, num_epochs))
    n_taken = jnp.sum(taken)
    metrics = jax.tree.map(lambda m: jnp.sum(m * taken) / jnp.maximum(n_taken, 1.0), metrics)
    metrics["minibatches_taken"] = n_taken
    return state, metrics


def accumulate_gradients(share_loss_fn: Callable, num_micro_batches: int) -> Callable:
    """``grad_fn(params, mb, totals) -> ((loss, metrics), grads)`` taking the minibatch in
    ``num_micro_batches`` passes of ``N/k`` units and summing their losses, metrics and
    gradients (memory for one micro-batch's activations instead of the minibatch's).

    ``share_loss_fn(params, micro, totals) -> (loss, metrics)`` returns the micro-batch's SHARE
    of the minibatch loss, so that the shares add up to it: for a mean over valid tokens,
    ``token_mean(micro) * tokens(micro) / totals["tokens"]``. ``totals`` (no gradient) is
    computed once over the whole minibatch by the caller and passed to every pass. With one
    micro-batch this is ``value_and_grad`` of the minibatch's own share. The sum equals the
    one-pass gradient up to float rounding (another summation order). Bind ``totals`` to use
    it as :func:`update_epochs`' ``grad_fn``.
    """

    def grad_fn(params, mb, totals=None):
        totals = jax.lax.stop_gradient(totals)
        one = jax.value_and_grad(lambda p, micro: share_loss_fn(p, micro, totals), has_aux=True)
        if num_micro_batches == 1:
            return one(params, mb)
        n = jax.tree.leaves(mb)[0].shape[0]
        micros = jax.tree.map(lambda x: x.reshape((num_micro_batches, n // num_micro_batches) + x.shape[1:]), mb)

        def add(acc, micro):
            return jax.tree.map(jnp.add, acc, one(params, micro)), None

        zeros = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(one, params, jax.tree.map(lambda x: x[0], micros))
        )
        return jax.lax.scan(add, zeros, micros)[0]

    return grad_fn
