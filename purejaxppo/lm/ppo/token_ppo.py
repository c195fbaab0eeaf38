"""Token-level PPO composed ONCE: ``make_token_ppo(...) -> TokenPPO(init, iteration, run, train)``.

One iteration, ``state, prompts -> state, metrics``, is one compiled program of named phases,
read top to bottom in :func:`purejaxppo.lm.ppo.token_iteration.token_iteration`: prompts, sample,
then score, finish and update at the width that holds the longest response, then ``beta``.

The actor and the critic have their own optimizer (Adam), learning rate and gradient clip:
``critic="separate"`` trains a second model, ``critic="value_head"`` the value head on the
policy's trunk (its leaves take ``critic_lr``; the trunk is the actor's). With
``advantage="grpo"`` or ``"rloo"`` there is no critic: none in the state, no value loss, no
critic pass.

Devices. Built with ``axis_name`` (inside ``shard_map`` over ``num_devices``), each device
samples and scores ``B / D`` of the rows (rows ``[d*B/D, (d+1)*B/D)``, with the same row
keys one device would use), the rows are gathered, and every device takes its share of each
minibatch; gradients are the exact shares of the global token mean, averaged over devices.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.models import lora
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic, validate_token_config
from purejaxppo.lm.ppo.token_iteration import PtxFn, TokenParts, token_iteration
from purejaxppo.lm.ppo.token_phases import PromptFn, position_rows  # noqa: F401  (the public names)
from purejaxppo.lm.ppo.token_records import TokenBatch
from purejaxppo.lm.ppo.token_update import (  # noqa: F401  (_labels, token_optimizer: the public names)
    Devices,
    _labels,
    share_loss,
    token_optimizer,
    trained_params,
    update_phase,
)
from purejaxppo.stages.update import TrainState


class TokenPPOState(NamedTuple):
    """One run's state between iterations (a pytree; a sweep stacks it ``[S, ...]``).

    Attributes:
      train: the :class:`~purejaxppo.stages.update.TrainState`: params ``{"policy", "critic"}``
        (``critic`` None with a value head or no critic; LoRA adapters under ``lora_rank``) and
        the optimizer state.
      reference: the reference's params (frozen; under LoRA the base the adapters sit on).
      reward: the reward model's params (frozen; None for a reward function).
      beta: float32 scalar, the KL coefficient.
      key: the next iteration's key.
      iteration: int32 scalar, iterations done.
    """

    train: TrainState
    reference: Any
    reward: Any
    beta: jax.Array
    key: jax.Array
    iteration: jax.Array


class TokenPPO(NamedTuple):
    """Token-level PPO's pure functions, as :func:`make_token_ppo` built them.

    Attributes:
      init: ``(key, policy_params, reference_params, critic_params=None, reward_params=None,
        config=None) -> state`` (:func:`init_state`).
      iteration: ``(state, prompts=None, config=None) -> (state, metrics)`` (``prompts``:
        ``(prompt, prompt_valid) [B / G, P]``, or None to draw them).
      run: ``(state, n, config=None) -> (state, metrics [n])``.
      train: ``(key, policy_params, reference_params, ...) -> (state, metrics [num_iterations])``.
      loss: ``(params, minibatch, totals, config=None, base=None) -> (loss, metrics)``, the share
        loss (``minibatch`` a :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`, ``totals``:
        :func:`~purejaxppo.lm.ppo.token_update.minibatch_totals`).
      config: the bound :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      update: ``(train_state, data, key, config=None, base=None, beta=None) -> (train_state,
        metrics)``, the update phase alone (e.g. to time it apart, ``benchmarks/lm_iteration.py``).
    """

    init: Callable
    iteration: Callable
    run: Callable
    train: Callable
    loss: Callable
    config: TokenPPOConfig
    update: Callable


def policy_params(state: "TokenPPOState"):
    """The policy's parameters in ``state`` as its model takes them (LoRA merged).

    Args:
      state: one run's :class:`TokenPPOState` (or a stacked one: every leaf keeps its axes).
    Returns:
      The policy's parameter tree, the one :func:`make_token_ppo`'s ``policy`` runs with.
    """
    return trained_params(state.train.params, state.reference)["policy"]


def _lora_init(key, base, cfg: TokenPPOConfig, critic_params, reference_params):
    """``(params, reference)`` of a LoRA run: adapters for the policy (and a separate critic's
    own), the value head trained whole; the frozen base, in ``cfg.lora_base_dtype``, is the
    reference (one copy of the weights)."""
    if critic_params is not None and needs_critic(cfg):
        raise ConfigError(
            "with LoRA (lora_rank > 0) the critic is the base plus its own adapters; pass no critic_params"
        )
    if reference_params is not None and reference_params is not base:
        raise ConfigError(
            "with LoRA (lora_rank > 0) the reference IS the frozen base (policy_params); pass "
            "reference_params=None or the same tree"
        )
    base = lora.as_dtype(base, jnp.dtype(cfg.lora_base_dtype))
    targets = cfg.lora_targets or lora.DEFAULT_TARGETS
    separate = cfg.critic == "separate" and needs_critic(cfg)
    try:
        adapters = [
            lora.lora_init(jax.random.fold_in(key, i), base, cfg.lora_rank, cfg.lora_alpha, targets)
            for i in range(2 if separate else 1)
        ]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return {"policy": adapters[0], "critic": adapters[1] if separate else None}, base


def init_state(key, policy_params, reference_params, critic_params, reward_params, cfg: TokenPPOConfig):
    """The first :class:`TokenPPOState`.

    Args:
      key: the state's key (LoRA's adapters are drawn from ``fold_in(key, 0x10A)``).
      policy_params: the policy's initial parameters (under LoRA: the frozen base).
      reference_params: the reference's (under LoRA: None or ``policy_params`` itself).
      critic_params: a separate critic's start (default: the policy's, the SFT model's trunk);
        not read with a value head or without a critic (grpo / rloo).
      reward_params: the reward model's parameters (None for a reward function).
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
    Returns:
      A :class:`TokenPPOState`, ``beta = cfg.beta`` (float32), ``iteration = 0`` (int32).
    """
    if cfg.lora_rank:
        params, reference_params = _lora_init(
            jax.random.fold_in(key, 0x10A), policy_params, cfg, critic_params, reference_params
        )
    else:
        separate = cfg.critic == "separate" and needs_critic(cfg)
        if separate and critic_params is None:
            critic_params = policy_params  # the usual start: the critic's trunk from the SFT model
        params = {"policy": policy_params, "critic": critic_params if separate else None}
    return TokenPPOState(
        TrainState(params, token_optimizer(cfg).init(params)),
        reference_params,
        reward_params,
        jnp.asarray(cfg.beta, jnp.float32),
        key,
        jnp.zeros((), jnp.int32),
    )


def make_token_ppo(
    config: TokenPPOConfig,
    policy,
    reward: experience.RewardFn,
    *,
    prompts: Optional[PromptFn] = None,
    critic=None,
    reference=None,
    ptx: Optional[PtxFn] = None,
    diagnostics: Optional[Callable] = None,
    axis_name: Optional[str] = None,
    num_devices: int = 1,
    runs_axis: Optional[str] = None,
) -> TokenPPO:
    """Token-level PPO for a policy, composed once
    (:func:`~purejaxppo.lm.ppo.token_iteration.token_iteration`).

    ``config`` is bound; a traced config with the same static fields may be passed to every
    function (a sweep).

    Args:
      config: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` (validated here).
      policy: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`.
      reward: ``reward(reward_params, prompt [B, P], prompt_valid [B, P], response [B, T],
        mask [B, T]) -> [B]`` (a function ignores ``reward_params``; a reward model applies them).
      prompts: ``prompts(key, n) -> (prompt [n, P], prompt_valid [n, P])`` draws each
        iteration's ``n = B / G`` prompts (needed by ``run``/``train``).
      critic: the critic's model for ``config.critic == "separate"`` (default: the policy's
        architecture); not used with a value head or without a critic (grpo / rloo).
      reference: the reference's model (default: the policy's).
      ptx: the pretraining batch function (:data:`PtxFn`) when ``config.ptx``.
      diagnostics: ``diagnostics(prompt, prompt_valid, response, mask) -> {name: scalar}``
        (e.g. a task's) adds ``task_<name>`` metrics of each iteration's sampled responses.
      axis_name, num_devices: the data axis the program runs under (``shard_map``, see
        :func:`~purejaxppo.lm.ppo.data_parallel.data_parallel`) and its size.
      runs_axis: the name of a vmapped runs axis (a sweep), or None.
    Returns:
      A :class:`TokenPPO` of pure functions.
    Raises:
      ConfigError: a bad config, or a model or function the config contradicts.
    """
    validate_token_config(config)
    if config.critic == "value_head" and critic is not None:
        raise ConfigError(
            "critic='value_head' takes the values from the policy's own head; pass no critic model "
            "(or use critic='separate')"
        )
    if config.ptx and ptx is None:
        raise ConfigError("config.ptx is on but no ptx batch function was given (make_token_ppo(..., ptx=fn))")
    if config.batch_size % num_devices:
        raise ConfigError(f"batch_size={config.batch_size} rows must split evenly over {num_devices} devices")
    critic = None if config.critic == "value_head" or not needs_critic(config) else (critic or policy)
    models = experience.Models(policy, reference or policy, critic, reward, values=needs_critic(config))
    devices = Devices(axis_name, num_devices, runs_axis)
    parts = TokenParts(models, devices, prompts, ptx, diagnostics)

    def init(key, policy_params, reference_params, critic_params=None, reward_params=None, cfg=None):
        cfg = config if cfg is None else cfg
        return init_state(key, policy_params, reference_params, critic_params, reward_params, cfg)

    def update(train: TrainState, data: TokenBatch, key, cfg=None, base=None, beta=None):
        """The update phase alone (:func:`~purejaxppo.lm.ppo.token_update.update_phase`) over ``data``
        (a batch's :func:`~purejaxppo.lm.ppo.experience.finish` output, plus the ptx batch under
        ``ptx``); ``base``: the frozen reference, under LoRA; ``beta``: a KL loss term's
        coefficient (default ``cfg.beta``)."""
        cfg = config if cfg is None else cfg
        return update_phase(models, train, data, key, cfg.beta if beta is None else beta, cfg, devices, base)

    def iteration(state: TokenPPOState, batch_prompts=None, cfg=None):
        return token_iteration(parts, state, batch_prompts, config if cfg is None else cfg)

    def run(state, n: int, cfg=None):
        return jax.lax.scan(lambda s, _: iteration(s, None, cfg), state, None, length=n)

    def train(key, policy_params, reference_params, critic_params=None, reward_params=None, cfg=None):
        cfg = config if cfg is None else cfg
        state = init(key, policy_params, reference_params, critic_params, reward_params, cfg)
        return run(state, cfg.num_iterations, cfg)

    return TokenPPO(
        init,
        iteration,
        run,
        train,
        lambda p, mb, t, cfg=None, base=None: share_loss(models, p, mb, t, cfg or config, num_devices, base),
        config,
        update,
    )
