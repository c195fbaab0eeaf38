"""Critic-free advantages from a GROUP of responses per prompt (GRPO, Dr. GRPO, RLOO) as pure functions.

Layout: a batch of ``B = n_prompts * G`` sequences where rows ``[g*G, (g+1)*G)`` answer the same
prompt (the prompt repeated ``G`` times, each row sampled with its own key). The baseline of a
row is computed from its group's sequence rewards alone:

* ``grpo`` (Shao et al. 2024, DeepSeekMath): ``(r_i - mean_g) / (std_g + eps)``, ``std_g`` the
  unbiased (``ddof=1``) standard deviation, as TRL's GRPOTrainer computes it;
* ``dr-grpo`` (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``r_i - mean_g``, no
  division by the group's std (which weights the groups whose rewards barely differ most);
  REINFORCE++-baseline's group step too;
* ``rloo`` (Ahmadian et al. 2024): ``r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean_g)``.

A group whose rewards are all equal carries no signal: its advantages are exactly 0 (never
0/0 = NaN, never a float residue of ``r - mean``); :func:`informative_groups` says which groups
are not. The sequence advantage is then the advantage
of every valid response token (:func:`token_advantages`): an outcome reward, no critic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

METHODS = ("grpo", "dr-grpo", "rloo")


def _groups(rewards: jax.Array, group_size: int) -> jax.Array:
    if rewards.ndim != 1:
        raise ValueError(f"sequence rewards must be [B], got shape {rewards.shape}")
    if group_size < 2:
        raise ValueError(f"group_size={group_size}: a group baseline needs at least 2 responses per prompt")
    if rewards.shape[0] % group_size:
        raise ValueError(f"B={rewards.shape[0]} rows do not split into groups of {group_size}")
    return rewards.astype(jnp.float32).reshape(-1, group_size)


def group_advantages(rewards: jax.Array, group_size: int, method: str = "grpo", eps: float = 1e-4) -> jax.Array:
    """The advantages of sequences against their group's baseline.

    Args:
      rewards: ``[B]`` sequence rewards, rows ``[g*G, (g+1)*G)`` one prompt's.
      group_size: ``G`` (static, >= 2, divides ``B``).
      method: one of :data:`METHODS`; eps: added to GRPO's standard deviation.
    Returns:
      ``[B]`` float32, exactly 0 for every row of a group whose rewards are all equal.
    Raises:
      ValueError: an unknown ``method``, ``rewards`` not ``[B]``, or groups that do not fit.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    r = _groups(rewards, group_size)
    g = group_size
    mean = jnp.mean(r, axis=1, keepdims=True)
    centred = r - mean
    if method == "grpo":
        std = jnp.sqrt(jnp.sum(centred**2, axis=1, keepdims=True) / (g - 1))
        adv = centred / (std + eps)
    elif method == "dr-grpo":
        adv = centred
    else:
        adv = centred * (g / (g - 1))
    flat = jnp.max(r, axis=1, keepdims=True) == jnp.min(r, axis=1, keepdims=True)
    return jnp.where(flat, 0.0, adv).reshape(-1)


def informative_groups(rewards: jax.Array, group_size: int) -> jax.Array:
    """Which groups carry a signal: not all of their rewards are equal (a group that is gets
    advantages of exactly 0 from :func:`group_advantages`; DAPO's dynamic sampling drops it).

    Args:
      rewards: ``[B]`` sequence rewards, rows ``[g*G, (g+1)*G)`` one prompt's.
      group_size: ``G`` (static, >= 2, divides ``B``).
    Returns:
      ``[B / G]`` bool, False exactly where :func:`group_advantages` gives 0 for being flat (the
      largest reward equal to the smallest); a NaN reward counts as a signal, so a failing reward
      still reaches the update and shows.
    Raises:
      ValueError: ``rewards`` not ``[B]``, or groups that do not fit.
    """
    r = _groups(rewards, group_size)
    return ~(jnp.max(r, axis=1) == jnp.min(r, axis=1))


def token_advantages(seq_advantages: jax.Array, mask: jax.Array) -> jax.Array:
    """A sequence advantage spread over its response.

    Args:
      seq_advantages: ``[B]``; mask: ``[B, L]`` bool, the response tokens.
    Returns:
      ``[B, L]``: each row's advantage on its valid response tokens, 0 elsewhere.
    """
    return jnp.where(mask, seq_advantages[:, None], 0.0)


def repeat_prompts(prompt: jax.Array, prompt_valid: jax.Array, group_size: int) -> tuple[jax.Array, jax.Array]:
    """Each prompt ``G`` times in a row, so rows ``[g*G, (g+1)*G)`` answer prompt ``g``.

    Args:
      prompt, prompt_valid: ``[n, P]``; group_size: ``G``.
    Returns:
      ``(prompt, prompt_valid)``, ``[n * G, P]`` each.
    """
    return jnp.repeat(prompt, group_size, axis=0), jnp.repeat(prompt_valid, group_size, axis=0)


def k3_kl(logp: jax.Array, logp_ref: jax.Array) -> jax.Array:
    """Schulman's k3 estimator of KL(policy || reference) per token, ``exp(d) - d - 1`` with
    ``d = logp_ref - logp``: unbiased, never negative; GRPO's KL loss term (its gradient flows
    through ``logp``).

    Args:
      logp, logp_ref: ``[B, L]``, the policy's and the reference's log-probs of the tokens.
    Returns:
      ``[B, L]``.
    """
    d = logp_ref - logp
    return jnp.exp(d) - d - 1.0


__all__ = ["METHODS", "group_advantages", "informative_groups", "token_advantages", "repeat_prompts", "k3_kl"]
