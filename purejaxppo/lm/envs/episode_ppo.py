"""Token-level PPO on multi-turn episodes: one iteration, ``state -> state, metrics``, one
compiled program when the environment is JAX; with a Python environment the host samples the
episodes (:func:`~purejaxppo.lm.envs.episode_host.host_python_episode`) and ``learn`` runs the
rest of the iteration compiled.

:func:`make_episode_ppo` composes, in order: the prompts (each ``group_size`` times, with their
row ids: :func:`~purejaxppo.lm.ppo.token_phases.prompt_phase`); the episodes
(:func:`~purejaxppo.lm.envs.episode.run_episode`, one key per row); the teacher-forced passes
and the advantages over the action tokens (:func:`~purejaxppo.lm.envs.episode_credit.score_episode`,
:func:`~purejaxppo.lm.envs.episode_credit.finish_episode`: GAE with a critic, or a group
baseline without one); the single-turn update itself
(:func:`~purejaxppo.lm.ppo.token_update.update_phase`: its loss mask is the action mask) and
the KL controller. The state is the single-turn :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPOState`
(:func:`~purejaxppo.lm.ppo.token_ppo.init_state`). One device, no dynamic sampling, no ptx.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.envs.episode import EpisodeConfig, run_episode
from purejaxppo.lm.envs.episode_credit import episode_rewards, finish_episode, score_episode
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic, validate_token_config
from purejaxppo.lm.ppo.token_phases import beta_phase, prompt_phase
from purejaxppo.lm.ppo.token_ppo import init_state
from purejaxppo.lm.ppo.token_update import trained_params, update_phase


class EpisodePPO(NamedTuple):
    """What :func:`make_episode_ppo` returns.

    Attributes:
      init: ``(key, policy_params, reference_params, critic_params=None) -> state``
        (:func:`~purejaxppo.lm.ppo.token_ppo.init_state`).
      iteration: ``(state, prompts=None) -> (state, metrics)``.
      episode_config: the :class:`~purejaxppo.lm.envs.episode.EpisodeConfig` the episodes run with.
      learn: ``(state, prompt [B, P], prompt_valid [B, P], episode) -> (state, metrics)``: the
        iteration after its sampling, on episodes sampled elsewhere (a Python environment's,
        :func:`~purejaxppo.lm.envs.episode_host.host_python_episode`, with the policy's
        parameters ``purejaxppo.lm.policy_params(state)`` and :attr:`sample_keys`' keys).
      sample_keys: ``(state, prompts=None) -> (prompt [B, P], prompt_valid [B, P], rows [B],
        keys [B])``: the prompts (each ``group_size`` times) and row keys the iteration samples
        with.
    """

    init: Callable
    iteration: Callable
    episode_config: EpisodeConfig
    learn: Callable
    sample_keys: Callable


def episode_config(cfg: TokenPPOConfig, max_turns: int, turn_tokens: int) -> EpisodeConfig:
    """The episodes' :class:`~purejaxppo.lm.envs.episode.EpisodeConfig` of a PPO config: its
    response budget ``max_new_tokens`` is the episode's, and it samples as the config does
    (the update's log-probs read the same distribution).

    Args:
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      max_turns, turn_tokens: the episode's turns and the tokens of one action.
    Returns:
      The :class:`~purejaxppo.lm.envs.episode.EpisodeConfig`.
    """
    return EpisodeConfig(
        max_turns,
        turn_tokens,
        cfg.max_new_tokens,
        tuple(cfg.stop_ids),
        cfg.pad_id,
        cfg.temperature,
        cfg.top_k,
        cfg.top_p,
    )


def make_episode_ppo(
    config: TokenPPOConfig,
    policy,
    env,
    *,
    max_turns: int,
    turn_tokens: int,
    prompts: Optional[Callable] = None,
    critic=None,
    reference=None,
    bootstrap: bool = False,
) -> EpisodePPO:
    """Token-level PPO whose samples are multi-turn episodes on a JAX text environment.

    Args:
      config: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` (``max_new_tokens``:
        the episode's whole response budget ``T``; ``advantage``: ``gae`` with a critic, or a
        group baseline such as ``grpo``).
      policy: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (positions for ``P + T``).
      env: a :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv`, or None: episodes come from
        elsewhere (a Python environment's host loop) and are trained on with ``learn``.
      max_turns, turn_tokens: as :class:`~purejaxppo.lm.envs.episode.EpisodeConfig`.
      prompts: ``prompts(key, n) -> (prompt [n, P], prompt_valid [n, P][, row [n]])`` (the row
        ids reach ``env.reset``; none: -1), or None: each iteration is given its prompts.
      critic: a separate critic's model under ``critic="separate"``; reference: the reference's
        model (default: the policy's).
      bootstrap: GAE bootstraps a truncated episode with the critic's value of its final
        context (off by default: that value is never trained, see
        :mod:`purejaxppo.lm.envs.episode_credit`); truncated episodes then end as terminated ones.
    Returns:
      An :class:`EpisodePPO`.
    Raises:
      ConfigError: a bad config, dynamic sampling or ptx (not supported on episodes), or a
        budget that cannot hold one turn.
    """
    validate_token_config(config)
    bootstrap_truncated = bootstrap
    if config.dynamic_sampling or config.ptx:
        raise ConfigError("episodes do not support dynamic_sampling or ptx; turn them off")
    ecfg = episode_config(config, max_turns, turn_tokens)
    if env is not None:
        ecfg.check(env.obs_width)
    critic = None if config.critic == "value_head" or not needs_critic(config) else (critic or policy)
    models = experience.Models(policy, reference or policy, critic, None, values=needs_critic(config))

    def init(key, policy_params, reference_params, critic_params=None):
        return init_state(key, policy_params, reference_params, critic_params, None, config)

    def learn(state, prompt, prompt_valid, ep):
        _, _, _, k_update = jax.random.split(state.key, 4)  # the iteration's update key
        params = trained_params(state.train.params, state.reference, models)
        exp, boot = score_episode(models, params, state.reference, prompt, prompt_valid, ep, config)
        cut = ep.truncated if bootstrap_truncated else jnp.zeros_like(ep.truncated)
        data, stats = finish_episode(exp, episode_rewards(prompt, ep), cut, boot, state.beta, config)
        first = prompt.shape[1] - 1  # logits from the last prompt slot on
        train, upd = update_phase(
            models, state.train, data, k_update, state.beta, config, base=state.reference, first=first
        )
        stats.update(
            turns=jnp.mean(ep.turns.astype(jnp.float32)),
            terminated=jnp.mean(ep.terminated.astype(jnp.float32)),
            obs_cut=jnp.mean(ep.obs_cut.astype(jnp.float32)),
        )
        beta = beta_phase(state.beta, stats, config)
        next_key = jax.random.split(state.key, 4)[0]
        new = state._replace(train=train, beta=beta, key=next_key, iteration=state.iteration + 1)
        return new, {**stats, **upd}

    def sample_keys(state, batch_prompts=None):
        _, k_prompt, k_sample, _ = jax.random.split(state.key, 4)
        prompt, prompt_valid, rows = prompt_phase(prompts, k_prompt, batch_prompts, config, policy)
        return prompt, prompt_valid, rows, jax.random.split(k_sample, config.batch_size)

    def iteration(state, batch_prompts=None):
        if env is None:
            raise ConfigError("make_episode_ppo(..., env=None) has no JAX environment to sample: use learn()")
        prompt, prompt_valid, rows, row_keys = sample_keys(state, batch_prompts)
        policy_params = trained_params(state.train.params, state.reference, models)["policy"]
        ep = run_episode(policy, policy_params, env, row_keys, prompt, prompt_valid, rows, ecfg)
        return learn(state, prompt, prompt_valid, ep)

    return EpisodePPO(init, iteration, ecfg, learn, sample_keys)
