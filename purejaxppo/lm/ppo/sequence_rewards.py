"""A sequence's reward as the advantages read it, and the advantages, as pure functions.

:func:`stopped` says which responses hold a stop token; :func:`shaped_score` is the score a
sequence's advantage starts from (the reward's, the missing-EOS penalty, DAPO's soft overlong
punishment; no KL); :func:`advantages` turns the batch's shaped scores, per-token KL and values
into per-token advantages: masked GAE and whitening, a group baseline
(:mod:`purejaxppo.lm.ppo.group_advantages`), or REINFORCE++'s normalised returns.
:func:`purejaxppo.lm.ppo.experience.finish` composes them into the update's batch; dynamic
sampling (:mod:`purejaxppo.lm.ppo.dynamic_sampling`) reads the shaped score to drop flat groups.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo.lm.ppo import group_advantages as group
from purejaxppo.lm.ppo import token_stages as tk


def stopped(response, rmask, stop_ids) -> jax.Array:
    """``[B]`` bool: whether each response holds one of ``stop_ids`` among its valid tokens.

    Args:
      response: ``[B, W]`` int; rmask: ``[B, W]`` bool, its valid tokens; stop_ids: the ids.
    Returns:
      ``[B]`` bool (:class:`~purejaxppo.lm.ppo.token_records.Experience`'s ``has_stop``).
    """
    stops = jnp.asarray(stop_ids, response.dtype).reshape(-1)
    return jnp.any(rmask & jnp.any(response[..., None] == stops, axis=-1), axis=1)


def shaped_score(score, has_stop, mask, cfg) -> jax.Array:
    """The score a sequence's advantage starts from: the reward's, minus ``missing_eos_penalty``
    without a stop token, plus DAPO's soft overlong punishment under ``overlong_buffer``
    (:func:`~purejaxppo.lm.ppo.token_stages.overlong_penalty`); the KL is not in it.

    Args:
      score: ``[B]`` float32, the reward's; has_stop: ``[B]`` bool (:func:`stopped`).
      mask: ``[B, W]`` bool, the response tokens (their count is the response's length).
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
    Returns:
      ``[B]`` float32.
    """
    total = score - cfg.missing_eos_penalty * (~has_stop)
    if cfg.overlong_buffer:
        lengths = jnp.sum(mask, axis=1)
        total = total + tk.overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    return total


def advantages(total, kl, values, mask, beta, cfg) -> tuple[jax.Array, jax.Array]:
    """``(advantages, returns) [B, L]`` (0 off ``mask``) of the sequences' scores ``total [B]``
    (the missing-EOS penalty in), the per-token KL estimates ``kl [B, L]`` and the critic's
    ``values [B, L]``; ``beta * kl`` is subtracted from the rewards under ``kl_in == "reward"``.

    ``gae``: the score on the last valid token, masked GAE, optionally whitened over the batch.
    ``grpo`` / ``dr-grpo`` / ``rloo``: the sequence reward (score minus ``beta *`` the sequence's
    KL) against its group's baseline (:func:`purejaxppo.lm.ppo.group_advantages.group_advantages`,
    rows ``[g*G, (g+1)*G)`` one prompt's), broadcast over the response's valid tokens.
    ``reinforce++`` (Hu 2025): the score on the last valid token (``reinforce++-baseline``: minus
    its group's mean score), ``-beta * kl`` on every token, each token's return
    (:func:`~purejaxppo.lm.ppo.token_stages.discounted_returns`, ``cfg.gamma``) normalised over
    the batch's valid tokens (every device's rows: the batch is gathered before). Returns are 0
    but for gae (no critic learns from them)."""
    kl = kl if cfg.kl_in == "reward" else jnp.zeros_like(kl)
    if cfg.advantage == "gae":
        rewards = tk.shaped_rewards(total, kl, mask, beta)
        adv, ret = tk.token_gae(rewards, values, mask, cfg.gamma, cfg.gae_lambda)
        if cfg.whiten_advantages:
            adv = jnp.where(mask, tk.masked_whiten(adv, mask), 0.0)
        return adv, ret
    if cfg.advantage in ("reinforce++", "reinforce++-baseline"):
        if cfg.advantage == "reinforce++-baseline":  # the group's mean score out (Dr. GRPO's group step)
            total = group.group_advantages(total, cfg.group_size, "dr-grpo")
        returns = tk.discounted_returns(tk.shaped_rewards(total, kl, mask, beta), mask, cfg.gamma)
        adv = jnp.where(mask, tk.masked_whiten(returns, mask), 0.0)
        return adv, jnp.zeros_like(adv)
    seq = group.group_advantages(total - beta * tk.sequence_kl(kl, mask), cfg.group_size, cfg.advantage)
    adv = group.token_advantages(seq, mask)
    return adv, jnp.zeros_like(adv)
