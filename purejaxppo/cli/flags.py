"""Command-line flags from :class:`~purejaxppo.config.PPOConfig`: one ``--flag`` per field, parsed by its type."""

from __future__ import annotations

import argparse
import dataclasses
import typing


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def _parse_optional_float(s: str):
    if s.lower() in ("none", "null", "off"):
        return None
    return float(s)


def _parse_optional_int(s: str):
    if s.lower() in ("none", "null", "off"):
        return None
    return int(s)


def _parse_int_tuple(s: str) -> tuple:
    try:
        return tuple(int(x) for x in s.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 64,64, got {s!r}") from None


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per :class:`PPOConfig` field (``num_envs`` -> ``--num-envs``)."""
    from purejaxppo.config import PPOConfig

    hints = typing.get_type_hints(PPOConfig)
    group = parser.add_argument_group("config (defaults: docs/conventions.md)")
    for f in dataclasses.fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "env_name":
            flag = "--env"
        t, default = hints[f.name], f.default
        args_t = typing.get_args(t)
        optional = type(None) in args_t
        inner = next((a for a in args_t if a is not type(None)), t) if optional else t
        if t is bool:
            conv = _parse_bool
        elif inner is tuple:
            conv = (lambda s: None if s.lower() in ("none", "null", "off") else _parse_int_tuple(s)) if optional \
                else _parse_int_tuple
        elif optional and inner is float:
            conv = _parse_optional_float
        elif optional and inner is int:
            conv = _parse_optional_int
        elif t is int:
            conv = int
        elif t is float:
            conv = float
        else:
            conv = str
        group.add_argument(flag, dest=f"cfg_{f.name}", type=conv, default=None, metavar=f.name.upper(),
                           help=f"default: {default}")


def config_from_args(args, base=None):
    from purejaxppo.config import ConfigError, PPOConfig
    from purejaxppo.config.presets import preset_config

    if base is None:
        env = getattr(args, "cfg_env_name", None) or PPOConfig().env_name
        reference = getattr(args, "reference", None)
        if reference and getattr(args, "preset", False):
            raise ConfigError(f"--preset and --reference {reference} are two different starting configs; pass one "
                              "(explicit flags override either)")
        if reference:
            from purejaxppo.config.references import reference_config

            base = reference_config(reference, env)
        else:
            base = preset_config(env) if getattr(args, "preset", False) else PPOConfig()
    changes = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    return base.replace(**changes)
