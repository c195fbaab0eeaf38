"""Reward-model training as pure functions: the Bradley-Terry loss on preference pairs and one
optimizer step.

A preference pair is a prompt with a chosen and a rejected response (:class:`PairBatch`,
token arrays: the prompt LEFT-padded, the responses RIGHT-padded, as everywhere in
:mod:`purejaxppo.lm`). The reward model scores ``prompt + response`` on its last valid token
(:func:`purejaxppo.lm.rewards.reward_model.make_reward_fn`, the ``RewardFn`` token-level PPO calls);
the loss is ``-log sigmoid(r_chosen - r_rejected - margin)`` averaged over pairs
(Bradley & Terry 1952; the optional margin as in Llama 2's reward models).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax


class PairBatch(NamedTuple):
    """``B`` preference pairs as token arrays (``purejaxppo.lm.tokenize_pairs`` makes one from
    text). NumPy or JAX arrays alike; a pytree.

    Attributes:
      prompt: ``[B, P]`` int32, LEFT-padded.
      prompt_valid: ``[B, P]`` bool, False on padding.
      chosen: ``[B, T]`` int32, the preferred response, RIGHT-padded.
      chosen_mask: ``[B, T]`` bool, True on its tokens (EOS included).
      rejected: ``[B, T]`` int32, the other response, RIGHT-padded.
      rejected_mask: ``[B, T]`` bool.
      margin: ``[B]`` float32, subtracted from the reward gap (zeros: no margin).
    """

    prompt: jax.Array
    prompt_valid: jax.Array
    chosen: jax.Array
    chosen_mask: jax.Array
    rejected: jax.Array
    rejected_mask: jax.Array
    margin: jax.Array


def bradley_terry_loss(r_chosen, r_rejected, margin=0.0) -> tuple[jax.Array, dict]:
    """The Bradley-Terry loss of scored pairs.

    Args:
      r_chosen: ``[B]`` rewards of the chosen responses.
      r_rejected: ``[B]`` rewards of the rejected ones.
      margin: a scalar or ``[B]``, subtracted from the gap (Llama 2's margin).

    Returns:
      ``(loss, {"loss": loss, "accuracy": ...})``: the mean over pairs of ``-log
      sigmoid(r_chosen - r_rejected - margin)`` (float32 scalar), and the share of pairs
      ranked right (``r_chosen > r_rejected``; ties count wrong).
    """
    z = r_chosen.astype(jnp.float32) - r_rejected.astype(jnp.float32) - margin
    loss = jnp.mean(-jax.nn.log_sigmoid(z))
    return loss, {"loss": loss, "accuracy": jnp.mean((r_chosen > r_rejected).astype(jnp.float32))}


def pair_rewards(reward_fn: Callable, params: Any, batch: PairBatch) -> tuple[jax.Array, jax.Array]:
    """Score both responses of every pair in one pass over the ``2B`` rows.

    Args:
      reward_fn: ``reward_fn(params, prompt, prompt_valid, response, response_mask) -> [B]``
        (``purejaxppo.lm.make_reward_fn``).
      params: the reward model's parameters.
      batch: a :class:`PairBatch`.

    Returns:
      ``(r_chosen [B], r_rejected [B])`` float32.
    """
    b = batch.prompt.shape[0]
    twice = lambda x: jnp.concatenate([x, x], axis=0)  # noqa: E731
    scores = reward_fn(
        params,
        twice(batch.prompt),
        twice(batch.prompt_valid),
        jnp.concatenate([batch.chosen, batch.rejected], axis=0),
        jnp.concatenate([batch.chosen_mask, batch.rejected_mask], axis=0),
    )
    return scores[:b], scores[b:]


def pair_loss(reward_fn: Callable, params: Any, batch: PairBatch) -> tuple[jax.Array, dict]:
    """The Bradley-Terry loss of a reward model on a batch of pairs (differentiable in ``params``).

    Args:
      reward_fn: as :func:`pair_rewards` takes it.
      params: the reward model's parameters.
      batch: a :class:`PairBatch` (its ``margin`` used).

    Returns:
      ``(loss, metrics)`` as :func:`bradley_terry_loss`.
    """
    return bradley_terry_loss(*pair_rewards(reward_fn, params, batch), batch.margin)


def reward_optimizer(learning_rate: float, max_grad_norm: float = 1.0, weight_decay: float = 0.0):
    """The reward model's optimizer: AdamW after global gradient clipping.

    Args:
      learning_rate: a float or an optax schedule.
      max_grad_norm: the global-norm clip (``<= 0``: no clipping).
      weight_decay: AdamW's decoupled weight decay.

    Returns:
      An ``optax.GradientTransformation``.
    """
    parts = [optax.clip_by_global_norm(max_grad_norm)] if max_grad_norm > 0 else []
    return optax.chain(*parts, optax.adamw(learning_rate, weight_decay=weight_decay))


def _frozen_bias(g):
    """The head's bias gets no gradient: the loss is blind to it (it shifts both rewards), so its
    true gradient is 0, but the float sum of ``+g`` and ``-g`` is not, and Adam would scale that
    rounding up to learning-rate-sized steps. HF's ``score`` head has no bias to keep."""

    def zero(path, x):
        keys = [str(getattr(p, "key", getattr(p, "name", ""))) for p in path]
        return jnp.zeros_like(x) if "value_head" in keys and keys[-1] == "bias" else x

    return jax.tree_util.tree_map_with_path(zero, g)


def reward_step(reward_fn: Callable, optimizer: optax.GradientTransformation):
    """One optimizer step on the Bradley-Terry loss, as a pure function to jit or scan.

    The value head's bias gets no gradient: the loss is blind to it (it shifts both rewards),
    and Adam would scale the rounding of ``+g - g`` up to learning-rate-sized steps.

    Args:
      reward_fn: as :func:`pair_rewards` takes it.
      optimizer: e.g. :func:`reward_optimizer`'s.

    Returns:
      ``step(params, opt_state, batch) -> (params, opt_state, metrics)`` over one
      :class:`PairBatch` (``metrics``: ``loss``, ``accuracy`` before the update).
    """
    grad = jax.value_and_grad(lambda p, b: pair_loss(reward_fn, p, b), has_aux=True)

    def step(params, opt_state, batch: PairBatch):
        (_, metrics), g = grad(params, batch)
        g = _frozen_bias(g)
        updates, opt_state = optimizer.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    return step
