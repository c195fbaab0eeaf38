"""The configuration of token-level PPO (:mod:`purejaxppo.lm.ppo.token_ppo`), frozen and typed.

As :class:`purejaxppo.config.PPOConfig`: **structural** fields (``static``: sizes, flags,
estimator names, stop ids) live in the treedef, so changing one compiles anew; **numeric**
fields (learning rates, coefficients, the initial KL coefficient, temperature) are pytree
leaves, traced under ``jit``: ``jax.vmap(train)(keys, configs)`` over stacked configs (a
sweep over ``beta``, say) compiles once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from flax import struct

from purejaxppo.config import ConfigError
from purejaxppo.config.ppo_config import fields_from_dict, fields_to_dict, static

CRITICS = ("separate", "value_head")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
AGGREGATIONS = ("token-mean", "seq-mean")
BASE_DTYPES = ("float32", "bfloat16")
ADVANTAGES = ("gae", "grpo", "rloo")
KL_IN = ("reward", "loss")


@struct.dataclass
class TokenPPOConfig:
    # --- structural (static) --------------------------------------------------------------
    batch_size: int = static(64)  # responses per iteration: batch_size / group_size prompts, each group_size times
    # responses sampled per prompt: rows [g*G, (g+1)*G) answer one prompt (each row its own key)
    group_size: int = static(1)
    # gae: the critic's GAE | grpo: (r - group mean) / group std | rloo: r - the others' mean (no critic)
    advantage: str = static("gae")
    kl_in: str = static("reward")  # reward: beta * KL per token in the rewards | loss: beta * KL as a loss term
    num_iterations: int = static(100)
    update_epochs: int = static(4)
    num_minibatches: int = static(4)  # over sequences; batch_size must divide evenly
    micro_batches: int = static(1)  # gradient accumulation: each minibatch in this many passes
    max_new_tokens: int = static(16)  # response budget T
    stop_ids: tuple = static((1,))  # a response ends after the first of these (its EOS)
    pad_id: int = static(0)
    top_k: int = static(0)  # 0 = off
    top_p: float = static(1.0)  # 1.0 = off (static: sorting the vocabulary is a code path)
    kl_estimator: str = static("k1")  # the per-token KL (in the rewards or the loss): k1 | k2 | k3 | abs
    aggregation: str = static("token-mean")  # token-mean | seq-mean
    # gae's critic (grpo / rloo have none): separate: its own model and params; value_head: on the policy's trunk
    critic: str = static("separate")
    whiten_advantages: bool = static(True)  # gae's, over the whole batch's valid tokens (micro-batching stays exact)
    clip_value: bool = static(True)
    adaptive_kl: bool = static(False)  # Ziegler et al.'s controller drives beta towards kl_target
    # the smallest response width the teacher-forced passes and the update run at: the batch is cut
    # to the first rung of 16, 32, 64, ... (up to max_new_tokens) that holds its longest response
    # (purejaxppo.lm.models.length_buckets), and the rungs the sampler's KV cache grows by
    # (sampling.sample_response's rungs); 0 = always the whole budget. Without stop_ids no response
    # can end early: the passes and the update then run at the budget alone (smallest_width)
    length_buckets: int = static(16)
    ptx: bool = static(False)  # add ptx_coef * NLL of a supplied pretraining batch to the policy loss
    # LoRA (purejaxppo.lm.models.lora): rank > 0 trains low-rank adapters (and the value head) on a frozen base,
    # which is also the reference; alpha is static (the scale alpha/rank is part of the adapters' structure)
    lora_rank: int = static(0)  # 0 = off: full fine-tuning
    lora_alpha: float = static(16.0)
    lora_targets: tuple = static(())  # module names (path suffixes); () = lora.DEFAULT_TARGETS
    lora_base_dtype: str = static("float32")  # the frozen base's storage: float32 | bfloat16
    # --- numeric (traced) -----------------------------------------------------------------
    actor_lr: float = 1e-4
    critic_lr: float = 1e-4
    max_grad_norm: float = 1.0  # each network's gradient clipped apart
    adam_eps: float = 1e-8
    clip_eps: float = 0.2
    vf_clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    gamma: float = 1.0
    gae_lambda: float = 0.95
    beta: float = 0.05  # KL coefficient (the initial one under adaptive_kl)
    kl_target: float = 1.0  # adaptive_kl: the target KL per sequence
    kl_horizon: float = 10_000.0  # adaptive_kl: the controller's horizon, in sequences
    temperature: float = 1.0
    missing_eos_penalty: float = 1.0  # subtracted from the score of a response with no stop token
    ptx_coef: float = 0.0

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    # the chunk loop's counters: one update is one iteration of ``batch_size`` sequences
    @property
    def num_updates(self) -> int:
        return self.num_iterations

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TokenPPOConfig":
        return fields_from_dict(cls, d, "token-PPO config")


def _positive_int(cfg, name):
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ConfigError(f"{name}={v!r} must be a positive integer")


def validate_token_config(cfg: TokenPPOConfig) -> TokenPPOConfig:
    """Raise :class:`ConfigError` naming the field and the fix; return ``cfg``. Numeric
    fields are checked when concrete (a traced or stacked value is the caller's)."""
    for name in (
        "batch_size",
        "group_size",
        "num_iterations",
        "update_epochs",
        "num_minibatches",
        "micro_batches",
        "max_new_tokens",
    ):
        _positive_int(cfg, name)
    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError(f"batch_size={cfg.batch_size} must be divisible by num_minibatches={cfg.num_minibatches}")
    if cfg.minibatch_size % cfg.micro_batches:
        raise ConfigError(
            f"the minibatch of {cfg.minibatch_size} sequences must be divisible by micro_batches={cfg.micro_batches}"
        )
    choices = {
        "kl_estimator": KL_ESTIMATORS,
        "aggregation": AGGREGATIONS,
        "critic": CRITICS,
        "advantage": ADVANTAGES,
        "kl_in": KL_IN,
    }
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"{name}={getattr(cfg, name)!r} must be one of {allowed}")
    _check_groups(cfg)
    if (
        isinstance(cfg.length_buckets, bool)
        or not isinstance(cfg.length_buckets, numbers.Integral)
        or cfg.length_buckets < 0
    ):
        raise ConfigError(
            f"length_buckets={cfg.length_buckets!r} must be an integer >= 0 (the smallest response width; 0 = off)"
        )
    if isinstance(cfg.top_k, bool) or not isinstance(cfg.top_k, numbers.Integral) or cfg.top_k < 0:
        raise ConfigError(f"top_k={cfg.top_k!r} must be an integer >= 0 (0 = off)")
    if not 0.0 < float(cfg.top_p) <= 1.0:
        raise ConfigError(f"top_p={cfg.top_p!r} must be in (0, 1] (1 = off)")
    if not all(isinstance(i, numbers.Integral) for i in cfg.stop_ids):
        raise ConfigError(f"stop_ids={cfg.stop_ids!r} must be token ids (ints)")
    if cfg.pad_id in cfg.stop_ids:  # the sampler never draws pad_id: a stop equal to it could never be sampled
        raise ConfigError(
            f"pad_id={cfg.pad_id} is also a stop id {cfg.stop_ids}: the sampler never draws the pad id, "
            "so no response could stop; give padding an id of its own (e.g. an unused token, not EOS)"
        )
    for f in dataclasses.fields(cfg):  # NaN passes every `v < lo` test; inf trains to NaN after a compile
        v = getattr(cfg, f.name)
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isfinite(v):
            raise ConfigError(f"{f.name}={v!r} must be a finite number")
    _check_lora(cfg)
    for name, lo in (
        ("actor_lr", 0.0),
        ("critic_lr", 0.0),
        ("max_grad_norm", 0.0),
        ("clip_eps", 0.0),
        ("temperature", 0.0),
        ("kl_target", 0.0),
        ("kl_horizon", 0.0),
    ):
        v = getattr(cfg, name)
        if isinstance(v, numbers.Real) and not v > lo:
            raise ConfigError(f"{name}={v!r} must be > {lo}")
    for name in ("beta", "vf_coef", "ent_coef", "missing_eos_penalty", "ptx_coef", "vf_clip_eps", "adam_eps"):
        v = getattr(cfg, name)
        if isinstance(v, numbers.Real) and not v >= 0:
            raise ConfigError(f"{name}={v!r} must be >= 0")
    for name in ("gamma", "gae_lambda"):
        v = getattr(cfg, name)
        if isinstance(v, numbers.Real) and not 0.0 <= v <= 1.0:
            raise ConfigError(f"{name}={v!r} must be in [0, 1]")
    return cfg


def needs_critic(cfg: TokenPPOConfig) -> bool:
    """Whether the advantages need a critic (GAE's values); grpo / rloo use a group baseline."""
    return cfg.advantage == "gae"


def _check_groups(cfg: TokenPPOConfig) -> None:
    if cfg.batch_size % cfg.group_size:
        raise ConfigError(
            f"batch_size={cfg.batch_size} responses must split into groups of group_size={cfg.group_size} "
            "(batch_size / group_size prompts per iteration); make batch_size a multiple of group_size"
        )
    if cfg.advantage != "gae" and cfg.group_size < 2:
        raise ConfigError(
            f"advantage={cfg.advantage!r} takes its baseline from the other responses to the same prompt: "
            f"group_size={cfg.group_size} must be >= 2 (or use advantage='gae', the critic's baseline)"
        )


def _check_lora(cfg: TokenPPOConfig) -> None:
    rank = cfg.lora_rank
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
        raise ConfigError(f"lora_rank={rank!r} must be an integer >= 0 (0 = full fine-tuning)")
    if not isinstance(cfg.lora_alpha, numbers.Real) or not cfg.lora_alpha > 0:
        raise ConfigError(f"lora_alpha={cfg.lora_alpha!r} must be > 0 (the adapters' scale is alpha / rank)")
    if not all(isinstance(t, str) and t for t in cfg.lora_targets):
        raise ConfigError(f"lora_targets={cfg.lora_targets!r} must be module names (e.g. ('q_proj', 'v_proj'))")
    if cfg.lora_base_dtype not in BASE_DTYPES:
        raise ConfigError(f"lora_base_dtype={cfg.lora_base_dtype!r} must be one of {BASE_DTYPES}")
    if not rank and (cfg.lora_base_dtype != "float32" or cfg.lora_targets):
        raise ConfigError("lora_targets / lora_base_dtype apply to LoRA only; set lora_rank > 0 (or drop them)")


def replace(cfg: TokenPPOConfig, **changes) -> TokenPPOConfig:
    """``cfg`` with ``changes``, validated."""
    return validate_token_config(dataclasses.replace(cfg, **changes))
