"""Command-line flags generated from settings dataclasses: one ``--flag`` per field, parsed
strictly by its type, its help, choices and range from the field's declaration
(:func:`purejaxppo.config.fields.setting`). ``train``'s come from
:class:`~purejaxppo.config.PPOConfig`, ``rlhf``'s from ``TokenPPOConfig`` and ``RLHFSettings``,
``reward``'s from ``RewardConfig``: the declaration is the one source of each flag."""

from __future__ import annotations

import argparse
import math
import dataclasses
import typing
from typing import Optional

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


def _parse_float_tuple(s: str) -> tuple:
    """``1,0.5`` -> ``(1.0, 0.5)``: finite numbers, no empty item."""
    items = s.split(",")
    try:
        if any(not x.strip() for x in items):
            raise ValueError
        out = tuple(parse_float(x) for x in items)
        if not all(math.isfinite(x) for x in out):
            raise ValueError
        return out
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated finite numbers like 1,0.5 (no empty items), got {s!r}"
        ) from None


def _parse_indices(s: str) -> tuple:
    """``--obs-keep 0,2``: as :func:`_parse_int_tuple`, and an index given twice is refused."""
    out = _parse_int_tuple(s)
    twice = sorted({i for i in out if out.count(i) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"index {twice[0]} is listed twice in {s!r}; list each observation index once")
    return out


def _parse_names(s: str) -> tuple:
    """``q_proj,v_proj`` -> ``("q_proj", "v_proj")``; an empty item is refused, not dropped."""
    items = tuple(x.strip() for x in s.split(","))
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names like q_proj,v_proj (no empty items), got {s!r}"
        )
    return items


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser``'s errors as one line, ``error: --batch must be >= 1, got 0`` (exit 2), without
    argparse's usage block (a command of 70 flags would bury the line): argparse's ``argument
    --flag: `` prefix becomes the flag itself."""

    def error(message: str):
        if message.startswith("argument "):
            flag, _, rest = message[len("argument ") :].partition(": ")
            message = f"{flag} {rest}" if rest.startswith("must ") else f"{flag}: {rest}"
        parser.exit(2, f"error: {message}\n")

    parser.error = error
    return parser


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per :class:`PPOConfig` field (``num_envs`` -> ``--num-envs``)."""
    from purejaxppo.config import PPOConfig

    group = parser.add_argument_group("config (defaults: docs/conventions.md)")
    add_field_flags(group, PPOConfig, dest_prefix="cfg_", flags={"env_name": "--env"})


def field_flag(f: dataclasses.Field, flags: Optional[dict] = None) -> str:
    """The flag of a settings field: its declared ``flag``, else ``--`` + its name with dashes."""
    return (flags or {}).get(f.name) or f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def flag_fields(cls, skip=()) -> list:
    """``[(field, type hint)]`` of the fields of ``cls`` that are flags (not ``cli=False``, not in ``skip``)."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get("cli", True) and f.name not in skip]


def show_default(v) -> str:
    """A default as a user would type it: ``true``, ``none``, ``q_proj,v_proj``, ``0.0001``."""
    if isinstance(v, bool):
        return str(v).lower()
    if v is None or v == ():
        return "none"
    if isinstance(v, tuple):
        return ",".join(map(str, v))
    return str(v)


def field_help(f: dataclasses.Field, note: str = "") -> str:
    """The help of a field's flag: its sentence, then its range and default (``note``: how a
    preset or another flag changes the default). A field declared without a sentence shows its default."""
    bounds = f.metadata.get("bounds")
    facts = [bounds.describe()] if bounds is not None else []
    if f.metadata.get("repeat"):
        facts += ["repeatable"]
    elif note.startswith("default:"):  # the note says the default (a preset's or a rule's)
        pass
    elif f.metadata.get("switch"):
        facts += ["default: off"] if f.default in (False, None) else []
    elif typing.get_origin(f.type) is None and f.type in (bool, "bool"):
        facts += [f"true or false; default: {show_default(f.default)}"]
    else:
        facts += [f"default: {show_default(f.default)}"] if f.default is not None else []
    facts = [x for x in facts + [note] if x]
    sentence = f.metadata.get("help", "")
    text = f"{sentence} ({'; '.join(facts)})" if sentence and facts else sentence or "; ".join(facts)
    return text.replace("%", "%%")  # argparse formats help with %


def ranged(parse, bounds):
    """``parse`` then the range check: a value outside ``bounds`` is an argparse error naming
    the range (``must be >= 1, got 0``); argparse puts the flag in front."""
    if bounds is None:
        return parse

    def conv(s: str):
        v = parse(s)
        if v is not None and not bounds.holds(v):
            raise argparse.ArgumentTypeError(bounds.refusal(v))
        return v

    conv.__name__, conv.bounds = getattr(parse, "__name__", "value"), bounds
    return conv


def given_fields(cls, args, dest_prefix: str = "") -> dict:
    """``{field: value}`` of the flags of ``cls`` given on the command line (None: left out)."""
    values = {f.name: getattr(args, dest_prefix + f.name) for f, _ in flag_fields(cls)}
    return {name: v for name, v in values.items() if v is not None}


def record_of(cls, args, dest_prefix: str = ""):
    """The record ``cls`` of the flags: the fields given, the rest their declared defaults."""
    return cls(**given_fields(cls, args, dest_prefix))


def add_field_flags(group, cls, *, dest_prefix: str = "", skip=(), flags=None, notes=None) -> dict:
    """One flag per field of ``cls`` (see :func:`flag_fields`) on ``group``, all defaulting to
    None (not given: the caller keeps the declared default, so a flag given can be told from
    one left out). ``flags``: names instead of the declared ones; ``notes``: ``{field: text}``
    added to a help. Returns ``{flag: field}``."""
    out = {}
    for f, hint in flag_fields(cls, skip):
        flag, bounds, choices = field_flag(f, flags), f.metadata.get("bounds"), f.metadata.get("choices", ())
        kw = dict(dest=dest_prefix + f.name, default=None, help=field_help(f, (notes or {}).get(f.name, "")))
        if f.metadata.get("switch"):
            group.add_argument(flag, action="store_true", **kw)
        elif f.metadata.get("repeat"):
            group.add_argument(flag, action="append", metavar=f.metadata.get("metavar"), **kw)
        else:
            parse = ranged(flag_type(hint, f.name), bounds)
            metavar = f.metadata.get("metavar") or flag[2:].upper().replace("-", "_")
            metavar = None if choices else "{true,false}" if parse is _parse_bool else metavar
            group.add_argument(flag, type=parse, choices=choices or None, metavar=metavar, **kw)
        out[flag] = f
    return out


def flag_type(t, name: str = ""):
    """The strict argparse type of a config field of type ``t`` (``bool``, ``int``, ``float``,
    ``tuple`` of ints, their ``Optional``, else ``str``): what ``--flag`` values it accepts."""
    args_t = typing.get_args(t)
    optional = type(None) in args_t
    inner = next((a for a in args_t if a is not type(None)), t) if optional else t
    if t is bool:
        return _parse_bool
    if inner is tuple:
        parse = {"obs_keep": _parse_indices, "lora_targets": _parse_names, "reward_weights": _parse_float_tuple}.get(
            name, _parse_int_tuple
        )
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


def field_values(items, flag: str, example: str, text: bool = False) -> tuple:
    """``--flag FIELD=VALUE`` given several times, typed: ``["max_len=6", "partial=true"]`` ->
    ``(("max_len", 6), ("partial", True))`` (sorted; a number, ``true`` or ``false``, or with
    ``text`` any other value as a string); a malformed item is a
    :class:`~purejaxppo.cli.errors.UserError` naming ``flag`` (``example``: a well-formed one)."""
    from purejaxppo.cli.errors import UserError

    out = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise UserError(f"{flag} {item!r} must be FIELD=VALUE (e.g. {example})")
        low = value.lower()
        try:
            out[field] = (
                True
                if low == "true"
                else False
                if low == "false"
                else (int(value) if value.lstrip("-").isdigit() else float(value))
            )
        except ValueError:
            if not text:
                raise UserError(f"{flag} {item!r}: the value must be a number, true or false") from None
            out[field] = value
    return tuple(sorted(out.items()))
