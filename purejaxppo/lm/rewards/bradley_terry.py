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
    """``prompt, prompt_valid [B, P]`` (left-padded), ``chosen, chosen_mask, rejected,
    rejected_mask [B, T]`` (right-padded), ``margin [B]`` float (zeros: no margin)."""

    prompt: jax.Array
    prompt_valid: jax.Array
    chosen: jax.Array
    chosen_mask: jax.Array
    rejected: jax.Array
    rejected_mask: jax.Array
    margin: jax.Array


def bradley_terry_loss(r_chosen, r_rejected, margin=0.0) -> tuple[jax.Array, dict]:
    """``(loss, {"loss", "accuracy"})``: the mean of ``-log sigmoid(r_chosen - r_rejected -
    margin)`` over the ``[B]`` pairs, and the share of pairs ranked right (``r_chosen >
    r_rejected``, ties count wrong)."""
    z = r_chosen.astype(jnp.float32) - r_rejected.astype(jnp.float32) - margin
    loss = jnp.mean(-jax.nn.log_sigmoid(z))
    return loss, {"loss": loss, "accuracy": jnp.mean((r_chosen > r_rejected).astype(jnp.float32))}


def pair_rewards(reward_fn: Callable, params: Any, batch: PairBatch) -> tuple[jax.Array, jax.Array]:
    """``(r_chosen [B], r_rejected [B])`` from one pass of ``reward_fn`` over the ``2B`` rows."""
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
    """The Bradley-Terry loss of ``params`` on ``batch`` (with its margins) and its metrics."""
    return bradley_terry_loss(*pair_rewards(reward_fn, params, batch), batch.margin)


def reward_optimizer(learning_rate: float, max_grad_norm: float = 1.0, weight_decay: float = 0.0):
    """AdamW with global gradient clipping (``max_grad_norm <= 0``: no clipping)."""
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
    """``step(params, opt_state, batch) -> (params, opt_state, metrics)``: one optimizer step on
    the Bradley-Terry loss of one :class:`PairBatch` (pure; jit it or scan it). The value
    head's bias stays where it is (see :func:`_frozen_bias`)."""
    grad = jax.value_and_grad(lambda p, b: pair_loss(reward_fn, p, b), has_aux=True)

    def step(params, opt_state, batch: PairBatch):
        (_, metrics), g = grad(params, batch)
        g = _frozen_bias(g)
        updates, opt_state = optimizer.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    return step
