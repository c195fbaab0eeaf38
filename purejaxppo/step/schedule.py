"""The learning-rate schedule of one update, read from the (traced) config."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo.config import PPOConfig


def learning_rate(config: PPOConfig, update: jax.Array) -> jax.Array:
    """Learning rate for update number ``update`` (0-based).

    * ``lr_end`` None: constant ``lr``, or (``anneal_lr``) linearly annealed towards 0,
      ``lr * (1 - update / num_updates)``;
    * ``lr_end`` a number: ``lr + (lr_end - lr) * min(1, s / lr_ramp_steps)`` with
      ``s = update * update_epochs * num_minibatches`` the optimizer steps taken before
      this update: a linear ramp (warm-up or decay) counted in optimizer steps like
      ``optax.linear_schedule``, then constant at ``lr_end``. It is evaluated once per
      update, so within one update the rate does not move.

    It is a function of the update index, not of the optimizer's step count, so
    minibatches skipped by target-KL early stopping do not shift the schedule."""
    if config.lr_end is not None:
        steps = update * (config.update_epochs * config.num_minibatches)
        frac = jnp.clip(steps / config.lr_ramp_steps, 0.0, 1.0)
        return jnp.asarray(config.lr + (config.lr_end - config.lr) * frac, jnp.float32)
    frac = 1.0 if not config.anneal_lr else 1.0 - update / config.num_updates
    return jnp.asarray(config.lr * frac, jnp.float32)


def learning_rates(config: PPOConfig, params, update: jax.Array):
    """The scalar rate, or (with ``critic_lr``) a params-shaped tree: critic leaves
    (``critic_torso``, ``value_head``) get ``critic_lr`` on the same schedule."""
    lr = learning_rate(config, update)
    if config.critic_lr is None:
        return lr
    critic = lr * (config.critic_lr / config.lr)
    is_critic = lambda path: any(getattr(k, "key", None) in ("critic_torso", "value_head") for k in path)
    return jax.tree_util.tree_map_with_path(lambda path, _: critic if is_critic(path) else lr, params)
