"""Command-line flags from :class:`~purejaxppo.config.PPOConfig`: one ``--flag`` per field, parsed by its type."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from purejaxppo.config.numbers import parse_float, parse_int


def _argtype(parse):
    """An argparse type from a strict parser: its message becomes argparse's error."""

    def conv(s: str):
        try:
            return parse(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    conv.__name__ = parse.__name__
    return conv


strict_int, strict_float = _argtype(parse_int), _argtype(parse_float)
NONE = ("none", "null", "off")


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def _parse_optional_float(s: str):
    return None if s.lower() in NONE else strict_float(s)


def _parse_optional_int(s: str):
    return None if s.lower() in NONE else strict_int(s)


def _parse_int_tuple(s: str) -> tuple:
    """``64,64`` -> ``(64, 64)``; an empty item (``64,,64``, a trailing comma) or a space
    between digits (``64 64``) is refused, not dropped or joined."""
    items = s.split(",")
    try:
        if any(not x.strip() for x in items):
            raise ValueError
        return tuple(parse_int(x) for x in items)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers like 64,64 (no empty items), got {s!r}"
        ) from None


def _parse_indices(s: str) -> tuple:
    """``--obs-keep 0,2``: as :func:`_parse_int_tuple`, and an index given twice is refused."""
    out = _parse_int_tuple(s)
    twice = sorted({i for i in out if out.count(i) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"index {twice[0]} is listed twice in {s!r}; list each observation index once")
    return out


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per :class:`PPOConfig` field (``num_envs`` -> ``--num-envs``)."""
    from purejaxppo.config import PPOConfig

    hints = typing.get_type_hints(PPOConfig)
    group = parser.add_argument_group("config (defaults: docs/conventions.md)")
    for f in dataclasses.fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "env_name":
            flag = "--env"
        group.add_argument(
            flag,
            dest=f"cfg_{f.name}",
            type=flag_type(hints[f.name], f.name),
            default=None,
            metavar=f.name.upper(),
            help=f"default: {f.default}",
        )


def flag_type(t, name: str = ""):
    """The strict argparse type of a config field of type ``t`` (``bool``, ``int``, ``float``,
    ``tuple`` of ints, their ``Optional``, else ``str``): what ``--flag`` values it accepts."""
    args_t = typing.get_args(t)
    optional = type(None) in args_t
    inner = next((a for a in args_t if a is not type(None)), t) if optional else t
    if t is bool:
        return _parse_bool
    if inner is tuple:
        parse = _parse_indices if name == "obs_keep" else _parse_int_tuple
        return (lambda s, parse=parse: None if s.lower() in NONE else parse(s)) if optional else parse
    if optional and inner is float:
        return _parse_optional_float
    if optional and inner is int:
        return _parse_optional_int
    if t is int:
        return strict_int
    if t is float:
        return strict_float
    return str


def config_from_args(args, base=None):
    from purejaxppo.config import ConfigError, PPOConfig
    from purejaxppo.config.presets import preset_config

    if base is None:
        env = getattr(args, "cfg_env_name", None) or PPOConfig().env_name
        reference = getattr(args, "reference", None)
        if reference and getattr(args, "preset", False):
            raise ConfigError(
                f"--preset and --reference {reference} are two different starting configs; pass one "
                "(explicit flags override either)"
            )
        if reference:
            from purejaxppo.config.references import reference_config

            base = reference_config(reference, env)
        else:
            from purejaxppo.config.presets import default_preset

            preset = getattr(args, "preset", False) or default_preset(env)
            base = preset_config(env) if preset else PPOConfig()
    changes = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    return base.replace(**changes)
