"""``SUITE:NAME`` environment names: which adapter builds them and which extra installs it.

Plain names (``CartPole-v1``) and ``gymnax:NAME`` are gymnax environments. Every other
suite is an optional extra; its adapter module (``<suite>_suite.py`` beside this file)
is imported only when one of its envs is asked for, and a suite whose package is
missing fails at once with a one-line :class:`~purejaxppo.config.ConfigError` naming the
``pip install`` command.
"""

from __future__ import annotations

import importlib
from typing import Callable, NamedTuple, Optional

import jax

from purejaxppo.config import ConfigError
from purejaxppo.envs.core import VecEnv
from purejaxppo.envs.gymnax_suite import make_gymnax_vec_env, registered_envs


class Suite(NamedTuple):
    adapter: str  # module in purejaxppo.envs
    package: str  # the import that must succeed
    example: str
    about: str


SUITES = {
    "brax": Suite("brax_suite", "brax", "brax:inverted_pendulum", "Brax physics (continuous control)"),
    "playground": Suite(
        "playground_suite",
        "mujoco_playground",
        "playground:CartpoleBalance",
        "MuJoCo Playground on MJX (DM Control suite, locomotion, manipulation)",
    ),
    "jumanji": Suite("jumanji_suite", "jumanji", "jumanji:Snake-v1", "Jumanji (combinatorial, games; action masks)"),
    "craftax": Suite("craftax_suite", "craftax", "craftax:Craftax-Classic-Symbolic-v1", "Craftax (open-world)"),
    "navix": Suite("navix_suite", "navix", "navix:Navix-Empty-5x5-v0", "NAVIX (MiniGrid in JAX)"),
    "xminigrid": Suite("xminigrid_suite", "xminigrid", "xminigrid:MiniGrid-Empty-6x6", "XLand-MiniGrid"),
    "pgx": Suite("pgx_suite", "pgx", "pgx:2048", "pgx games (single-player; action masks)"),
    "jaxmarl": Suite(
        "jaxmarl_suite",
        "jaxmarl",
        "jaxmarl:MPE_simple_spread_v3",
        "JaxMARL multi-agent (MPE, SMAX 3m/2s3z...; agents folded into rows: num_envs = envs x agents)",
    ),
}


def pip_command(suite: str) -> str:
    return f'pip install "purejaxppo[{suite}]"'


def split_name(name: str) -> tuple[str, str]:
    """``"brax:ant" -> ("brax", "ant")``; a plain name is gymnax's."""
    prefix, sep, rest = name.partition(":")
    return (prefix, rest) if sep else ("gymnax", name)


def check_env_name(name) -> None:
    """``--env`` parsed strictly, before anything is built or looked up: a ConfigError naming
    the fix for an empty name or suite, spaces around it, or a suite that is unknown or not installed."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"env name {name!r} is empty; pass e.g. --env CartPole-v1 (see `python -m purejaxppo envs`)")
    if name != name.strip():
        raise ConfigError(f"env name {name!r} has spaces around it; pass --env {name.strip()}")
    suite, sep, rest = name.partition(":")
    if sep and not suite:
        example = rest if rest and ":" not in rest else "CartPole-v1"
        raise ConfigError(
            f"env name {name!r} has an empty suite before ':'; gymnax envs need no prefix "
            f"(--env {example}), other suites are SUITE:NAME with SUITE one of {', '.join(SUITES)}"
        )
    if sep and not rest:
        raise ConfigError(
            f"env name {name!r} names no environment after '{suite}:'; list them with "
            f"`python -m purejaxppo envs --suite {suite}`"
        )
    if sep and suite != "gymnax":
        adapter(suite)  # an unknown suite or a missing extra: its own message


def installed(suite: str) -> bool:
    return importlib.util.find_spec(SUITES[suite].package) is not None


def adapter(suite: str):
    """The adapter module of ``suite``; a missing package is a one-line ConfigError."""
    if suite not in SUITES:
        raise ConfigError(
            f"unknown environment suite {suite!r}; suites: gymnax (no prefix), "
            f"{', '.join(SUITES)}; see `python -m purejaxppo envs`"
        )
    if not installed(suite):
        raise ConfigError(f"the {suite} suite is not installed; install it with: {pip_command(suite)}")
    return importlib.import_module(f"{__package__}.{SUITES[suite].adapter}")


def env_names(suite: str) -> list[str]:
    """The env names of an installed suite (without the prefix)."""
    return registered_envs() if suite == "gymnax" else adapter(suite).env_names()


def suite_options(config) -> dict:
    """The adapter arguments a :class:`~purejaxppo.config.PPOConfig` asks for beyond the common ones:
    a multi-agent env's global state (``agent_critic="centralised"``) and agent ids; ``{}`` elsewhere."""
    if split_name(config.env_name)[0] != "jaxmarl":
        return {}
    return dict(global_state=config.agent_critic == "centralised", agent_ids=config.agent_ids)


def make_vec_env(
    name: str,
    num_envs: int,
    max_episode_steps: Optional[int] = None,
    env_keys: Optional[Callable[[jax.Array], jax.Array]] = None,
    reset_ratio: int = 1,
    **env_kwargs,
) -> VecEnv:
    """Vectorise env ``name`` (``SUITE:NAME`` or a gymnax name) over ``num_envs`` copies.

    Every suite meets the same contract (auto-reset; ``terminated`` / ``truncated`` apart;
    ``info["final_observation"]`` the pre-reset observation). ``env_keys(key) ->
    [num_envs]`` keys derives the per-env keys of a reset/step (default:
    ``split(key, num_envs)``); data-parallel training passes one device's slice of the
    global split so that sharded rollouts equal the single-device one. ``reset_ratio > 1``
    computes one fresh start per group of that many envs per step ("optimistic" resets, for
    suites whose reset is expensive: :func:`~purejaxppo.envs.core.auto_reset_vec_env`)."""
    check_env_name(name)
    suite, rest = split_name(name)
    if suite == "gymnax":
        if reset_ratio != 1:
            raise ConfigError(
                f"reset_ratio={reset_ratio!r} is for the suites whose auto-reset purejaxppo computes "
                f"({', '.join(SUITES)}); gymnax's own step resets {name} (cheaply): use reset_ratio=1"
            )
        return make_gymnax_vec_env(rest, num_envs, max_episode_steps, env_keys=env_keys, **env_kwargs)
    return adapter(suite).make_vec_env(rest, num_envs, max_episode_steps, env_keys, reset_ratio, **env_kwargs)
