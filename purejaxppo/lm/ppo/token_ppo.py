"""Token-level PPO composed ONCE: ``make_token_ppo(...) -> TokenPPO(init, iteration, run, train)``.

One iteration, ``state, prompts -> state, metrics``, is one compiled program of named phases
(:mod:`purejaxppo.lm.ppo.token_phases`, :mod:`purejaxppo.lm.ppo.token_update`):

1. **prompts**: ``batch_size / group_size`` prompts, each ``group_size`` times;
2. **sample**: a response per row with the policy's KV cache, scored by the reward;
3. **score**: teacher-forced log-probs of the policy and the reference (and the critic's values,
   for GAE) at the rung of widths that holds the longest response;
4. **finish**: the rows gathered; the KL (in the rewards, or kept for a loss term), the
   advantages: masked GAE and whitening, or a group baseline (GRPO, RLOO; no critic);
5. **update**: ``update_epochs`` x ``num_minibatches`` steps of the clipped objective through
   :func:`purejaxppo.stages.update.update_epochs` (the control world's loop, not a copy);
6. **beta**: the adaptive KL controller moves ``beta`` (traced: it lives in the state).

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
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.models import length_buckets
from purejaxppo.lm.models import lora
from purejaxppo.lm.ppo import token_phases as ph
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic, validate_token_config
from purejaxppo.lm.ppo.token_phases import PromptFn, position_rows  # noqa: F401  (the public names)
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
    """``train``: params ``{"policy", "critic"}`` (``critic`` None with a value head) and the
    optimizer state; ``reference`` and ``reward`` params (frozen); ``beta`` (the KL
    coefficient); ``key``; ``iteration`` (int32, iterations done)."""

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
    minibatch, totals, config)``: the share loss (``totals``:
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


def policy_params(state: "TokenPPOState"):
    """The policy's parameters in ``state`` as its model takes them (LoRA merged)."""
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
    """The first :class:`TokenPPOState`. A separate critic starts from ``critic_params`` (default:
    the policy's, the SFT model's trunk); under LoRA the policy (and a separate critic) are
    adapters on the frozen base; without a critic (grpo / rloo) ``critic_params`` is not read."""
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
    """Token-level PPO for ``policy`` (a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`).

    ``reward(reward_params, prompt, prompt_valid, response, mask) -> [B]`` scores a response
    (a function ignores ``reward_params``; a reward model applies them). ``critic``: the
    critic's model for ``config.critic == "separate"`` (default: the policy's architecture);
    ``reference``: the reference's model (default: the policy's). ``prompts`` draws each
    iteration's prompts (needed by ``run``/``train``); ``ptx`` the pretraining batch when
    ``config.ptx``; ``diagnostics(prompt, prompt_valid, response, mask) -> {name: scalar}``
    (e.g. a task's) adds ``task_<name>`` metrics of each iteration's sampled responses.
    ``config`` is bound; a traced config with the same static fields may be passed to every
    function (a sweep). Without a critic (``advantage`` grpo / rloo) ``critic`` is not used."""
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

    def init(key, policy_params, reference_params, critic_params=None, reward_params=None, cfg=None):
        cfg = config if cfg is None else cfg
        return init_state(key, policy_params, reference_params, critic_params, reward_params, cfg)

    def update(train: TrainState, data: dict, key, cfg=None, base=None, beta=None):
        """The update phase alone (:func:`~purejaxppo.lm.ppo.token_update.update_phase`) over ``data``
        (a batch's :func:`~purejaxppo.lm.ppo.experience.finish` output, plus the ptx batch under
        ``ptx``); ``base``: the frozen reference, under LoRA; ``beta``: a KL loss term's
        coefficient (default ``cfg.beta``)."""
        cfg = config if cfg is None else cfg
        return update_phase(models, train, data, key, cfg.beta if beta is None else beta, cfg, devices, base)

    def iteration(state: TokenPPOState, batch_prompts=None, cfg=None):
        cfg = config if cfg is None else cfg
        key, k_prompt, k_sample, k_update, k_ptx = jax.random.split(state.key, 5)
        prompt, prompt_valid = ph.prompt_phase(prompts, k_prompt, batch_prompts, cfg, policy)
        params = trained_params(state.train.params, state.reference, models)  # LoRA adapters on the base
        sampled = ph.sample_phase(models, params, state.reward, k_sample, prompt, prompt_valid, cfg, devices)
        ptx_batch = ptx(k_ptx, cfg.batch_size) if cfg.ptx else None
        # the teacher-forced passes and the update run over the longest response's rung of widths
        smallest = length_buckets.smallest_width(cfg.length_buckets, cfg.stop_ids)  # no stop ids: one width
        sizes = length_buckets.bucket_sizes(cfg.max_new_tokens, smallest)
        names = tuple(a for a in (axis_name, runs_axis) if a)
        index = length_buckets.bucket_index(sampled.mask, sizes, names)

        def score_finish_update(width):
            def go(sampled):
                exp = ph.score_phase(models, params, state.reference, sampled, width, cfg)
                data, stats = ph.finish_phase(exp, state.beta, cfg, devices)
                if cfg.ptx:
                    data["ptx_tokens"], data["ptx_valid"], data["ptx_mask"] = ptx_batch
                first = prompt.shape[1] - 1  # logits from the last prompt slot on (token_update.share_loss)
                train, upd = update_phase(
                    models, state.train, data, k_update, state.beta, cfg, devices, state.reference, first
                )
                return train, stats, upd

            return go

        train, stats, upd = length_buckets.on_width(index, sizes, score_finish_update, sampled)
        stats.update(ph.diagnostics_phase(diagnostics, sampled, devices))
        stats["response_width"] = jnp.asarray(sizes, jnp.float32)[index]
        beta = ph.beta_phase(state.beta, stats, cfg)
        new = TokenPPOState(train, state.reference, state.reward, beta, key, state.iteration + 1)
        return new, {**stats, **upd}

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
