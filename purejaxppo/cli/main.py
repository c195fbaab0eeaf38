"""Command line: ``python -m purejaxppo train|eval|rlhf|plot|envs|bench ...``: parses, dispatches, reports errors.

User errors (bad flags, invalid config, unknown env, missing or mismatched run folder)
print the problem and the fix and exit with status 2, without a traceback. A training
that is interrupted (Ctrl-C, SIGTERM) saves a checkpoint and says how to resume (exit
130); one that produces non-finite numbers stops with the update and metric (exit 1).

One module per command: :mod:`~purejaxppo.cli.parser` (the flags), :mod:`~purejaxppo.cli.train_cmd`
(train, resume; shared checks in :mod:`~purejaxppo.cli.train_setup`), :mod:`~purejaxppo.cli.eval_cmd`,
:mod:`~purejaxppo.cli.rlhf_cmd`, :mod:`~purejaxppo.cli.plot_cmd`, :mod:`~purejaxppo.cli.envs_cmd`, :mod:`~purejaxppo.cli.bench`.
"""

from __future__ import annotations

import os
import sys

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.flags import config_from_args
from purejaxppo.cli.parser import build_parser, repeated_flags

__all__ = ["main", "build_parser", "config_from_args", "UserError"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    bench = argv[:1] == ["bench"]  # its own flags, passed on as they are (argparse.REMAINDER drops leading options)
    args = None if bench else build_parser().parse_args(argv)
    code = _main(args, bench, argv)
    if "purejaxppo.run.processes" in sys.modules:  # the run had several processes: leave them in order
        from purejaxppo.run import processes

        group = processes.current()
        if group.many:
            group.leave() if code == 0 else processes.exit_now(code)
    return code


def _main(args, bench: bool, argv: list) -> int:
    from purejaxppo.run.checkpoint import CheckpointError
    from purejaxppo.config import ConfigError
    from purejaxppo.run.guards import NonFiniteError, RunFolderWriteError, TrainingInterrupted

    try:
        if bench:
            from purejaxppo.cli.bench import main as bench_main

            bench_main(argv[1:])
            return 0
        _check_args(args)
        return _command(args.command)(args)
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
        print(f"\ninterrupted{where}", file=sys.stderr)
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


def _command(name: str):
    """The function of one sub-command (imported when used: ``envs`` needs no JAX)."""
    if name == "train":
        from purejaxppo.cli.train_cmd import cmd_train

        return cmd_train
    if name == "eval":
        from purejaxppo.cli.eval_cmd import cmd_eval

        return cmd_eval
    if name == "rlhf":
        from purejaxppo.cli.rlhf_cmd import cmd_rlhf

        return cmd_rlhf
    if name == "export":
        from purejaxppo.cli.export_cmd import cmd_export

        return cmd_export
    if name == "reward":
        from purejaxppo.cli.reward_cmd import cmd_reward

        return cmd_reward
    if name == "plot":
        from purejaxppo.cli.plot_cmd import cmd_plot

        return cmd_plot
    from purejaxppo.cli.envs_cmd import cmd_envs

    return cmd_envs


if __name__ == "__main__":
    sys.exit(main())
