"""The ``rlhf`` and ``reward`` commands' flags, generated from their fields' declarations
(purejaxppo/config/fields.py): every flag says what it does, every enum flag lists its choices,
every numeric flag refuses a value out of its range as it is parsed (one ``error:`` line naming
the flag, exit 2), the defaults live in the declarations only, and a config error names the
flags the user typed. Nothing here trains or compiles."""

import argparse
import dataclasses
import math
import os
import re

import pytest

from purejaxppo.cli.parser import build_parser

COMMANDS = ("rlhf", "reward")


def _sub(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _flags(command: str) -> list:
    """Every option of the command but ``-h``."""
    return [a for a in _sub(command)._actions if a.option_strings and a.dest != "help"]


def _is_number(action) -> bool:
    """A flag whose values are numbers (a probe of its parser reads a number back)."""
    if action.type is None:
        return False
    for probe in ("0", "1", "0.5", "2"):
        try:
            v = action.type(probe)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return False


def _numeric(command: str) -> list:
    return [a for a in _flags(command) if _is_number(a)]


def _outside(bounds, integer: bool) -> list:
    """Values just outside each side of ``bounds`` (and NaN for a float flag)."""
    out = []
    if bounds.lo is not None:
        out.append(bounds.lo if bounds.lo_open else bounds.lo - (1 if integer else 0.5))
    if bounds.hi is not None:
        out.append(bounds.hi if bounds.hi_open else bounds.hi + (1 if integer else 0.5))
    out = [int(v) if integer else float(v) for v in out]
    return out + ([] if integer else [math.nan])


def _inside(bounds, integer: bool):
    """A value in ``bounds`` (the closed end, where there is one)."""
    if bounds.lo is not None and not bounds.lo_open:
        return int(bounds.lo) if integer else float(bounds.lo)
    if bounds.hi is not None and not bounds.hi_open:
        return int(bounds.hi) if integer else float(bounds.hi)
    lo = bounds.lo if bounds.lo is not None else bounds.hi - 2
    hi = bounds.hi if bounds.hi is not None else lo + 2
    return (lo + hi) / 2


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_says_what_it_does(command):
    """Not just ``default: X``: a sentence of its own before any range or default."""
    flags = _flags(command)
    assert len(flags) > (60 if command == "rlhf" else 15)
    for a in flags:
        sentence = re.sub(r" \([^()]*\)$", "", a.help or "").strip()  # the range and default dropped
        assert len(sentence.split()) >= 3 and not sentence.startswith("default"), (a.option_strings, a.help)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_enum_flag_lists_its_choices_in_help(command, capsys):
    """argparse's ``choices`` for every field declared with choices, and ``--help`` shows them
    beside the flag; a true/false flag says so."""
    from purejaxppo.cli.flags import field_flag
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig
    from purejaxppo.programs.reward_program import RewardConfig
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    actions = {a.option_strings[0]: a for a in _flags(command)}
    records = (TokenPPOConfig, RLHFSettings) if command == "rlhf" else (RewardConfig,)
    declared = {field_flag(f): f.metadata["choices"] for r in records for f in dataclasses.fields(r)}
    enums = {flag: choices for flag, choices in declared.items() if choices and flag in actions}
    assert len(enums) >= (6 if command == "rlhf" else 0)
    for flag, choices in enums.items():
        assert tuple(actions[flag].choices) == choices, flag
        assert f"{flag} {{{','.join(choices)}}}" in text, flag
    for a in actions.values():
        if a.choices:
            assert f"{a.option_strings[0]} {{{','.join(a.choices)}}}" in text
    bools = [a for a in actions.values() if a.metavar == "{true,false}"]
    assert all("true or false" in a.help for a in bools) and (command != "rlhf" or len(bools) >= 2)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_numeric_flag_has_a_range_said_in_its_help(command):
    numeric = _numeric(command)
    assert len(numeric) > (35 if command == "rlhf" else 8), [a.option_strings for a in numeric]
    for a in numeric:
        bounds = getattr(a.type, "bounds", None)
        assert bounds is not None, f"{a.option_strings[0]} takes any number"
        assert bounds.describe() in a.help, (a.option_strings[0], a.help)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_numeric_flag_refuses_a_value_out_of_range_naming_the_flag(command, capsys):
    """Each side of each range (and NaN): exit 2 and ONE line ``error: --flag must be ...``, no
    traceback; the range's own end (or a value inside) is accepted."""
    checked = 0
    for a in _numeric(command):
        flag, bounds = a.option_strings[0], a.type.bounds
        integer = _parses_int(a, bounds)
        good = _inside(bounds, integer)
        assert getattr(build_parser().parse_args([command, flag, str(good)]), a.dest) == good, flag
        for bad in _outside(bounds, integer):
            with pytest.raises(SystemExit) as e:
                build_parser().parse_args([command, flag, str(bad)])
            err = capsys.readouterr().err
            lines = [line for line in err.splitlines() if line.strip()]
            assert e.value.code == 2 and len(lines) == 1, (flag, bad, err)
            assert lines[0].startswith(f"error: {flag} must be ") and f"got {bad!r}" in lines[0], lines[0]
            assert "Traceback" not in err
            checked += 1
    assert checked >= (40 if command == "rlhf" else 9)


def _parses_int(action, bounds) -> bool:
    """Whether the flag takes whole numbers (a fraction inside its range is refused as a type)."""
    try:
        action.type("0.5" if bounds.holds(0.5) else "1.5" if bounds.holds(1.5) else "2.5")
    except argparse.ArgumentTypeError:
        return True
    return False


@pytest.mark.parametrize("command", COMMANDS)
def test_the_defaults_live_in_the_declarations_only(command):
    """The parser holds no default (None: not given), so the records' declared defaults are what
    a command runs with, and what its help says."""
    from purejaxppo.cli.flags import record_of, show_default

    args = build_parser().parse_args([command])
    # a switch shared with train (--tensorboard, --distributed) is off, not None, when left out
    held = [a.option_strings[0] for a in _flags(command) if getattr(args, a.dest) not in (None, False)]
    assert held == []
    if command == "rlhf":
        from purejaxppo.cli.rlhf_cmd import RLHFCommand

        assert record_of(RLHFCommand, args) == RLHFCommand()
        record = RLHFCommand
    else:
        from purejaxppo.cli.reward_cmd import RewardCommand

        assert record_of(RewardCommand, args) == RewardCommand()
        record = RewardCommand
    helps = {a.dest: a.help for a in _flags(command)}
    for f in dataclasses.fields(record):
        if f.default is not None and not f.metadata["switch"]:
            assert f"default: {show_default(f.default)}" in helps[f.name], f.name


def test_a_new_runs_settings_take_the_declared_defaults(tmp_path, monkeypatch):
    """``--eval-every`` left out is RLHFSettings' own default (no override in the command)."""
    from purejaxppo.cli.rlhf_cmd import _settings
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    monkeypatch.chdir(tmp_path)
    settings = _settings(build_parser().parse_args(["rlhf"]), text=False, many=False)
    assert settings.eval_every == RLHFSettings.eval_every == 10
    assert settings.sft_steps == 40 and dict(settings.task_options) == {"max_len": 6, "max_new": 8}  # the preset
    assert _settings(build_parser().parse_args(["rlhf"]), text=False, many=True).eval_every == 0


@pytest.mark.parametrize(
    "argv,named,not_named",
    [
        (["--lora-base-dtype", "bfloat16"], ["--lora-base-dtype", "--lora-rank"], ["lora_rank", "lora_base_dtype"]),
        (["--lora-targets", "q_proj"], ["--lora-targets", "--lora-rank"], ["lora_rank", "lora_targets"]),
        (["--batch", "10"], ["--batch 10", "--minibatches 4"], ["batch_size", "num_minibatches"]),
        (["--lora-rank", "2", "--lora-targets", "nope"], ["--lora-targets nope", "match no kernel"], ["lora_targets"]),
        (["--advantage", "grpo"], ["--advantage 'grpo'", "--group-size 1"], ["group_size", "advantage="]),
        (["--group-size", "3", "--batch", "8"], ["--batch 8", "--group-size 3"], ["group_size", "batch_size"]),
    ],
)
def test_config_errors_name_the_flags_typed(argv, named, not_named, capsys, tmp_path, monkeypatch):
    """A combination refused after parsing (LoRA's, the groups', divisibility) names the flags
    the user typed, not TokenPPOConfig's fields: one error line from the command, exit 2."""
    from purejaxppo.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["rlhf", *argv, "--quiet"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert all(x in lines[0] for x in named) and not any(x in lines[0] for x in not_named), lines[0]
    assert os.listdir(tmp_path) == []


def test_the_cli_tells_errors_by_type_not_by_message():
    """No ``... in str(e)`` or ``str(e).startswith``: the command catches exception types (a
    reworded message must not change which error a user sees)."""
    import purejaxppo.cli as cli

    folder = os.path.dirname(cli.__file__)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            source = open(os.path.join(folder, name)).read()
            assert not re.search(r"in str\(e\)|str\(e\)\.(startswith|endswith)|in e\.args", source), name


def test_python_callers_give_one_reward_as_a_string_and_lists_where_flags_give_tuples():
    """The Python API took ``reward="FILE.py:FUNC"`` before several rewards were allowed (the
    RLHF pipeline experiment still does); a string read as a tuple iterates its characters
    (``--reward /``). Lists (from JSON or a user's code) become tuples: the settings are hashed."""
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    s = RLHFSettings(reward="objective.py:true_reward", reward_weights=[1.0], pass_k=[1, 8])
    assert s.reward == ("objective.py:true_reward",)
    assert s.reward_weights == (1.0,) and s.pass_k == (1, 8)
    hash(s)
    assert RLHFSettings(reward=("math", "format")).reward == ("math", "format")
