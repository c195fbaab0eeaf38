"""The configuration of token-level PPO (:mod:`purejaxppo.lm.ppo.token_ppo`), frozen and typed.

As :class:`purejaxppo.config.PPOConfig`: **structural** fields (``static``: sizes, flags, estimator names,
stop ids) live in the treedef, so changing one compiles anew; **numeric** fields (learning rates,
coefficients, the initial KL coefficient, temperature) are pytree leaves, traced under ``jit``:
``jax.vmap(train)(keys, configs)`` over stacked configs (a sweep over ``beta``, say) compiles once.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Callable, Optional

from flax import struct

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import check_fields, documented, setting, spelled
from purejaxppo.config.ppo_config import fields_from_dict, fields_to_dict

CRITICS = ("separate", "value_head")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
AGGREGATIONS = ("token-mean", "seq-mean", "token-sum-norm")
BASE_DTYPES = ("float32", "bfloat16")
ADVANTAGES = ("gae", "grpo", "dr-grpo", "rloo", "reinforce++", "reinforce++-baseline")
#: the advantages whose baseline is the other responses to the same prompt (group_size >= 2)
GROUP_ADVANTAGES = ("grpo", "dr-grpo", "rloo", "reinforce++-baseline")
KL_IN = ("reward", "loss")
IMPORTANCE_LEVELS = ("token", "sequence")


@documented
@struct.dataclass
class TokenPPOConfig:
    """The settings of token-level PPO: one typed record, frozen, a pytree (numeric fields are leaves,
    structural ones static). :func:`validate_token_config` checks it; the ``rlhf`` command's flags are its fields."""

    # Each field declares its default, what it does, its choices or range and (where the rlhf command names it
    # otherwise) its flag: the command's flags, --help and checks are generated from these, as are validate's.
    # --- structural (static) --------------------------------------------------------------
    batch_size: int = setting(
        64,
        "responses sampled per iteration: batch / group-size prompts, each answered group-size times",
        lo=1,
        flag="--batch",
        static=True,
    )
    group_size: int = setting(
        1,
        "responses sampled per prompt (rows [g*G, (g+1)*G) answer one prompt, each with its own key); "
        "grpo, dr-grpo, rloo and reinforce++-baseline need 2 or more",
        lo=1,
        static=True,
    )
    advantage: str = setting(
        "gae",
        "how a response's advantage is estimated: gae = the critic's GAE per token; grpo = (score - "
        "group mean) / group std; dr-grpo = score - group mean (Dr. GRPO: no std division); rloo = score - "
        "the mean of the group's other responses; reinforce++ = each token's return (the sum of the "
        "rewards from it on), normalised over the batch's valid tokens; reinforce++-baseline = the same, "
        "the group's mean score subtracted first (none but gae has a critic)",
        choices=ADVANTAGES,
        static=True,
    )
    kl_in: str = setting(
        "reward",
        "where the KL penalty to the reference goes: reward = -beta * KL per token in the rewards; "
        "loss = beta * KL as a term of the policy loss",
        choices=KL_IN,
        static=True,
    )
    num_iterations: int = setting(
        100, "PPO iterations (each samples --batch responses)", lo=1, flag="--iterations", static=True
    )
    update_epochs: int = setting(4, "passes over each iteration's batch", lo=1, flag="--epochs", static=True)
    num_minibatches: int = setting(
        4, "minibatches per epoch, over sequences (must divide --batch)", lo=1, flag="--minibatches", static=True
    )
    micro_batches: int = setting(
        1, "gradient accumulation: each minibatch in this many passes (less memory, the same update)", lo=1, static=True
    )
    max_new_tokens: int = setting(16, "response budget in tokens", lo=1, cli=False, static=True)
    stop_ids: tuple = setting(
        (1,), "a response ends after the first of these token ids (its EOS)", cli=False, static=True
    )
    pad_id: int = setting(0, "the padding token id (never sampled)", lo=0, cli=False, static=True)
    top_k: int = setting(0, "sample from the k likeliest tokens only (0 = off)", lo=0, static=True)
    top_p: float = setting(  # static: sorting the vocabulary is a code path
        1.0,
        "nucleus sampling: the smallest set of tokens holding this probability (1 = off)",
        lo=0,
        lo_open=True,
        hi=1,
        static=True,
    )
    kl_estimator: str = setting(
        "k1",
        "the per-token KL estimate: k1 = log ratio; k2 = half its square; k3 = exp(-log ratio) - 1 + log "
        "ratio (unbiased, >= 0); abs = |log ratio|",
        choices=KL_ESTIMATORS,
        static=True,
    )
    aggregation: str = setting(
        "token-mean",
        "how token losses are averaged: token-mean = over all valid tokens; seq-mean = per sequence, then "
        "over sequences; token-sum-norm = summed, divided by the sequences x max_new_tokens (Dr. GRPO's "
        "constant)",
        choices=AGGREGATIONS,
        static=True,
    )
    importance_level: str = setting(
        "token",
        "the importance ratio of the clipped loss: token = each token's pi/pi_old; sequence = GSPO's (Zheng "
        "et al. 2025) exp(mean over the response's tokens of log pi - log pi_old), clipped per sequence",
        choices=IMPORTANCE_LEVELS,
        static=True,
    )
    overlong_buffer: int = setting(
        0,
        "DAPO's soft overlong punishment: a response longer than max_new_tokens minus this many tokens "
        "loses --overlong-penalty x (its excess / this) from its score, the whole penalty at the budget "
        "(a buffer longer than the budget counts as the budget; 0 = off)",
        lo=0,
        static=True,
    )
    mask_truncated: bool = setting(
        False,
        "responses that end without a stop token (cut at the budget) get no weight in the loss (DAPO's "
        "overlong filtering)",
        static=True,
    )
    dynamic_sampling: bool = setting(
        False, "DAPO's dynamic sampling: groups whose scores all tie are dropped and more prompts drawn", static=True
    )
    max_extra_draws: int = setting(3, "with --dynamic-sampling: the most extra draws per iteration", lo=0, static=True)
    rescore_old_logprobs: bool = setting(
        False,
        "always read the old log-probs back in a teacher-forced pass; off: with one step per batch (--epochs 1 "
        "--minibatches 1) and no KL read before the update, the update's own, gradient stopped (ratio 1, no pass)",
        static=True,
    )
    critic: str = setting(
        "separate",
        "gae's critic (the other advantages have none): separate = its own model and parameters; value_head = a "
        "head on the policy's trunk",
        choices=CRITICS,
        static=True,
    )
    # over the whole batch's valid tokens (micro-batching stays exact)
    whiten_advantages: bool = setting(True, "normalise gae's advantages over the batch's valid tokens", static=True)
    clip_value: bool = setting(
        True, "clip the critic's value updates to --vf-clip-eps (PPO's value clipping)", static=True
    )
    adaptive_kl: bool = setting(
        False,
        "Ziegler et al.'s controller drives beta towards kl_target (set by giving --kl-target)",
        cli=False,
        static=True,
    )
    # purejaxppo.lm.models.length_buckets; also the rungs the sampler's KV cache grows by. Without stop_ids
    # no response can end early: the passes and the update then run at the budget alone (smallest_width)
    length_buckets: int = setting(
        16,
        "the smallest response width the passes run at: the batch is cut to the first of 16, 32, 64, ... "
        "tokens that holds its longest response (0 = always the whole budget)",
        lo=0,
        static=True,
    )
    ptx: bool = setting(
        False, "add ptx_coef * NLL of a supplied pretraining batch to the policy loss", cli=False, static=True
    )
    # LoRA (purejaxppo.lm.models.lora): rank > 0 trains low-rank adapters (and the value head) on a frozen base,
    # which is also the reference; alpha is static (the scale alpha/rank is part of the adapters' structure)
    lora_rank: int = setting(
        0,
        "LoRA: train rank-r adapters (and the value head) on a frozen base, which is also the reference "
        "(0 = full fine-tuning)",
        lo=0,
        static=True,
    )
    lora_alpha: float = setting(16.0, "LoRA: the adapters' scale is alpha / rank", lo=0, lo_open=True, static=True)
    lora_targets: tuple = setting(
        (),
        "LoRA: the modules adapted, comma-separated name suffixes like q_proj,v_proj (none: the model "
        "family's attention and MLP projections)",
        static=True,
    )
    lora_base_dtype: str = setting(
        "float32", "LoRA: the frozen base's storage (bfloat16 halves its memory)", choices=BASE_DTYPES, static=True
    )
    # --- numeric (traced) -----------------------------------------------------------------
    actor_lr: float = setting(1e-4, "the policy's Adam learning rate", lo=0, lo_open=True)
    critic_lr: float = setting(1e-4, "the critic's Adam learning rate", lo=0, lo_open=True)
    max_grad_norm: float = setting(
        1.0, "each network's gradient is clipped apart to this global norm", lo=0, lo_open=True
    )
    adam_eps: float = setting(1e-8, "Adam's epsilon, added to the root of the second moment (numerical safety)", lo=0)
    clip_eps: float = setting(
        0.2,
        "PPO's clip range of the probability ratio (below 1; above 1 too unless --clip-eps-high)",
        lo=0,
        lo_open=True,
    )
    clip_eps_high: float = setting(
        0.0,
        "the clip range above 1 of the probability ratio (DAPO's clip-higher: [1 - clip-eps, 1 + this]; "
        "0 = the same as --clip-eps)",
        lo=0,
    )
    dual_clip: float = setting(
        0.0,
        "dual-clip PPO (Ye et al. 2020): a token with a negative advantage A loses at most this x |A| "
        "(0 = off, else > 1)",
        lo=0,
    )
    vf_clip_eps: float = setting(0.2, "the clip range of the critic's value updates (with --clip-value)", lo=0)
    vf_coef: float = setting(0.5, "weight of the value loss (a value_head critic shares the policy's loss)", lo=0)
    ent_coef: float = setting(0.0, "weight of the entropy bonus", lo=0)
    gamma: float = setting(
        1.0, "the discount per response token (1 = the final score counts fully at every token)", lo=0, hi=1
    )
    gae_lambda: float = setting(
        0.95, "GAE's lambda: 1 = Monte Carlo returns, lower leans on the critic (less variance, more bias)", lo=0, hi=1
    )
    beta: float = setting(0.05, "KL coefficient to the reference (the initial one with --kl-target)", lo=0)
    kl_target: float = setting(
        1.0,
        "adapt beta towards this KL per sequence (Ziegler et al.'s controller; giving it turns it on)",
        lo=0,
        lo_open=True,
    )
    kl_horizon: float = setting(10_000.0, "the adaptive-KL controller's horizon, in sequences", lo=0, lo_open=True)
    temperature: float = setting(
        1.0, "the sampling temperature of the responses (1 = the policy's own distribution)", lo=0, lo_open=True
    )
    missing_eos_penalty: float = setting(1.0, "subtracted from the score of a response with no stop token", lo=0)
    overlong_penalty: float = setting(
        1.0, "the soft overlong punishment at the budget (with --overlong-buffer): up to this is subtracted", lo=0
    )
    ptx_coef: float = setting(0.0, "weight of the pretraining NLL (with ptx)", lo=0, cli=False)

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:  # the chunk loop's counter: one update is one iteration of batch_size sequences
        return self.num_iterations

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TokenPPOConfig":
        return fields_from_dict(cls, d, "token-PPO config")


def validate_token_config(cfg: TokenPPOConfig, flag_of: Optional[Callable[[str], str]] = None) -> TokenPPOConfig:
    """Check a config: each field's own choices and bounds (its declaration's,
    :func:`~purejaxppo.config.fields.check_fields`), then the checks between fields. Numeric
    fields are checked when concrete (a traced or stacked value is the caller's).

    Args:
      cfg: the config.
      flag_of: maps a field name to the flag the user typed; the messages then name flags
        (``--batch 10`` instead of ``batch_size=10``). None for the Python API.
    Returns:
      ``cfg`` itself.
    Raises:
      ConfigError: naming the first bad field (or flag) and the fix.
    """
    check_fields(cfg, flag_of)

    def say(name, *value):
        return spelled(name, *value, flag_of=flag_of)

    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError(
            f"{say('batch_size', cfg.batch_size)} must be divisible by {say('num_minibatches', cfg.num_minibatches)}"
        )
    if cfg.minibatch_size % cfg.micro_batches:
        raise ConfigError(
            f"the minibatch of {cfg.minibatch_size} sequences must be divisible by "
            f"{say('micro_batches', cfg.micro_batches)}"
        )
    _check_groups(cfg, say)
    _check_loss_family(cfg, say)
    if not all(isinstance(i, numbers.Integral) for i in cfg.stop_ids):
        raise ConfigError(f"{say('stop_ids', cfg.stop_ids)} must be token ids (ints)")
    if cfg.pad_id in cfg.stop_ids:  # the sampler never draws pad_id: a stop equal to it could never be sampled
        raise ConfigError(
            f"pad_id={cfg.pad_id} is also a stop id {cfg.stop_ids}: the sampler never draws the pad id, "
            "so no response could stop; give padding an id of its own (e.g. an unused token, not EOS)"
        )
    _check_lora(cfg, say)
    return cfg


def needs_critic(cfg: TokenPPOConfig) -> bool:
    """Whether the advantages need a critic (GAE's values); the others use a group or batch baseline."""
    return cfg.advantage == "gae"


def _check_groups(cfg: TokenPPOConfig, say) -> None:
    if cfg.batch_size % cfg.group_size:
        raise ConfigError(
            f"{say('batch_size', cfg.batch_size)} responses must split into groups of "
            f"{say('group_size', cfg.group_size)} ({say('batch_size')} / {say('group_size')} prompts per "
            f"iteration); make {say('batch_size')} a multiple of {say('group_size')}"
        )
    if cfg.advantage in GROUP_ADVANTAGES and cfg.group_size < 2:
        raise ConfigError(
            f"{say('advantage', cfg.advantage)} takes its baseline from the other responses to the same prompt: "
            f"{say('group_size', cfg.group_size)} must be >= 2 (or use {say('advantage', 'gae')}, the critic's "
            "baseline)"
        )
    if cfg.dynamic_sampling and cfg.advantage not in GROUP_ADVANTAGES:  # a group one's group_size: checked above
        raise ConfigError(
            f"{say('dynamic_sampling')} drops the groups whose scores all tie (no signal to a group baseline): it needs "
            f"{say('advantage')} one of {GROUP_ADVANTAGES} (not {cfg.advantage!r}) and {say('group_size')} >= 2"
        )


def _check_loss_family(cfg: TokenPPOConfig, say) -> None:
    dual = cfg.dual_clip
    if isinstance(dual, numbers.Real) and dual != 0 and not dual > 1:  # a traced value is the caller's
        raise ConfigError(
            f"{say('dual_clip', dual)} must be 0 (off) or > 1: it bounds a negative-advantage token's loss "
            "by that many times |A|, above the clipped loss's own bound (e.g. 3)"
        )
    if cfg.mask_truncated and not cfg.stop_ids:
        raise ConfigError(
            f"{say('mask_truncated')} drops the responses without a stop token, and with no stop ids "
            f"(stop_ids=()) every response is one; give the model's stop ids or drop {say('mask_truncated')}"
        )


def _check_lora(cfg: TokenPPOConfig, say) -> None:
    if not all(isinstance(t, str) and t for t in cfg.lora_targets):
        raise ConfigError(f"{say('lora_targets', cfg.lora_targets)} must be module names (e.g. ('q_proj', 'v_proj'))")
    if not cfg.lora_rank and (cfg.lora_base_dtype != "float32" or cfg.lora_targets):
        raise ConfigError(
            f"{say('lora_targets')} / {say('lora_base_dtype')} apply to LoRA only; set {say('lora_rank')} > 0 "
            "(or drop them)"
        )


def replace(cfg: TokenPPOConfig, **changes) -> TokenPPOConfig:
    """``cfg`` with ``changes``, validated."""
    return validate_token_config(dataclasses.replace(cfg, **changes))
