"""The command table (purejaxppo/cli/commands.py): each command registered once, with its help,
flags and handler; the parser and the dispatch are both built from it."""

import importlib

import pytest

import purejaxppo.cli
from purejaxppo.cli.commands import COMMANDS
from purejaxppo.cli.main import build_parser, main

#: the positional arguments a command's parser requires (nothing reads them here)
REQUIRED = {"eval": ["RUN"], "plot": ["RUN"], "export": ["RUN", "OUT"]}


def test_the_parser_has_the_tables_commands_in_its_order_with_its_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    assert {a.dest: a.help for a in sub._choices_actions} == {n: c.help for n, c in COMMANDS.items()}


def test_every_command_runs_its_own_handler(monkeypatch):
    ran = []
    for name, command in COMMANDS.items():
        module, _, function = command.handler.partition(":")
        monkeypatch.setattr(importlib.import_module(module), function, lambda a, name=name: ran.append((name, a)) or 0)
    for name in COMMANDS:
        assert main([name, *REQUIRED.get(name, [])]) == 0, name
    assert [name for name, _ in ran] == list(COMMANDS)
    for name, args in ran:  # a command with its own flags gets its arguments as they are
        assert args == [] if COMMANDS[name].flags is None else args.command == name, (name, args)


def test_help_describes_rlhf_as_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in ("built-in task", "your own Hugging Face model", "prompts", "reward model", "token-level PPO"):
        assert words in out.split("rlhf ", 1)[1].split(" export ")[0], words


def test_the_package_docstring_names_every_command():
    missing = [name for name in COMMANDS if f"``{name}``" not in purejaxppo.cli.__doc__]
    assert not missing, missing
