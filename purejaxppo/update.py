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


def make_optimizer(max_grad_norm, adam_eps, learning_rate) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam, then the learning rate.

    All arguments may be traced scalars. ``learning_rate`` is a scalar, or a pytree of
    scalars with the structure of the params (e.g. separate actor and critic rates).
    The chain runs on the params raveled into one vector (``optax.flatten``): the same
    numbers, but a handful of fused kernels instead of a few per parameter leaf, which
    is what dominates a small network's update on CPU.
    """
    adam = optax.flatten(optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.scale_by_adam(eps=adam_eps)))

    def scale(updates, state, params=None):
        per_leaf = jax.tree.structure(learning_rate) == jax.tree.structure(updates)
        lrs = learning_rate if per_leaf else jax.tree.map(lambda _: learning_rate, updates)
        return jax.tree.map(lambda u, lr: -lr * u, updates, lrs), state

    return optax.chain(adam, optax.GradientTransformation(lambda params: optax.EmptyState(), scale))


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
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

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

    (state, _), (metrics, taken) = jax.lax.scan(
        epoch, (state, jnp.asarray(False)), jax.random.split(key, num_epochs)
    )
    n_taken = jnp.sum(taken)
    metrics = jax.tree.map(lambda m: jnp.sum(m * taken) / jnp.maximum(n_taken, 1.0), metrics)
    metrics["minibatches_taken"] = n_taken
    return state, metrics
