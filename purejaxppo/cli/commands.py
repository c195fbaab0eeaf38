"""The commands of ``python -m purejaxppo``, one table (:data:`COMMANDS`): each command's name,
help line, flags and handler, registered once.

:func:`purejaxppo.cli.parser.build_parser` makes one sub-parser per entry, in the table's order
(the order ``--help`` lists them); :func:`purejaxppo.cli.main.main` runs the entry's handler. A
new command is one entry here and its own module. Flags and handlers are named
``"module:function"`` and imported when used: a command's handler module is loaded only when
that command runs.
"""

from __future__ import annotations

import importlib
from typing import Callable, NamedTuple, Optional

#: what ``python -m purejaxppo --help`` says the program is
DESCRIPTION = (
    "Functional PPO in JAX: control agents on gymnax (and other suites') environments, and "
    "token-level PPO for language models."
)


class Command(NamedTuple):
    """One command. ``flags``: ``"module:function"`` adding its flags to its sub-parser
    (``function(parser)``), or None: it parses its own arguments (``bench``), given to it as
    they are. ``handler``: ``"module:function"``; ``function(args)`` returns the exit status,
    or, without ``flags``, ``function(argv)`` runs it (its return value is for Python callers)."""

    help: str
    flags: Optional[str]
    handler: str

    def add_flags(self, parser) -> None:
        _resolve(self.flags)(parser)

    def run(self, args) -> int:
        code = _resolve(self.handler)(args)
        return 0 if self.flags is None else code


def _resolve(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_P = "purejaxppo.cli."
COMMANDS = {
    "train": Command("train PPO agents (N seeds at once)", _P + "parser:add_train", _P + "train_cmd:cmd_train"),
    "eval": Command("evaluate a trained run's policy (all seeds)", _P + "parser:add_eval", _P + "eval_cmd:cmd_eval"),
    "plot": Command("learning curves of one or more runs", _P + "parser:add_plot", _P + "plot_cmd:cmd_plot"),
    "envs": Command(
        "list the environment suites (and which extra installs each)", _P + "parser:add_envs", _P + "envs_cmd:cmd_envs"
    ),
    "rlhf": Command(
        "token-level PPO for a language model: a built-in task, or your own Hugging Face model "
        "folder, prompts and reward (a Python function or a reward model)",
        _P + "rlhf_cmd:add_rlhf",
        _P + "rlhf_cmd:cmd_rlhf",
    ),
    "export": Command(
        "write an rlhf run's policy in Hugging Face layout", _P + "export_cmd:add_export", _P + "export_cmd:cmd_export"
    ),
    "reward": Command(
        "train a reward model on preference pairs (Bradley-Terry)",
        _P + "reward_cmd:add_reward",
        _P + "reward_cmd:cmd_reward",
    ),
    "bench": Command("throughput benchmark (see benchmarks/throughput.py)", None, _P + "bench:main"),
}
