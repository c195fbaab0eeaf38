"""One frozen, typed PPO configuration (defaults: docs/conventions.md, "Defaults").

Fields are of two kinds:

* **structural** (``static``): sizes, env name, flags that change shapes or code
  paths. They live in the pytree's treedef, so changing one means a new compile.
* **numeric hyperparameters** (``lr``, ``clip_eps``, ``gamma``, ...): pytree leaves.
  They are traced inside ``jit``, so ``jax.vmap(train)(keys, configs)`` over a batch of
  configs (stacked leaves) trains a whole population in ONE compile.

:func:`validate` raises :class:`ConfigError` naming the field and the fix before
anything is traced. It checks what the config alone knows; ``network`` names an agent,
whose own rules :func:`purejaxppo.agents.registry.check_agent` checks
(:func:`purejaxppo.validate` does both).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Optional

import numpy as np
from flax import struct

ACTIVATIONS = ("tanh", "relu", "gelu", "elu", "swish")
ADV_NORMS = ("minibatch", "batch", "none")
ACTION_STDS = ("param", "softplus")  # Gaussian policy scale: see networks.ActorCritic
ROLLOUT_RNGS = ("threefry", "unsafe_rbg", "rbg")
AGENT_CRITICS = ("independent", "centralised")  # multi-agent (jaxmarl) critics: IPPO's own obs, MAPPO's global state


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the fix."""


def static(default):
    return struct.field(pytree_node=False, default=default)


@struct.dataclass
class PPOConfig:
    # --- structural (static) --------------------------------------------------------
    env_name: str = static("CartPole-v1")
    num_envs: int = static(4)
    num_steps: int = static(128)
    total_timesteps: int = static(500_000)
    update_epochs: int = static(4)
    num_minibatches: int = static(4)
    hidden_sizes: tuple = static((64, 64))
    activation: str = static("tanh")
    network: str = static("mlp")  # a registered agent's name (purejaxppo.agents.registry): mlp, cnn, gru, yours
    shared_torso: bool = static(False)
    # Gaussian (Box) actions: "param" = a learned state-independent log-std (std 1 at init);
    # "softplus" = std softplus(dense(features)) + 0.001 from the actor torso (about 0.7 at init), as
    # gymnax-blines' PPO agents have it
    action_std: str = static("param")
    anneal_lr: bool = static(True)
    clip_value: bool = static(True)
    adv_norm: str = static("minibatch")
    max_episode_steps: Optional[int] = static(None)  # override the env's time limit
    # suites with expensive resets (Craftax): one fresh start per group of this many envs per step
    # ("optimistic" resets; exact while at most one episode per group ends on a step), 1 = every env its own
    reset_ratio: int = static(1)
    obs_keep: Optional[tuple] = static(
        None
    )  # keep only these flat obs indices, e.g. (0, 2): CartPole without velocities
    gru_size: int = static(128)  # GRU hidden size (network="gru")
    normalize_obs: bool = static(False)
    normalize_reward: bool = static(False)  # scale by the running std of the discounted return
    freeze_obs_norm: bool = static(False)  # keep observation statistics fixed (e.g. restored ones)
    bootstrap_truncated: bool = static(
        True
    )  # False: a time-limit end counts as terminal (no bootstrap), as in gymnax-blines
    rollout_unroll: int = static(1)  # lax.scan unroll of the rollout (speed only)
    # multi-agent envs (jaxmarl:NAME; num_envs counts rows = envs x agents): "independent" = each agent's
    # critic sees its own observation (IPPO); "centralised" = a global state (MAPPO)
    agent_critic: str = static("independent")
    agent_ids: bool = static(False)  # append each agent's one-hot id to its observation (jaxmarl)
    rollout_rng: str = static(
        "threefry"
    )  # PRNG of env noise + action sampling: "threefry" | "unsafe_rbg" (~4x cheaper on CPU)
    # --- numeric hyperparameters (traced leaves) --------------------------------------
    lr: float = 2.5e-4
    critic_lr: Optional[float] = None  # None: one rate for all; a float: the critic's own rate
    clip_eps: float = 0.2
    vf_clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    gamma: float = 0.99
    gae_lambda: float = 0.95
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    target_kl: Optional[float] = None  # None: no early stop (structural); a float: traced
    # None: anneal_lr decides (to 0 over the run, or constant); a float: the rate moves linearly from lr to
    # lr_end over the first lr_ramp_steps OPTIMIZER steps (minibatch steps, as optax counts), then stays there
    lr_end: Optional[float] = None
    lr_ramp_steps: float = 0.0

    # --- derived ------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """Transitions per update, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    @classmethod
    def numeric_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("pytree_node", True))

    @classmethod
    def static_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("pytree_node", True))

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PPOConfig":
        return fields_from_dict(cls, d)


def fields_to_dict(cfg) -> dict:
    """A config dataclass as JSON-ready ``{field: value}`` (tuples as lists, arrays as lists)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, tuple):
            v = list(v)
        elif hasattr(v, "tolist"):
            v = v.tolist()
        out[f.name] = v
    return out


def fields_from_dict(cls, d: dict, what: str = "config"):
    """``cls(**d)`` with lists back as tuples; an unknown field raises :class:`ConfigError`
    naming it and the valid ones (``what`` names the config in the message)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"unknown {what} field(s) {unknown}; valid fields: {sorted(names)}")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


def _is_traced(x) -> bool:
    import jax

    return isinstance(x, jax.core.Tracer)


def _check_int(cfg, name, minimum=1):
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ConfigError(f"{name}={v!r} must be an integer; pass e.g. {name}={max(minimum, 1)}")
    if v < minimum:
        raise ConfigError(f"{name}={v} must be >= {minimum}; pass a value >= {minimum}")


INT32_MAX = 2**31 - 1  # JAX's integers on the device (x64 off): the update counter, per-update counts


def _check_counters(cfg) -> None:
    """The device counts in int32: a config whose counters would wrap is refused, naming the bound."""
    if cfg.batch_size > INT32_MAX:
        raise ConfigError(
            f"num_envs*num_steps={cfg.num_envs}*{cfg.num_steps}={cfg.batch_size:,} is past "
            f"2**31-1={INT32_MAX:,} (the device counts a batch in int32); lower num_envs or num_steps"
        )
    per = cfg.update_epochs * cfg.num_minibatches if cfg.lr_end is not None else 1
    if cfg.num_updates * per > INT32_MAX:
        what = (
            f" x update_epochs*num_minibatches={per} = {cfg.num_updates * per:,} optimizer steps (the lr_end "
            "ramp counts them)"
            if per > 1
            else ""
        )
        raise ConfigError(
            f"total_timesteps={cfg.total_timesteps:,} gives num_updates={cfg.num_updates:,}{what}, past "
            f"2**31-1={INT32_MAX:,}: the device counts in int32 (JAX without x64) and would wrap; lower "
            f"total_timesteps to at most {INT32_MAX // per * cfg.batch_size:,} or raise num_envs/num_steps"
        )


def _check_num(cfg, name, lo=None, hi=None, lo_open=False, hi_open=False, hint=""):
    v = getattr(cfg, name)
    if _is_traced(v):
        return
    if isinstance(v, (str, bytes, bool)) or v is None:
        raise ConfigError(f"{name}={v!r} must be a number, not {type(v).__name__}{hint}")
    try:
        arr = np.asarray(v)
        if arr.dtype.kind not in "iuf":
            raise TypeError
        arr = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={v!r} must be a number{hint}") from None
    if arr.dtype == object or not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name}={v!r} must be a finite number{hint}")
    lo_s = "(" if lo_open else "["
    hi_s = ")" if hi_open else "]"
    rng = f"{lo_s}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{hi_s}"
    bad = np.zeros(arr.shape, bool)
    if lo is not None:
        bad |= (arr <= lo) if lo_open else (arr < lo)
    if hi is not None:
        bad |= (arr >= hi) if hi_open else (arr > hi)
    if np.any(bad):
        raise ConfigError(f"{name}={v!r} is outside {rng}{hint}")


def validate(cfg: PPOConfig) -> PPOConfig:
    """Raise :class:`ConfigError` on the first invalid field; return ``cfg`` unchanged."""
    if not isinstance(cfg.env_name, str) or not cfg.env_name:
        raise ConfigError(f"env_name={cfg.env_name!r} must be a registered gymnax environment name")
    for name in ("num_envs", "num_steps", "total_timesteps", "update_epochs", "num_minibatches", "rollout_unroll"):
        _check_int(cfg, name)
    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError(
            f"num_minibatches={cfg.num_minibatches} does not divide the batch num_envs*num_steps="
            f"{cfg.num_envs}*{cfg.num_steps}={cfg.batch_size}; choose a divisor of {cfg.batch_size}"
        )
    if cfg.total_timesteps < cfg.batch_size:
        raise ConfigError(
            f"total_timesteps={cfg.total_timesteps} is smaller than one batch (num_envs*num_steps="
            f"{cfg.batch_size}); raise total_timesteps or lower num_envs/num_steps"
        )
    _check_counters(cfg)
    if cfg.max_episode_steps is not None:
        _check_int(cfg, "max_episode_steps")
    _check_int(cfg, "reset_ratio")
    if cfg.num_envs % cfg.reset_ratio:
        raise ConfigError(
            f"reset_ratio={cfg.reset_ratio} must divide num_envs={cfg.num_envs} (resets are shared "
            "within groups of reset_ratio consecutive envs); choose a divisor of num_envs"
        )
    _check_int(cfg, "gru_size")
    if cfg.obs_keep is not None and (
        not isinstance(cfg.obs_keep, tuple)
        or not cfg.obs_keep
        or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0 for i in cfg.obs_keep)
    ):
        raise ConfigError(
            f"obs_keep={cfg.obs_keep!r} must be None or a non-empty tuple of observation indices, e.g. (0, 2)"
        )
    if (
        not isinstance(cfg.hidden_sizes, tuple)
        or not cfg.hidden_sizes
        or not all(isinstance(h, numbers.Integral) and not isinstance(h, bool) and h > 0 for h in cfg.hidden_sizes)
    ):
        raise ConfigError(
            f"hidden_sizes={cfg.hidden_sizes!r} must be a non-empty tuple of positive ints, e.g. (64, 64)"
        )
    if cfg.activation not in ACTIVATIONS:
        raise ConfigError(f"activation={cfg.activation!r} is unknown; choose one of {ACTIVATIONS}")
    if cfg.adv_norm not in ADV_NORMS:
        raise ConfigError(f"adv_norm={cfg.adv_norm!r} is unknown; choose one of {ADV_NORMS}")
    if cfg.rollout_rng not in ROLLOUT_RNGS:
        raise ConfigError(f"rollout_rng={cfg.rollout_rng!r} is unknown; choose one of {ROLLOUT_RNGS}")
    if not isinstance(cfg.network, str) or not cfg.network:
        # which names exist is the agent registry's to say (purejaxppo.agents.registry.check_agent)
        raise ConfigError(f"network={cfg.network!r} must be the name of a registered agent, e.g. 'mlp'")
    if cfg.action_std not in ACTION_STDS:
        raise ConfigError(f"action_std={cfg.action_std!r} is unknown; choose one of {ACTION_STDS}")
    if cfg.agent_critic not in AGENT_CRITICS:
        raise ConfigError(f"agent_critic={cfg.agent_critic!r} is unknown; choose one of {AGENT_CRITICS}")
    multi_agent = cfg.env_name.startswith("jaxmarl:")
    if cfg.agent_critic == "centralised" and not multi_agent:
        raise ConfigError(
            f"agent_critic='centralised' is for multi-agent envs (jaxmarl:NAME); {cfg.env_name} has one "
            "agent: use agent_critic='independent'"
        )
    if cfg.agent_ids and not multi_agent:
        raise ConfigError(f"agent_ids=True is for multi-agent envs (jaxmarl:NAME); {cfg.env_name} has one agent")
    if cfg.agent_critic == "centralised" and (cfg.shared_torso or cfg.obs_keep is not None):
        raise ConfigError(
            "agent_critic='centralised' gives the critic its own input (the global state): it takes "
            "neither shared_torso=True nor obs_keep; drop them"
        )
    for name in (
        "shared_torso",
        "anneal_lr",
        "clip_value",
        "normalize_obs",
        "normalize_reward",
        "freeze_obs_norm",
        "bootstrap_truncated",
        "agent_ids",
    ):
        if not isinstance(getattr(cfg, name), bool):
            raise ConfigError(f"{name}={getattr(cfg, name)!r} must be True or False")
    _check_num(cfg, "lr", lo=0, lo_open=True, hint="; the learning rate must be positive, e.g. 2.5e-4")
    _check_num(cfg, "clip_eps", lo=0, lo_open=True, hint="; the PPO clip range must be positive, e.g. 0.2")
    _check_num(cfg, "vf_clip_eps", lo=0, lo_open=True, hint="; use clip_value=False to disable value clipping")
    _check_num(cfg, "vf_coef", lo=0, hint="; e.g. 0.5")
    _check_num(cfg, "ent_coef", lo=0, hint="; e.g. 0.01")
    _check_num(cfg, "gamma", lo=0, hi=1, lo_open=True, hint="; the discount must be in (0, 1], e.g. 0.99")
    _check_num(cfg, "gae_lambda", lo=0, hi=1, hint="; GAE lambda must be in [0, 1], e.g. 0.95")
    _check_num(cfg, "max_grad_norm", lo=0, lo_open=True, hint="; e.g. 0.5")
    _check_num(cfg, "adam_eps", lo=0, lo_open=True, hint="; e.g. 1e-5")
    if cfg.critic_lr is not None:
        _check_num(cfg, "critic_lr", lo=0, lo_open=True, hint="; or None to use lr for the critic too")
        if cfg.shared_torso:
            raise ConfigError(
                "critic_lr needs separate actor and critic torsos; set shared_torso=False or critic_lr=None"
            )
    if cfg.target_kl is not None:
        _check_num(cfg, "target_kl", lo=0, lo_open=True, hint="; or None to disable early stopping")
    if cfg.lr_end is not None:
        _check_num(cfg, "lr_end", lo=0, lo_open=True, hint="; or None for the anneal_lr schedule")
        _check_num(
            cfg,
            "lr_ramp_steps",
            lo=0,
            lo_open=True,
            hint="; the optimizer steps over which lr moves to lr_end, e.g. 1000",
        )
        if cfg.anneal_lr:
            raise ConfigError(
                "lr_end sets its own schedule (lr -> lr_end over lr_ramp_steps, then constant); "
                "set anneal_lr=False with it, or lr_end=None to anneal to 0"
            )
    return cfg


def check_structure(built: PPOConfig, passed: PPOConfig) -> None:
    """Refuse a config whose structural fields differ from the ones a step was built with.

    Structural fields fix shapes and code paths when the step is BUILT; only numeric
    fields are read from the config passed at call time. A differing structural field
    would otherwise be ignored without a word."""
    if not isinstance(passed, PPOConfig):
        raise ConfigError(f"expected a PPOConfig, got {type(passed).__name__}")
    diff = [f for f in PPOConfig.static_fields() if getattr(built, f) != getattr(passed, f)]
    if diff:
        shown = ", ".join(f"{f} (built {getattr(built, f)!r}, passed {getattr(passed, f)!r})" for f in diff)
        raise ConfigError(
            f"the config passed differs from the one this PPO was built with in structural field(s) "
            f"{shown}; structural fields fix shapes and code when the step is built: build a new one "
            "with make_ppo(config) for that config, and pass only numeric changes (lr, gamma, ...)"
        )
