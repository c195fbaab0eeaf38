"""The update phase of token-level PPO: the minibatch loss, the optimizers and the epochs.

:func:`update_phase` runs ``update_epochs`` x ``num_minibatches`` gradient steps over a batch
(:func:`purejaxppo.stages.update.update_epochs`, the control world's loop, not a copy), each
minibatch optionally in ``micro_batches`` passes
(:func:`~purejaxppo.stages.update.accumulate_gradients`). :func:`share_loss` is one pass's
share of the minibatch loss: the clipped actor loss, the clipped value loss (none without a
critic), an entropy bonus, the KL term when ``kl_in == "loss"`` and an optional pretraining
(ptx) NLL. The actor and the critic have their own optimizer (Adam), learning rate and
gradient clip (:func:`token_optimizer`).

Devices: inside ``shard_map`` every device holds the whole (gathered) batch and takes its equal
share of each minibatch; its loss is scaled by its share of the GLOBAL minibatch's units, so
the device-mean of the gradients (``update_epochs``' ``pmean``) is the one-device gradient.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from purejaxppo.lm.ppo import experience
from purejaxppo.lm.models import lora
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo import token_loss as tl
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic
from purejaxppo.lm.ppo.token_records import TokenBatch
from purejaxppo.stages import device_rows
from purejaxppo.stages.update import TrainState, accumulate_gradients, make_optimizer, update_epochs


class Devices(NamedTuple):
    """The device split an iteration is built for.

    Attributes:
      axis_name: the data axis (``shard_map``) the rows split over; None: one device.
      num_devices: ``D``, the devices along it (each holds ``B / D`` rows until the gather).
      runs_axis: the name of a vmapped runs axis (a sweep), or None.
    """

    axis_name: Optional[str] = None
    num_devices: int = 1
    runs_axis: Optional[str] = None


ONE_DEVICE = Devices()


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


def trained_params(params: dict, base, models: Optional[experience.Models] = None) -> dict:
    """The parameters the models run with.

    Args:
      params: the trained ``{"policy", "critic"}`` (``critic`` may be None); a role's value is
        its parameters, or LoRA :class:`~purejaxppo.lm.models.lora.Adapters`.
      base: the frozen base the adapters sit on (the reference); not read without adapters.
      models: optional; a role whose model computes adapters unmerged (its ``lora_unmerged``
        attribute, :func:`purejaxppo.lm.models.lora.lora_attach`) gets the base with the
        factors beside each kernel; otherwise (and for export) the merged weights.
    Returns:
      ``{"policy", "critic"}``: the adapters applied to ``base``, other parameters as they are.
    """

    def run_with(role, p):
        if not isinstance(p, lora.Adapters):
            return p
        model = None if models is None else getattr(models, role)
        return lora.lora_attach(base, p) if getattr(model, "lora_unmerged", False) else lora.lora_merge(base, p)

    return {k: None if v is None else run_with(k, v) for k, v in params.items()}


def kl_off(cfg: TokenPPOConfig) -> bool:
    """Whether there is no KL term at all: ``beta`` a Python 0 (not traced, as a sweep's is) and no
    adaptive KL. The reference pass is then skipped, the ``kl`` statistics and ``kl_loss`` are
    absent, and the state's ``beta`` is not read (0 x the KL is all it added)."""
    return not cfg.adaptive_kl and isinstance(cfg.beta, numbers.Real) and cfg.beta == 0


def detached(cfg: TokenPPOConfig) -> bool:
    """Whether the loss's old log-probs are its own, gradient stopped (ratio exactly 1, the same
    gradient as a rescored ratio up to float rounding; no policy pass after sampling): unless
    ``rescore_old_logprobs``, when the update takes one gradient step (``update_epochs x
    num_minibatches == 1``: its parameters are the sampler's) and nothing reads the policy's
    log-probs before it (no KL in the rewards, no adaptive KL)."""
    one_step = cfg.update_epochs * cfg.num_minibatches == 1
    return not cfg.rescore_old_logprobs and one_step and (kl_off(cfg) or cfg.kl_in == "loss" and not cfg.adaptive_kl)


def units(mask, aggregation):
    """What the loss averages over: valid tokens (``token-mean``), non-empty sequences
    (``seq-mean``), or every sequence (``token-sum-norm``: its divisor is the rows x the
    budget, so a pass's share of it is its share of the rows)."""
    if aggregation == "token-mean":
        return jnp.sum(mask, dtype=jnp.float32)
    if aggregation == "token-sum-norm":
        return jnp.float32(mask.shape[0])
    return jnp.sum(jnp.any(mask, axis=1), dtype=jnp.float32)


def minibatch_totals(mb: TokenBatch, cfg: TokenPPOConfig, beta) -> dict:
    """The scalars every pass of a minibatch shares (no gradient): its ``units`` and ptx tokens
    over the whole (global) minibatch, and ``beta`` (the KL coefficient of a KL loss term)."""
    return {
        "units": units(mb.mask, cfg.aggregation),
        "ptx": jnp.sum(mb.ptx_mask, dtype=jnp.float32) if cfg.ptx else jnp.float32(0),
        "beta": jnp.asarray(beta, jnp.float32),
    }


def kl_loss(logp, logp_ref, mask, cfg: TokenPPOConfig) -> jax.Array:
    """The KL term of ``kl_in == "loss"``: the named estimator (``cfg.kl_estimator``) of
    ``KL(policy || reference)`` per token, its gradient through ``logp [B, L]``, averaged as the
    policy loss is (``cfg.aggregation``)."""
    kl = tk.kl_penalty(logp, logp_ref, cfg.kl_estimator, mask)
    w = tl.aggregation_weights(mask, cfg.aggregation, cfg.max_new_tokens)
    return tk.masked_mean(kl if w is None else kl * jax.lax.stop_gradient(w), mask)


def share_loss(
    models: experience.Models,
    params,
    mb: TokenBatch,
    totals: dict,
    cfg: TokenPPOConfig,
    num_devices: int,
    base=None,
    first: int = 0,
):
    """``(loss, metrics)``: the share of the minibatch loss held by ``mb``, this pass's rows
    (``[b, L]``) of the minibatch's :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`;
    ``totals``: :func:`minibatch_totals` (``units`` always read; ``beta`` under ``kl_in ==
    "loss"``, ``ptx`` under ``ptx``); ``base``: the frozen weights LoRA adapters sit on (the
    reference); ``first`` (static): the policy's logits are computed from position ``first`` on
    (the prompt width - 1: no earlier position predicts a response token). Under :func:`detached`
    ``mb.logp_old`` is not read; under :func:`kl_off` neither is ``mb.logp_ref`` (no KL term)."""
    params = trained_params(params, base, models)
    logits, values = experience.heads(models, params, mb.tokens, mb.valid, first)
    logp, entropy = experience.filtered_logprobs(logits, mb.tokens, cfg, first)
    critic = needs_critic(cfg)
    loss, m = tl.token_ppo_loss(
        logp,
        entropy,
        values,
        jax.lax.stop_gradient(logp) if detached(cfg) else mb.logp_old,
        mb.values_old,
        mb.advantages,
        mb.returns,
        mb.mask,
        clip_eps=cfg.clip_eps,
        vf_coef=cfg.vf_coef if critic else 0.0,  # no critic: values and returns are zeros, no value loss
        ent_coef=cfg.ent_coef,
        vf_clip_eps=cfg.vf_clip_eps if cfg.clip_value else None,
        aggregation=cfg.aggregation,
        clip_eps_high=cfg.clip_eps_high,
        dual_clip=cfg.dual_clip,
        importance_level=cfg.importance_level,
        max_new_tokens=cfg.max_new_tokens,
    )
    if not critic:
        del m["critic_loss"]  # identically 0: there is no critic
    if cfg.kl_in == "loss" and not kl_off(cfg):
        m["kl_loss"] = kl_loss(logp, mb.logp_ref, mb.mask, cfg)
        loss = loss + totals["beta"] * m["kl_loss"]
    share = units(mb.mask, cfg.aggregation) / jnp.maximum(totals["units"], 1.0) * num_devices
    loss, m = loss * share, {k: v * share for k, v in m.items()}
    if cfg.ptx:
        ptx_logits = models.policy.logits(params["policy"], mb.ptx_tokens, mb.ptx_valid)
        nll = -tk.masked_mean(tk.token_logprobs(ptx_logits, mb.ptx_tokens), mb.ptx_mask)
        ptx_share = jnp.sum(mb.ptx_mask, dtype=jnp.float32) / jnp.maximum(totals["ptx"], 1.0) * num_devices
        loss, m["ptx_loss"] = loss + cfg.ptx_coef * nll * ptx_share, nll * ptx_share
    return loss, m


def update_phase(
    models: experience.Models,
    train: TrainState,
    data: TokenBatch,
    key: jax.Array,
    beta,
    cfg: TokenPPOConfig,
    devices: Devices = ONE_DEVICE,
    base=None,
    first: int = 0,
) -> tuple[TrainState, dict]:
    """``update_epochs`` x ``num_minibatches`` gradient steps of the clipped objective.

    Each minibatch's rows are drawn from a fresh permutation per epoch
    (:func:`purejaxppo.stages.update.update_epochs`), each optionally in ``micro_batches``
    passes; on several devices each takes its share of every minibatch.

    Args:
      models: the :class:`~purejaxppo.lm.ppo.experience.Models`.
      train: the params ``{"policy", "critic"}`` and the optimizer state.
      data: the whole batch, a :class:`~purejaxppo.lm.ppo.token_records.TokenBatch` ``[B, L]``
        (:func:`~purejaxppo.lm.ppo.experience.finish`'s, with the ptx batch under ``ptx``).
      key: the minibatch permutations' key.
      beta: the KL coefficient of the KL loss term (read under ``kl_in == "loss"``).
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      devices: the :class:`Devices` split (default: one device).
      base: the frozen reference, under LoRA (the adapters' base).
      first: static; :func:`share_loss`'s (the prompt width - 1; 0 computes every position's
        logits).
    Returns:
      ``(train, metrics)``: the new :class:`~purejaxppo.stages.update.TrainState` and a dict of
      float32 scalars, each the mean over the steps taken (losses, ``approx_kl``,
      ``clip_frac``, ``entropy``, ``grad_norm``, ...).
    """
    one_pass = accumulate_gradients(
        lambda p, mb, t: share_loss(models, p, mb, t, cfg, devices.num_devices, base, first), cfg.micro_batches
    )

    def grad_fn(params, mb):  # totals over the whole (global) minibatch, then this device's share
        return one_pass(
            params, device_rows.mine(mb, devices.axis_name, devices.num_devices), minibatch_totals(mb, cfg, beta)
        )

    return update_epochs(
        key,
        train,
        data,
        loss_fn=None,
        optimizer=token_optimizer(cfg),
        num_epochs=cfg.update_epochs,
        num_minibatches=cfg.num_minibatches,
        axis_name=devices.axis_name,
        grad_fn=grad_fn,
    )
