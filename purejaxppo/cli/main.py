"""Command line: ``python -m purejaxppo COMMAND ...``: parses, dispatches, reports errors.

The commands, each with its flags and handler, are one table,
:data:`~purejaxppo.cli.commands.COMMANDS`; :func:`main` parses ``argv`` with the parser built
from it (:mod:`~purejaxppo.cli.parser`) and runs the command's handler, or passes a command
that parses its own flags (``bench``) its arguments as they are.

User errors (bad flags, invalid config, unknown env, missing or mismatched run folder)
print the problem and the fix and exit with status 2, without a traceback. A training
that is interrupted (Ctrl-C, SIGTERM) saves a checkpoint and says how to resume (exit
130); one that produces non-finite numbers stops with the update and metric (exit 1).
"""

from __future__ import annotations

import os
import sys

from purejaxppo.cli.commands import COMMANDS
from purejaxppo.cli.errors import UserError
from purejaxppo.cli.flags import config_from_args
from purejaxppo.cli.parser import build_parser, repeated_flags

__all__ = ["main", "build_parser", "config_from_args", "UserError"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # a command with its own flags gets them as they are (argparse.REMAINDER drops leading options)
    raw = bool(argv) and argv[0] in COMMANDS and COMMANDS[argv[0]].flags is None
    args = None if raw else build_parser().parse_args(argv)
    code = _main(args, argv)
    if "purejaxppo.run.processes" in sys.modules:  # the run had several processes: leave them in order
        from purejaxppo.run import processes

        group = processes.current()
        if group.many:
            group.leave() if code == 0 else processes.exit_now(code)
    return code


def _main(args, argv: list) -> int:
    from purejaxppo.run.checkpoint import CheckpointError
    from purejaxppo.config import ConfigError
    from purejaxppo.run.guards import NonFiniteError, RunFolderWriteError, TrainingInterrupted

    try:
        if args is None:
            return COMMANDS[argv[0]].run(argv[1:])
        _check_args(args)
        return COMMANDS[args.command].run(args)
    except (ConfigError, UserError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (NonFiniteError, RunFolderWriteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. a full disk while writing results.md or a plot
        print(
            f"error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}; free some space or fix "
            "permissions and run the command again",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt as e:
        ckpt = e.checkpoint if isinstance(e, TrainingInterrupted) else None
        command = args.command if args is not None else "train"  # the command that was running continues it
        where = (
            (
                f"; progress saved in {ckpt} (update {e.updates_done}). Continue with "
                f"`python -m purejaxppo {command} --resume {os.path.dirname(os.path.dirname(ckpt))}`"
            )
            if ckpt
            else ""
        )
        hint = getattr(e, "hint", None)  # what a checkpoint cannot say (a stage before the run folder: it starts over)
        print(f"\ninterrupted{where}" + (f"; {hint}" if hint else ""), file=sys.stderr)
        sigterm = getattr(e, "reason", None) == "SIGTERM" or str(e) == "SIGTERM"
        return 143 if sigterm else 130  # 128 + the signal's number, as a shell reports it
    except Exception as e:
        if "purejaxppo.run.processes" in sys.modules:
            from purejaxppo.run import processes

            if processes.collective_failed(e):  # another process is gone: name it, never a trace
                processes.wait_for_watchdog(e, " Start every process again with --resume RUN_DIR to continue.")
        raise


def _check_args(args) -> None:
    """What argparse lets through: a single-valued flag given twice (it would keep the last
    silently) and an empty value (``--run-dir ""`` would fall back to the default folder)."""
    for flag, first, second in repeated_flags(args):
        raise UserError(f"{flag} is given twice ({first!r} and {second!r}); pass it once")
    for dest, v in vars(args).items():
        values = v if isinstance(v, list) and dest != "rest" else [v]
        if not dest.startswith("_") and any(isinstance(x, str) and not x.strip() for x in values):
            flag = (
                dest.upper()
                if dest in ("run_dir", "run_dirs") and args.command != "train"
                else "--" + dest.removeprefix("cfg_").replace("_", "-")
            )
            flag = {"--env-name": "--env", "--out": "-o/--out"}.get(flag, flag)
            raise UserError(f"{flag} is empty; pass a value (see python -m purejaxppo {args.command} --help)")


if __name__ == "__main__":
    sys.exit(main())
