"""Agents by name: ``PPOConfig.network`` names a registered agent.

An entry (:class:`AgentKind`) is everything the rest of the library needs to know about
an agent without asking which one it is:

* ``build(config, spec) -> Agent``: the :class:`~purejaxppo.agents.agent.Agent` for an env
  (raise :class:`~purejaxppo.config.ConfigError` for an env it cannot take, naming why);
* ``sequence_units``: its minibatch units are whole env sequences (a recurrent agent:
  ``num_envs / num_minibatches`` sequences per minibatch) rather than single transitions
  (``num_envs * num_steps / num_minibatches``): the step's, the device split's and the
  CLI's divisibility rules read it here;
* ``check(config)``: config checks of its own (raise ``ConfigError``), run before any env
  is built;
* ``fields``: the config fields that decide its parameters; a warm start
  (``train --init-from``) needs them equal to the source run's.

Built in: ``"mlp"``, ``"cnn"`` (feed-forward, :mod:`purejaxppo.agents.networks`) and ``"gru"``
(:mod:`purejaxppo.agents.recurrent`). Register your own with :func:`register_agent`; a run
whose config names it is then trained, evaluated, resumed and warm-started like a built-in
one (``load_run`` rebuilds the agent by the name in the run folder's ``config.json``, so the
process that loads it must have registered the name too: import your module first).

Why the name check is here and not in :func:`purejaxppo.config.validate`: the config is the
lowest layer and cannot see the agents. ``config.validate`` checks what the config alone
knows (``network`` is a non-empty name); :func:`check_agent` checks the name and the agent's
own rules, and :func:`validate_config` does both (``purejaxppo.validate``; ``make_ppo`` calls
it before it builds anything).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Protocol

from purejaxppo.agents.agent import Agent, feed_forward
from purejaxppo.agents.networks import make_network
from purejaxppo.agents.recurrent import gru_agent
from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.envs.core import EnvSpec


class BuildAgent(Protocol):
    def __call__(self, config: PPOConfig, spec: EnvSpec) -> Agent:
        """The agent for ``spec``'s env; reads the config's structural fields only (sizes,
        activation, ...). Raises ``ConfigError`` naming the env property it cannot take."""


class CheckConfig(Protocol):
    def __call__(self, config: PPOConfig) -> None:
        """Raise ``ConfigError`` (naming the field and the fix) for a config this agent refuses."""


#: the fields a warm start compares when an agent does not name its own (the former fixed list)
DEFAULT_FIELDS = ("hidden_sizes", "activation", "shared_torso", "gru_size")


class AgentKind(NamedTuple):
    """A registered agent: what the step, the device split, the CLI and the run folders need
    to know about it (see the module docstring)."""

    name: str
    build: BuildAgent
    sequence_units: bool = False
    check: Optional[CheckConfig] = None
    fields: tuple = DEFAULT_FIELDS


_REGISTRY: dict[str, AgentKind] = {}


def register_agent(
    name: str,
    build: BuildAgent,
    *,
    sequence_units: bool = False,
    check: Optional[CheckConfig] = None,
    fields: tuple = DEFAULT_FIELDS,
    replace: bool = False,
) -> AgentKind:
    """Register ``build`` as the agent ``PPOConfig(network=name)`` builds; returns its entry.

    A name already registered is refused unless ``replace=True`` (so a typo cannot silently
    swap out a built-in)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"an agent's name must be a non-empty string, not {name!r}")
    if not callable(build):
        raise ConfigError(f"register_agent({name!r}, build): build must be callable as build(config, spec) -> Agent")
    if name in _REGISTRY and not replace:
        raise ConfigError(
            f"an agent named {name!r} is already registered; choose another name, or pass replace=True to replace it"
        )
    unknown = [f for f in fields if f not in PPOConfig.static_fields()]
    if unknown:
        raise ConfigError(
            f"register_agent({name!r}): fields {unknown} are not structural PPOConfig fields; "
            f"choose from {PPOConfig.static_fields()}"
        )
    kind = AgentKind(name, build, bool(sequence_units), check, tuple(fields))
    _REGISTRY[name] = kind
    return kind


def unregister_agent(name: str) -> None:
    """Forget the agent ``name`` (e.g. one a test registered)."""
    if name not in _REGISTRY:
        raise ConfigError(f"no agent named {name!r} is registered; registered: {registered_agents()}")
    del _REGISTRY[name]


def registered_agents() -> tuple:
    """The registered names, sorted."""
    return tuple(sorted(_REGISTRY))


def agent_kind(name: str) -> AgentKind:
    """The entry of ``name``; an unknown name is a ``ConfigError`` listing the registered ones."""
    if name not in _REGISTRY:
        raise ConfigError(
            f"network={name!r} is not a registered agent; choose one of {registered_agents()}, "
            "or register your own first with purejaxppo.agents.registry.register_agent(name, build)"
        )
    return _REGISTRY[name]


def check_agent(config: PPOConfig) -> AgentKind:
    """The entry ``config.network`` names, after its rules: the sequence rule of a
    sequence-unit agent, then its own ``check``."""
    kind = agent_kind(config.network)
    if kind.sequence_units and config.num_envs % config.num_minibatches:
        raise ConfigError(
            f"num_minibatches={config.num_minibatches} must divide num_envs={config.num_envs} for the "
            f"{config.network!r} agent (minibatches are whole env sequences); choose a divisor of num_envs"
        )
    if kind.check is not None:
        kind.check(config)
    return kind


def validate_config(config: PPOConfig) -> PPOConfig:
    """:func:`purejaxppo.config.validate`, then :func:`check_agent`; returns ``config``."""
    validate(config)
    check_agent(config)
    return config


def minibatch_units(config: PPOConfig) -> tuple:
    """``(units per minibatch, what a unit is)``: env sequences for a sequence-unit agent,
    transitions otherwise (what a device split must divide)."""
    if agent_kind(config.network).sequence_units:
        return config.num_envs // config.num_minibatches, "env sequences (num_envs/num_minibatches)"
    return config.minibatch_size, "transitions (num_envs*num_steps/num_minibatches)"


def build_agent(config: PPOConfig, spec: EnvSpec) -> Agent:
    """The agent ``config.network`` names, for ``spec``'s env."""
    return check_agent(config).build(config, spec)


# --- the built-in agents ------------------------------------------------------------------
def _feed_forward(torso: str):
    def build(config: PPOConfig, spec: EnvSpec) -> Agent:
        if torso == "cnn" and len(spec.obs_shape) != 3:
            raise ConfigError(
                f"network='cnn' needs image observations [H, W, C]; {config.env_name} has shape "
                f"{spec.obs_shape}; use network='mlp'"
            )
        return feed_forward(
            make_network(
                spec,
                config.hidden_sizes,
                config.activation,
                torso=torso,
                shared_torso=config.shared_torso,
                action_std=config.action_std,
            )
        )

    return build


def _gru(config: PPOConfig, spec: EnvSpec) -> Agent:
    return gru_agent(spec, config.gru_size, config.hidden_sizes, config.activation)


def _gru_check(config: PPOConfig) -> None:
    if config.action_std != "param":
        raise ConfigError(
            "action_std='softplus' is for the feed-forward networks; the GRU agent has a "
            "state-independent log-std (action_std='param')"
        )


FF_FIELDS = ("hidden_sizes", "activation", "shared_torso")
register_agent("mlp", _feed_forward("mlp"), fields=FF_FIELDS)
register_agent("cnn", _feed_forward("cnn"), fields=FF_FIELDS)
register_agent("gru", _gru, sequence_units=True, check=_gru_check, fields=("hidden_sizes", "activation", "gru_size"))
