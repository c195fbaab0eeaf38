"""Token-level PPO composed ONCE: ``make_token_ppo(...) -> TokenPPO(init, iteration, run, train)``.

One iteration, ``state, prompts -> state, metrics``, is one compiled program:

1. sample a response per prompt with the policy's KV cache; teacher-forced log-probs of the
   policy and the reference, the critic's values; the score, on the last valid response
   token, minus the missing-EOS penalty; KL-shaped rewards (:mod:`purejaxppo.lm.experience`);
2. masked GAE and whitening over the whole batch;
3. ``update_epochs`` x ``num_minibatches`` steps over shuffled sequences through
   :func:`purejaxppo.stages.update.update_epochs` (the control world's loop, not a copy), each
   minibatch optionally in ``micro_batches`` passes (:func:`~purejaxppo.stages.update.accumulate_gradients`,
   exact shares of the token mean); the clipped actor loss, the clipped value loss, an
   entropy bonus and an optional pretraining (ptx) NLL;
4. the adaptive KL controller moves ``beta`` (traced: it lives in the state).

The actor and the critic have their own optimizer (Adam), learning rate and gradient clip:
``critic="separate"`` trains a second model, ``critic="value_head"`` the value head on the
policy's trunk (its leaves take ``critic_lr``; the trunk is the actor's).

Devices. Built with ``axis_name`` (inside ``shard_map`` over ``num_devices``), each device
samples and scores ``B / D`` of the prompts (rows ``[d*B/D, (d+1)*B/D)``, with the same row
keys one device would use), the rows are gathered, and every device takes its share of each
minibatch; gradients are the exact shares of the global token mean, averaged over devices.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm import experience, length_buckets, lora
from purejaxppo.lm import tokens as tk
from purejaxppo.lm.config import TokenPPOConfig, validate_token_config
from purejaxppo.stages import device_rows
from purejaxppo.stages.update import TrainState, accumulate_gradients, make_optimizer, update_epochs

#: ``prompts(key, batch) -> (prompt [B, P] int32, prompt_valid [B, P] bool)``, left-padded
PromptFn = Callable[[jax.Array, int], tuple]
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
    (``prompts``: ``(prompt, prompt_valid)`` or None to draw them); ``run(state, n, config=None)
    -> (state, metrics [n])``; ``train(key, policy_params, reference_params, ...) -> (state,
    metrics [num_iterations])``; ``loss(params, minibatch, totals, config)``: the share loss;
    ``update(train_state, data, key, config=None) -> (train_state, metrics)``: the iteration's
    update stage alone (e.g. to time it apart, ``benchmarks/lm_iteration.py``)."""

    init: Callable
    iteration: Callable
    run: Callable
    train: Callable
    loss: Callable
    config: TokenPPOConfig
    update: Callable


def _labels(params):
    """``"actor"`` / ``"critic"`` per leaf: the critic's tree, or the value head's leaves."""

    def label(path, _):
        keys = [getattr(p, "key", getattr(p, "name", "")) for p in path]
        return "critic" if keys[0] == "critic" or "value_head" in keys else "actor"

    return jax.tree_util.tree_map_with_path(label, params)


def token_optimizer(cfg: TokenPPOConfig) -> optax.GradientTransformation:
    """Adam for the actor and for the critic, each with its own clip and learning rate."""
    return optax.multi_transform(
        {
            "actor": make_optimizer(cfg.max_grad_norm, cfg.adam_eps, cfg.actor_lr),
            "critic": make_optimizer(cfg.max_grad_norm, cfg.adam_eps, cfg.critic_lr),
        },
        _labels,
    )


def trained_params(params: dict, base) -> dict:
    """The ``{"policy", "critic"}`` parameters the models run with: LoRA adapters
    (:class:`~purejaxppo.lm.lora.Adapters`) merged into ``base`` (the frozen reference), other
    parameters as they are."""
    merge = lambda p: lora.lora_merge(base, p) if isinstance(p, lora.Adapters) else p  # noqa: E731
    return {k: None if v is None else merge(v) for k, v in params.items()}


def policy_params(state: "TokenPPOState"):
    """The policy's parameters in ``state`` as its model takes them (LoRA merged)."""
    return trained_params(state.train.params, state.reference)["policy"]


def _lora_init(key, base, cfg: TokenPPOConfig, critic_params, reference_params):
    """``(params, reference)`` of a LoRA run: adapters for the policy (and a separate critic's
    own), the value head trained whole; the frozen base, in ``cfg.lora_base_dtype``, is the
    reference (one copy of the weights)."""
    if critic_params is not None:
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
    try:
        adapters = [
            lora.lora_init(jax.random.fold_in(key, i), base, cfg.lora_rank, cfg.lora_alpha, targets)
            for i in range(2 if cfg.critic == "separate" else 1)
        ]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return {"policy": adapters[0], "critic": adapters[1] if cfg.critic == "separate" else None}, base


def _units(mask, aggregation):
    """What the loss averages over: valid tokens, or non-empty sequences."""
    if aggregation == "token-mean":
        return jnp.sum(mask, dtype=jnp.float32)
    return jnp.sum(jnp.any(mask, axis=1), dtype=jnp.float32)


def position_rows(model) -> Optional[int]:
    """The position table of a :class:`~purejaxppo.lm.model.FlaxLM`'s module (TinyLM's ``max_len``,
    GPT-2's ``n_positions``, the Llama family's ``config.max_position_embeddings``), None when unknown."""
    module = getattr(model, "model", model)
    for holder in (module, getattr(module, "config", None)):  # the Llama family keeps its sizes in .config
        for name in ("max_len", "n_positions", "max_position_embeddings"):
            if isinstance(getattr(holder, name, None), int):
                return getattr(holder, name)
    return None


def _check_prompts(batch_prompts, cfg, policy) -> None:
    """Shapes are static under ``jit``: a prompts function's wrong batch or a prompt table wider
    than the model's positions is refused at trace time, naming the fix (instead of a vmap
    error, or positions past the table that clamp silently)."""
    try:
        prompt, valid = batch_prompts
    except (TypeError, ValueError):
        raise ConfigError("prompts(key, batch) must return (prompt [B, P] int32, prompt_valid [B, P] bool)") from None
    if prompt.ndim != 2 or prompt.shape != valid.shape or prompt.shape[0] != cfg.batch_size:
        raise ConfigError(
            f"prompts(key, {cfg.batch_size}) returned prompt {tuple(prompt.shape)} and prompt_valid "
            f"{tuple(valid.shape)}; both must be [batch_size={cfg.batch_size}, P]"
        )
    rows = position_rows(policy)
    if rows is not None and prompt.shape[1] + cfg.max_new_tokens > rows:
        raise ConfigError(
            f"prompts of {prompt.shape[1]} slots + max_new_tokens={cfg.max_new_tokens} exceed the "
            f"model's {rows} positions; shorten the prompts or the response budget"
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
    """Token-level PPO for ``policy`` (a :class:`~purejaxppo.lm.model.CausalLM`).

    ``reward(reward_params, prompt, prompt_valid, response, mask) -> [B]`` scores a response
    (a function ignores ``reward_params``; a reward model applies them). ``critic``: the
    critic's model for ``config.critic == "separate"`` (default: the policy's architecture);
    ``reference``: the reference's model (default: the policy's). ``prompts`` draws each
    iteration's prompts (needed by ``run``/``train``); ``ptx`` the pretraining batch when
    ``config.ptx``; ``diagnostics(prompt, prompt_valid, response, mask) -> {name: scalar}``
    (e.g. a task's) adds ``task_<name>`` metrics of each iteration's sampled responses. ``config`` is bound; a traced config with the same static fields may be
    passed to every function (a sweep)."""
    validate_token_config(config)
    if config.critic == "value_head" and critic is not None:
        raise ConfigError(
            "critic='value_head' takes the values from the policy's own head; pass no critic model "
            "(or use critic='separate')"
        )
    if config.ptx and ptx is None:
        raise ConfigError("config.ptx is on but no ptx batch function was given (make_token_ppo(..., ptx=fn))")
    if config.batch_size % num_devices:
        raise ConfigError(f"batch_size={config.batch_size} prompts must split evenly over {num_devices} devices")
    models = experience.Models(
        policy, reference or policy, None if config.critic == "value_head" else (critic or policy), reward
    )

    def mine(tree):  # this device's rows of a batch or minibatch
        return device_rows.mine(tree, axis_name, num_devices)

    def gather(tree):
        return device_rows.gather(tree, axis_name)

    def share_loss(params, mb, totals, cfg, base=None):
        """The minibatch loss's share held by ``mb`` (see ``accumulate_gradients``); ``base``:
        the frozen weights LoRA adapters in ``params`` are merged into (the reference)."""
        params = trained_params(params, base)
        logits, values = experience.heads(models, params, mb["tokens"], mb["valid"])
        logp, entropy = experience.filtered_logprobs(logits, mb["tokens"], cfg)
        vf_clip = cfg.vf_clip_eps if cfg.clip_value else None
        loss, m = tk.token_ppo_loss(
            logp,
            entropy,
            values,
            mb["logp_old"],
            mb["values_old"],
            mb["advantages"],
            mb["returns"],
            mb["mask"],
            clip_eps=cfg.clip_eps,
            vf_coef=cfg.vf_coef,
            ent_coef=cfg.ent_coef,
            vf_clip_eps=vf_clip,
            aggregation=cfg.aggregation,
        )
        share = _units(mb["mask"], cfg.aggregation) / jnp.maximum(totals["units"], 1.0) * num_devices
        loss, m = loss * share, {k: v * share for k, v in m.items()}
        if cfg.ptx:
            ptx_logits = models.policy.logits(params["policy"], mb["ptx_tokens"], mb["ptx_valid"])
            nll = -tk.masked_mean(tk.token_logprobs(ptx_logits, mb["ptx_tokens"]), mb["ptx_mask"])
            ptx_share = jnp.sum(mb["ptx_mask"], dtype=jnp.float32) / jnp.maximum(totals["ptx"], 1.0) * num_devices
            loss, m["ptx_loss"] = loss + cfg.ptx_coef * nll * ptx_share, nll * ptx_share
        return loss, m

    def init(key, policy_params, reference_params, critic_params=None, reward_params=None, cfg=None):
        cfg = config if cfg is None else cfg
        if cfg.lora_rank:
            params, base = _lora_init(
                jax.random.fold_in(key, 0x10A), policy_params, cfg, critic_params, reference_params
            )
            return TokenPPOState(
                TrainState(params, token_optimizer(cfg).init(params)),
                base,
                reward_params,
                jnp.asarray(cfg.beta, jnp.float32),
                key,
                jnp.zeros((), jnp.int32),
            )
        if cfg.critic == "separate" and critic_params is None:
            critic_params = policy_params  # the usual start: the critic's trunk from the SFT model
        params = {"policy": policy_params, "critic": critic_params if cfg.critic == "separate" else None}
        return TokenPPOState(
            TrainState(params, token_optimizer(cfg).init(params)),
            reference_params,
            reward_params,
            jnp.asarray(cfg.beta, jnp.float32),
            key,
            jnp.zeros((), jnp.int32),
        )

    def update(train: TrainState, data: dict, key, cfg=None, base=None):
        """``update_epochs`` x ``num_minibatches`` steps over ``data`` (a batch's
        :func:`~purejaxppo.lm.experience.finish` output, plus the ptx batch under ``ptx``);
        ``base``: the frozen reference, under LoRA."""
        cfg = config if cfg is None else cfg
        one_pass = accumulate_gradients(lambda p, mb, t: share_loss(p, mb, t, cfg, base), cfg.micro_batches)

        def grad_fn(params, mb):  # totals over the whole (global) minibatch, then this device's share
            totals = {
                "units": _units(mb["mask"], cfg.aggregation),
                "ptx": jnp.sum(mb["ptx_mask"], dtype=jnp.float32) if cfg.ptx else jnp.float32(0),
            }
            return one_pass(params, mine(mb), totals)

        return update_epochs(
            key,
            train,
            data,
            loss_fn=None,
            optimizer=token_optimizer(cfg),
            num_epochs=cfg.update_epochs,
            num_minibatches=cfg.num_minibatches,
            axis_name=axis_name,
            grad_fn=grad_fn,
        )

    def iteration(state: TokenPPOState, batch_prompts=None, cfg=None):
        cfg = config if cfg is None else cfg
        key, k_prompt, k_sample, k_update, k_ptx = jax.random.split(state.key, 5)
        if batch_prompts is None:
            if prompts is None:
                raise ConfigError("iteration() without prompts needs make_token_ppo(..., prompts=fn)")
            batch_prompts = prompts(k_prompt, cfg.batch_size)
        _check_prompts(batch_prompts, cfg, policy)
        prompt, prompt_valid = mine(tuple(batch_prompts))
        row_keys = mine(jax.random.split(k_sample, cfg.batch_size))
        params = trained_params(state.train.params, state.reference)  # LoRA adapters merged into the base
        response, logp_sampled, rmask = experience.sample(models, params, row_keys, prompt, prompt_valid, cfg)
        # the reward and the task's diagnostics read the whole [B, T] response (a task may index
        # by column); the teacher-forced passes and the update run over the longest one's width
        scores = models.reward(state.reward, prompt, prompt_valid, response, rmask)
        if diagnostics is not None:
            found = diagnostics(*gather((prompt, prompt_valid, response, rmask)))
        ptx_batch = ptx(k_ptx, cfg.batch_size) if cfg.ptx else None
        sizes = length_buckets.bucket_sizes(cfg.max_new_tokens, cfg.length_buckets)
        index = length_buckets.bucket_index(rmask, sizes, tuple(a for a in (axis_name, runs_axis) if a))

        def score_and_update(width):
            def go(response, logp_sampled, rmask, scores):
                exp = experience.score(
                    models,
                    params,
                    state.reference,
                    state.reward,
                    prompt,
                    prompt_valid,
                    response[:, :width],
                    logp_sampled[:, :width],
                    rmask[:, :width],
                    cfg,
                    scores=scores,
                )
                data, stats = experience.finish(gather(exp), state.beta, cfg)
                if cfg.ptx:
                    data["ptx_tokens"], data["ptx_valid"], data["ptx_mask"] = ptx_batch
                train, upd = update(state.train, data, k_update, cfg, state.reference)
                return train, stats, upd

            return go

        train, stats, upd = length_buckets.on_width(
            index, sizes, score_and_update, response, logp_sampled, rmask, scores
        )
        if diagnostics is not None:
            stats.update({f"task_{k}": jnp.asarray(v, jnp.float32) for k, v in found.items()})
        stats["response_width"] = jnp.asarray(sizes, jnp.float32)[index]
        beta = state.beta
        if cfg.adaptive_kl:
            beta = tk.adaptive_kl_update(beta, stats["kl_k1"], cfg.kl_target, cfg.batch_size, cfg.kl_horizon)
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
        lambda p, mb, t, cfg=None, base=None: share_loss(p, mb, t, cfg or config, base),
        config,
        update,
    )
