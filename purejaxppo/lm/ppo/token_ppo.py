"""Token-level PPO composed ONCE: ``make_token_ppo(...) -> TokenPPO(init, iteration, run, train)``.

One iteration, ``state, prompts -> state, metrics`` (:func:`token_iteration`), is one compiled
program of named phases (:mod:`purejaxppo.lm.ppo.token_phases`,
:mod:`purejaxppo.lm.ppo.token_update`), read top to bottom:

1. **prompts**: ``batch_size / group_size`` prompts, each ``group_size`` times;
2. **sample**: a response per row with the policy's KV cache, scored by the reward;
3. **width**: the rung of response widths that holds the longest response; the next three
   phases (:func:`score_finish_update`) run at it, one branch of a ``lax.switch`` per rung;
4. **score**: teacher-forced log-probs of the policy and the reference (and the critic's values,
   for GAE): an :class:`~purejaxppo.lm.ppo.token_records.Experience`;
5. **finish**: the rows gathered; the KL (in the rewards, or kept for a loss term), the
   advantages: masked GAE and whitening, or a group baseline (GRPO, RLOO; no critic): a
   :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`;
6. **update**: ``update_epochs`` x ``num_minibatches`` steps of the clipped objective through
   :func:`purejaxppo.stages.update.update_epochs` (the control world's loop, not a copy);
7. **beta**: the adaptive KL controller moves ``beta`` (traced: it lives in the state).

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
from purejaxppo.lm.models import length_buckets, lora
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_phases as ph
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic, validate_token_config
from purejaxppo.lm.ppo.token_phases import PromptFn, Sampled, position_rows  # noqa: F401  (the public names)
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

#: ``ptx(key, batch) -> (tokens [B, L], valid [B, L], loss_mask [B, L])``: the pretraining batch
PtxFn = Callable[[jax.Array, int], tuple]


class TokenPPOState(NamedTuple):
    """One run's state between iterations (a pytree; a sweep stacks it ``[S, ...]``).

    Fields:
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
    """``init(key, policy_params, reference_params, critic_params=None, reward_params=None,
    config=None) -> state``; ``iteration(state, prompts=None, config=None) -> (state, metrics)``
    (``prompts``: ``(prompt, prompt_valid)`` of ``batch_size / group_size`` prompts, or None to
    draw them); ``run(state, n, config=None) -> (state, metrics [n])``; ``train(key,
    policy_params, reference_params, ...) -> (state, metrics [num_iterations])``; ``loss(params,
    minibatch, totals, config)``: the share loss (``minibatch`` a
    :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`, ``totals``:
    :func:`~purejaxppo.lm.ppo.token_update.minibatch_totals`); ``update(train_state, data, key,
    config=None, base=None, beta=None) -> (train_state, metrics)``: the iteration's update
    stage alone (e.g. to time it apart, ``benchmarks/lm_iteration.py``)."""

    init: Callable
    iteration: Callable
    run: Callable
    train: Callable
    loss: Callable
    config: TokenPPOConfig
    update: Callable


class TokenParts(NamedTuple):
    """What an iteration is built from, fixed when :func:`make_token_ppo` builds it: the
    :class:`~purejaxppo.lm.ppo.experience.Models`, the device split and the caller's functions
    (``prompts``, ``ptx``, ``diagnostics``; each None when not given)."""

    models: experience.Models
    devices: Devices
    prompts: Optional[PromptFn]
    ptx: Optional[PtxFn]
    diagnostics: Optional[Callable]


class IterationKeys(NamedTuple):
    """The keys one iteration draws from its state's key: ``split(key, 5)``, in this order."""

    next: jax.Array  # the state's key after the iteration
    prompt: jax.Array
    sample: jax.Array
    update: jax.Array
    ptx: jax.Array


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


def score_finish_update(
    parts: TokenParts, state: TokenPPOState, params: dict, key, ptx_batch, width: int, sampled: Sampled, cfg
) -> tuple[TrainState, dict, dict]:
    """The iteration's phases at response width ``width`` (one branch of the width switch):
    score (:func:`~purejaxppo.lm.ppo.token_phases.score_phase`), finish
    (:func:`~purejaxppo.lm.ppo.token_phases.finish_phase`) and update
    (:func:`~purejaxppo.lm.ppo.token_update.update_phase`, with ``key``).

    Args:
      parts: the :class:`TokenParts`; state: the iteration's :class:`TokenPPOState`.
      params: ``{"policy", "critic"}`` as the models run them.
      key: the update's (its minibatch permutations).
      ptx_batch: ``(tokens, valid, mask) [B, L']`` under ``cfg.ptx``, else None.
      width: static, ``<= T``: it holds every response of ``sampled``, this device's
        :class:`~purejaxppo.lm.ppo.token_phases.Sampled` rows; cfg: the (traced) config.
    Returns:
      ``(train, stats, metrics)``: the updated :class:`~purejaxppo.stages.update.TrainState`,
      :func:`~purejaxppo.lm.ppo.experience.finish`'s statistics and the update's metrics.
    """
    exp = ph.score_phase(parts.models, params, state.reference, sampled, width, cfg)
    data, stats = ph.finish_phase(exp, state.beta, cfg, parts.devices)
    if cfg.ptx:
        ptx_tokens, ptx_valid, ptx_mask = ptx_batch
        data = data._replace(ptx_mask=ptx_mask, ptx_tokens=ptx_tokens, ptx_valid=ptx_valid)
    first = sampled.prompt.shape[1] - 1  # logits from the last prompt slot on (token_update.share_loss)
    train, upd = update_phase(
        parts.models, state.train, data, key, state.beta, cfg, parts.devices, state.reference, first
    )
    return train, stats, upd


def token_iteration(parts: TokenParts, state: TokenPPOState, batch_prompts, cfg) -> tuple[TokenPPOState, dict]:
    """One iteration: prompts, sample, then score, finish and update at the width holding the
    longest response, then the task's diagnostics and the KL coefficient.

    Args:
      parts: the :class:`TokenParts` the iteration is built from.
      state: the :class:`TokenPPOState` before it.
      batch_prompts: ``(prompt, prompt_valid) [B / G, P]``, or None to draw them with
        ``parts.prompts``.
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` (traced numeric fields).
    Returns:
      ``(state, metrics)``: the next state and a dict of float32 scalars (the batch's
      statistics, the update's means, ``response_width``, ``task_<name>`` diagnostics).
    """
    keys = IterationKeys(*jax.random.split(state.key, 5))
    prompt, prompt_valid = ph.prompt_phase(parts.prompts, keys.prompt, batch_prompts, cfg, parts.models.policy)
    params = trained_params(state.train.params, state.reference, parts.models)  # LoRA adapters on the base
    sampled = ph.sample_phase(parts.models, params, state.reward, keys.sample, prompt, prompt_valid, cfg, parts.devices)
    ptx_batch = parts.ptx(keys.ptx, cfg.batch_size) if cfg.ptx else None
    sizes, index = ph.width_phase(sampled.mask, cfg, parts.devices)

    def at_width(width):
        return lambda s: score_finish_update(parts, state, params, keys.update, ptx_batch, width, s, cfg)

    train, stats, upd = length_buckets.on_width(index, sizes, at_width, sampled)
    stats.update(ph.diagnostics_phase(parts.diagnostics, sampled, parts.devices))
    stats["response_width"] = jnp.asarray(sizes, jnp.float32)[index]
    beta = ph.beta_phase(state.beta, stats, cfg)
    new = TokenPPOState(train, state.reference, state.reward, beta, keys.next, state.iteration + 1)
    return new, {**stats, **upd}


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
    """Token-level PPO for a policy, composed once (:func:`token_iteration`).

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
