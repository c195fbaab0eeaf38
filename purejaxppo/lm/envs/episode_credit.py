"""Masks and credit of multi-turn episodes: where the environment meets the update.

An :class:`~purejaxppo.lm.envs.episode.Episode` is one response after its prompt whose
environment tokens (observations, tool outputs) are CONTEXT, not actions: the update's ``mask``
is the episode's ``action_mask`` (:func:`episode_sequences`), so they get no policy-gradient
term, no value target, no KL and no entropy term (every loss cleans its masked slots first:
their gradient is exactly 0), while the model still reads them (``valid``). Rewards sit on the
last token of the turn that earned them; GAE runs over the action tokens across turns
(:func:`~purejaxppo.lm.ppo.token_stages.token_gae` chains each action token to the next VALID
one, skipping the observation between). A truncated episode's last action token MAY be
bootstrapped with the value of the whole context (:func:`episode_gae`), but
:func:`~purejaxppo.lm.envs.episode_ppo.make_episode_ppo` does not by default: that final
context (a transcript cut by the budget or ``max_turns``) is a state no turn is ever taken
from, so its value is never a value target, only the critic's extrapolation, and the policy
can learn to get truncated to collect it. Measured on the guessing game (tiny model, GAE,
value head, 120 iterations): with the bootstrap the score fell to 0.00 (every episode burnt
its budget), without it it rose to 1.00. Without the bootstrap a truncated episode ends like a
terminated one (nothing after it), as single-turn responses cut at the budget do.

The pieces compose with the single-turn update: :func:`score_episode` (teacher-forced passes:
an :class:`~purejaxppo.lm.ppo.token_records.Experience`), :func:`finish_episode` (advantages:
a :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`), then
:func:`~purejaxppo.lm.ppo.token_update.update_phase` with ``first = P - 1``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo.lm.envs.episode import Episode
from purejaxppo.lm.models.sampling import filter_logits
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo.sequence_rewards import advantages as sequence_advantages
from purejaxppo.lm.ppo.token_records import Experience, TokenBatch, update_batch


def episode_sequences(prompt, prompt_valid, ep: Episode) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The episodes as the update's sequences.

    Args:
      prompt, prompt_valid: ``[B, P]``, left-padded; ep: the :class:`Episode` ``[B, T]``.
    Returns:
      ``(tokens, valid, mask)`` ``[B, P + T]``: prompt then episode; ``valid`` every written
      slot (the model reads observations); ``mask`` the action tokens only (the loss mask).
    """
    tokens = jnp.concatenate([prompt, ep.tokens.astype(prompt.dtype)], axis=1)
    valid = jnp.concatenate([prompt_valid.astype(bool), ep.valid], axis=1)
    mask = jnp.concatenate([jnp.zeros_like(prompt_valid, bool), ep.action_mask], axis=1)
    return tokens, valid, mask


def episode_rewards(prompt, ep: Episode) -> jax.Array:
    """The episodes' rewards in :func:`episode_sequences`' layout.

    Args:
      prompt: ``[B, P]``; ep: the :class:`Episode` ``[B, T]``.
    Returns:
      ``[B, P + T]`` float32: ``P`` zeros (the prompt), then the episode's per-token rewards.
    """
    return jnp.concatenate([jnp.zeros(prompt.shape, jnp.float32), ep.rewards], axis=1)


def episode_gae(rewards, values, mask, truncated, bootstrap, gamma, gae_lambda) -> tuple[jax.Array, jax.Array]:
    """GAE over the action tokens of multi-turn episodes.

    :func:`~purejaxppo.lm.ppo.token_stages.token_gae` on ``mask`` (its holes, the observations,
    are skipped: an action token's next state is the next action token's, the observation
    between read as context), with a truncated row's last action token bootstrapped: its reward
    gets ``gamma * bootstrap``, so its TD error is ``r + gamma V(s_end) - V``.

    Args:
      rewards, values: ``[B, L]`` aligned (``values[:, t]`` = V before token ``t``).
      mask: ``[B, L]`` bool, the action tokens; truncated: ``[B]`` bool.
      bootstrap: ``[B]``, V of the whole context at the episode's end (read for truncated rows).
      gamma, gae_lambda: scalars; may be traced.
    Returns:
      ``(advantages, returns)`` ``[B, L]``, 0 off ``mask``.
    """
    mask = mask.astype(bool)
    last = tk.last_valid_mask(mask) & truncated[:, None]
    boot = jnp.where(last, gamma * jnp.where(truncated, bootstrap, 0.0)[:, None], 0.0)
    return tk.token_gae(jnp.where(mask, rewards, 0.0) + boot, values, mask, gamma, gae_lambda)


def score_episode(models: experience.Models, params: dict, reference_params, prompt, prompt_valid, ep: Episode, cfg):
    """The episodes read back teacher-forced (policy, reference, critic), as the single-turn
    :func:`~purejaxppo.lm.ppo.experience.score` reads responses, with the action mask as the
    loss mask and every written slot valid.

    Args:
      models: the :class:`~purejaxppo.lm.ppo.experience.Models` (its ``reward`` unread).
      params: ``{"policy", "critic"}`` as the models run them; reference_params: the reference's.
      prompt, prompt_valid: ``[B, P]``; ep: the :class:`Episode` ``[B, T]``.
      cfg: its ``temperature``, ``top_k``, ``top_p``, ``pad_id`` are read.
    Returns:
      ``(exp, bootstrap)``: the :class:`~purejaxppo.lm.ppo.token_records.Experience` ``[B, P + T]``
      (``score`` the episode's summed rewards, ``has_stop`` not truncated) and ``bootstrap [B]``,
      the value of each whole episode's context (0 without a critic).
    """
    tokens, valid, mask = episode_sequences(prompt, prompt_valid, ep)
    first, b = prompt.shape[1] - 1, tokens.shape[0]
    # one pad column more: its aligned value is V of the whole context (the bootstrap)
    ext = jnp.concatenate([tokens, jnp.full((b, 1), cfg.pad_id, tokens.dtype)], axis=1)
    ext_valid = jnp.concatenate([valid, jnp.zeros((b, 1), bool)], axis=1)
    logits, values = experience.heads(models, params, ext, ext_valid, first)
    logp_old, _ = experience.filtered_logprobs(logits, ext, cfg, first)
    ref_logits = experience.role_logits(models.reference, reference_params, ext, ext_valid, first)
    ref_x = filter_logits(ref_logits, cfg.temperature, banned=cfg.pad_id)
    logp_ref = experience.picked_logprobs(jax.nn.log_softmax(ref_x, axis=-1), ext, first)
    end = prompt.shape[1] + ep.length
    bootstrap = jnp.take_along_axis(values, end[:, None], axis=1)[:, 0]
    logp_old, logp_ref, values = (jnp.where(mask, x[:, :-1], 0.0) for x in (logp_old, logp_ref, values))
    logp_sampled = jnp.concatenate([jnp.zeros(prompt.shape, jnp.float32), ep.logp], axis=1)
    score = jnp.sum(ep.rewards, axis=1)
    exp = Experience(~ep.truncated, logp_old, logp_ref, logp_sampled, mask, score, tokens, valid, values)
    return exp, bootstrap


def finish_episode(exp: Experience, rewards, truncated, bootstrap, beta, cfg) -> tuple[TokenBatch, dict]:
    """The update's batch of scored episodes: the advantages and the batch's statistics.

    ``gae``: the per-token rewards (minus ``beta * kl`` on the action tokens under ``kl_in ==
    "reward"``) through :func:`episode_gae`, optionally whitened over the action tokens. The
    critic-free recipes (``grpo``, ``dr-grpo``, ``rloo``, ``reinforce++``...): the episode's summed
    reward is its score for :func:`~purejaxppo.lm.ppo.sequence_rewards.advantages` (a group's
    rows ``[g*G, (g+1)*G)`` played from one prompt), spread over the action tokens.

    Args:
      exp: :func:`score_episode`'s ``Experience`` ``[B, L]``.
      rewards: ``[B, L]`` (:func:`episode_rewards`); truncated, bootstrap: ``[B]``.
      beta: the KL coefficient (scalar, may be traced); cfg: the
        :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
    Returns:
      ``(data, stats)``: the :class:`~purejaxppo.lm.ppo.token_records.TokenBatch` (``mask`` the
      action tokens; gradients stopped) and float32 scalars: ``score`` (mean episode return),
      ``kl`` (per episode), ``kl_k1`` (the controller's), ``action_tokens``, ``truncated``, ``logp_mismatch``.
    """
    mask = exp.mask
    kl = tk.kl_penalty(exp.logp_old, exp.logp_ref, cfg.kl_estimator, mask)
    if cfg.advantage == "gae":
        in_reward = kl if cfg.kl_in == "reward" else jnp.zeros_like(kl)
        adv, ret = episode_gae(
            rewards - beta * in_reward, exp.values_old, mask, truncated, bootstrap, cfg.gamma, cfg.gae_lambda
        )
        if cfg.whiten_advantages:
            adv = jnp.where(mask, tk.masked_whiten(adv, mask), 0.0)
    else:
        adv, ret = sequence_advantages(exp.score, kl, exp.values_old, mask, beta, cfg)
    data = update_batch(exp, adv, ret, mask, cfg.kl_in)
    stats = dict(
        score=jnp.mean(exp.score),
        kl=jnp.mean(tk.sequence_kl(kl, mask)),
        kl_k1=jnp.mean(tk.sequence_kl(tk.kl_penalty(exp.logp_old, exp.logp_ref, "k1", mask), mask)),
        action_tokens=jnp.mean(jnp.sum(mask, axis=1, dtype=jnp.float32)),
        truncated=jnp.mean(truncated.astype(jnp.float32)),
        logp_mismatch=jnp.max(jnp.where(mask, jnp.abs(exp.logp_sampled - exp.logp_old), 0.0)),
    )
    return jax.lax.stop_gradient(data), stats
