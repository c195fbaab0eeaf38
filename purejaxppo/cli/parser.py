"""The argument parser of ``python -m purejaxppo``: one sub-parser per command, no logic."""

from __future__ import annotations

import argparse

from purejaxppo.cli.commands import COMMANDS, DESCRIPTION
from purejaxppo.cli.distributed import add_process_flags
from purejaxppo.cli.flags import add_config_flags, strict_int
from purejaxppo.cli.pbt_cli import add_pbt_flags
from purejaxppo.cli.train_setup import add_sink_flags


class StoreOnce(argparse._StoreAction):
    """``store``, noting a flag given twice (``--lr 1e-3 --lr 1e-4`` would silently keep the
    last): :func:`repeated_flags` lists them for the caller to refuse."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        if self.dest in given and option_string:
            namespace.__dict__.setdefault("_repeated", []).append((option_string, given[self.dest], values))
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


def repeated_flags(args) -> list:
    """``[(flag, first value, second value)]`` of the single-valued flags given more than once."""
    return getattr(args, "_repeated", [])


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.register("action", None, StoreOnce)
    parser.register("action", "store", StoreOnce)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per command of :data:`~purejaxppo.cli.commands.COMMANDS`, in its order."""
    p = argparse.ArgumentParser(prog="purejaxppo", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        if command.flags is None:  # it parses its own flags: passed on as they are
            sub.add_parser(name, help=command.help).add_argument("rest", nargs=argparse.REMAINDER)
        else:
            command.add_flags(_strict(sub.add_parser(name, help=command.help)))
    return p


def add_plot(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("-o", "--out", default="curves.png", help="output image (png/pdf/svg)")
    p.add_argument(
        "--metric",
        default=None,
        metavar="A,B,...",
        help="metrics.csv columns to draw, one panel each (default: episode_return; a token-level run's score,kl)",
    )
    p.add_argument(
        "--smooth",
        type=strict_int,
        default=1,
        metavar="N",
        help="smooth each seed's curve over N updates, the raw curve faint behind (default 1: none)",
    )
    p.add_argument(
        "--smoother",
        choices=("ema", "window"),
        default="ema",
        help="with --smooth: ema (span N, default) or window (trailing mean of N updates)",
    )
    p.add_argument(
        "--x",
        choices=("env_steps", "updates", "time"),
        default=None,
        help="x axis (default env_steps, or updates for runs that count no env steps); time: "
        "seconds of training at the speed in the run's summary.json",
    )
    p.add_argument(
        "--iqm",
        action="store_true",
        help="across seeds the interquartile mean with a 95%% bootstrap interval (default: the mean, band min..max)",
    )


def add_envs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default=None, help="list the env names of one suite (gymnax, brax, playground, ...)")


def add_train(t: argparse.ArgumentParser) -> None:
    t.add_argument(
        "--seeds", type=strict_int, default=None, help="number of seeds trained together (vmapped); default 1"
    )
    t.add_argument("--seed", type=strict_int, default=None, help="base random seed; default 0")
    t.add_argument("--run-dir", default=None, help="output folder (default: runs/<env>-<time>)")
    t.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR from its latest checkpoint (its own config and seeds)",
    )
    t.add_argument(
        "--init-from",
        metavar="RUN_DIR",
        default=None,
        help="a new run starting from RUN_DIR's final params, optimizer and normaliser state, with this "
        "run's own config and schedule (same network and env; see README)",
    )
    t.add_argument(
        "--member",
        type=strict_int,
        default=None,
        metavar="K",
        help="with --init-from a sweep or PBT RUN_DIR: start from its member K",
    )
    t.add_argument(
        "--chunk", type=strict_int, default=None, help="updates per compiled chunk between progress reports (25)"
    )
    t.add_argument(
        "--checkpoint-every",
        type=strict_int,
        default=None,
        metavar="K",
        help="save a checkpoint every K chunks (10); also saved at the end and on interrupt",
    )
    t.add_argument(
        "--stop-after",
        type=strict_int,
        default=None,
        metavar="UPDATES",
        help="stop (with a checkpoint) once this many updates are done; continue later with --resume",
    )
    t.add_argument(
        "--devices",
        default="auto",
        help="devices to use: auto (as many CPU cores as divide the work evenly), all, or a number; "
        "across processes: all (every process's devices)",
    )
    t.add_argument(
        "--split",
        choices=("seeds", "envs"),
        default=None,
        help="seeds (default): shard the runs (members x seeds) over the devices; "
        "envs: split every run's envs over them (data parallel)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar; only the summary")
    t.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (default: on, in ~/.cache/purejaxppo/xla)",
    )
    t.add_argument(
        "--preset",
        action="store_true",
        help="start from the shipped per-env config (purejaxppo/config/presets.py); flags still override",
    )
    t.add_argument(
        "--reference",
        choices=("gymnax-blines",),
        default=None,
        help="start from a published baseline's own config for --env (purejaxppo/config/references.py); "
        "flags still override; not with --preset",
    )
    t.add_argument(
        "--sweep",
        action="append",
        default=None,
        metavar="NAME=V1,V2,...",
        help="train a hyperparameter population in one compile (repeatable: grid over all); "
        "e.g. --sweep lr=1e-4,3e-4,1e-3",
    )
    add_sink_flags(t)
    t.add_argument(
        "--eval-every",
        type=strict_int,
        default=None,
        metavar="N",
        help="every N updates, play greedy (mode action) episodes on separate env copies; their mean "
        "return goes to metrics.csv (eval_return), the progress bar and the plot",
    )
    t.add_argument(
        "--eval-episodes",
        type=strict_int,
        default=None,
        metavar="K",
        help="episodes per run and evaluation, in parallel (default 10; needs --eval-every)",
    )
    add_pbt_flags(t)
    add_process_flags(t)
    add_config_flags(t)


def add_eval(e: argparse.ArgumentParser) -> None:
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--episodes", type=strict_int, default=None, help="episodes per seed (run in parallel); default 100")
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    e.add_argument(
        "--protocol",
        choices=("gymnax-blines",),
        default=None,
        help="a published baseline's evaluation: gymnax-blines = 164 episodes per seed with SAMPLED "
        "actions (their batch_evaluate); not with --episodes/--stochastic",
    )
    e.add_argument("--seed", type=strict_int, default=0, help="evaluation random seed")
    e.add_argument("--checkpoint", default=None, help="a checkpoint folder (default: the latest)")
    e.add_argument("--gif", default=None, metavar="OUT.gif", help="render one episode of seed 0 to a GIF")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")
    e.add_argument(
        "--member",
        type=strict_int,
        default=None,
        metavar="K",
        help="evaluate only member K of a sweep or PBT run (PBT default: the best member)",
    )
