"""The CLI's PBT commands: ``train --pbt N --search NAME=DIST:LOW:HIGH ...``, its resume and report.

Parses, calls :mod:`purejaxppo.programs.pbt_run` and reports (:mod:`purejaxppo.programs.pbt_kind`); bad flags raise :class:`ConfigError`
(``error: ...``, exit 2). :mod:`~purejaxppo.cli.train_cmd` passes in its progress bar, sinks and compile-cache setup.
"""

from __future__ import annotations

import argparse
import os
import time

from purejaxppo.cli.flags import strict_float, strict_int
from purejaxppo.config import ConfigError


def add_pbt_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("population-based training")
    g.add_argument(
        "--pbt",
        type=strict_int,
        default=None,
        metavar="N",
        help="train N members with population-based training (exploit/explore inside the compiled "
        "program); needs --search",
    )
    g.add_argument(
        "--search",
        action="append",
        default=None,
        metavar="NAME=DIST:LOW:HIGH",
        help="a searched hyperparameter, DIST uniform or loguniform (repeatable); "
        "e.g. --search lr=loguniform:1e-5:1e-2",
    )
    g.add_argument(
        "--pbt-interval",
        type=strict_int,
        default=None,
        metavar="UPDATES",
        help="updates between exploit steps (20); 0 trains the same population without exploitation",
    )
    g.add_argument(
        "--pbt-quantile",
        type=strict_float,
        default=None,
        metavar="Q",
        help="the bottom Q of members copy one of the top Q (0.25)",
    )


def check_pbt_flags(args) -> None:
    """Refuse combinations that make no sense, before anything is built."""
    if args.pbt is None:
        extra = [
            f
            for f, v in (
                ("--search", args.search),
                ("--pbt-interval", args.pbt_interval),
                ("--pbt-quantile", args.pbt_quantile),
            )
            if v is not None
        ]
        if extra and not getattr(args, "resume", None):
            raise ConfigError(f"{', '.join(extra)} only apply to population-based training; add --pbt N")
        return
    if not args.search:
        raise ConfigError("--pbt needs at least one --search NAME=DIST:LOW:HIGH, e.g. --search lr=loguniform:1e-5:1e-2")
    if args.sweep is not None:
        raise ConfigError(
            "--pbt searches its hyperparameters itself; --sweep cannot be combined with it (give "
            "each searched range with --search, or fix a value with its own flag)"
        )
    if args.split == "envs":
        raise ConfigError(
            "--pbt splits its members over the devices, and --split envs would split each member's "
            "envs over the same devices; one layout at a time: drop --split envs (members are "
            "independent runs, so splitting them is the faster layout)"
        )


def cmd_train_pbt(
    args, config, devices: int, on_chunk, close, loggers, seeds: int = 1, init_from=None, evaluation=None
) -> int:
    """Train (``args`` parsed, ``config`` validated, ``devices`` set before JAX started);
    ``seeds`` independent populations, ``init_from`` a warm-start record, ``evaluation`` the
    ``eval_every``/``eval_episodes`` keywords."""
    from purejaxppo.run.run_folder import refuse_existing_run
    from purejaxppo.programs.pbt_program import PBTProgram
    from purejaxppo.programs.pbt_kind import report_pbt
    from purejaxppo.programs.pbt_run import train_pbt
    from purejaxppo.run.record import CHECKPOINT_EVERY, CHUNK_UPDATES

    settings = pbt_settings(args, config)
    program = PBTProgram(config, settings, num_devices=devices, num_seeds=seeds)  # unknown envs etc. fail here
    run_dir = args.run_dir or os.path.join(
        "runs", f"{config.env_name.replace(':', '-')}-pbt-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    from purejaxppo.run import processes

    writer = processes.current().writer  # several processes: process 0 alone has the folder
    if writer:
        refuse_existing_run(run_dir)
    if not args.quiet:
        pops = f" x {seeds} independent populations" if seeds > 1 else ""
        print(
            f"purejaxppo: PBT of {args.pbt} members{pops} on {config.env_name} ({', '.join(settings.space.names)}; "
            f"exploit every {settings.interval or 'never'} updates) in one compile on {devices} device(s) | "
            f"{config.num_updates} updates x {config.batch_size} steps | run folder {run_dir} | compiling...",
            flush=True,
        )
    try:
        res = train_pbt(
            config,
            settings,
            args.pbt,
            seed=args.seed or 0,
            num_seeds=seeds,
            run_dir=run_dir,
            program=program,
            chunk_updates=args.chunk or CHUNK_UPDATES,
            on_chunk=on_chunk,
            checkpoint_every=args.checkpoint_every or CHECKPOINT_EVERY,
            stop_after=args.stop_after,
            loggers=loggers(run_dir, args.pbt),
            init_from=init_from,
            **(evaluation or {}),
        )
    finally:
        close()
    return (report_pbt(res, run_dir) or 0) if writer else 0


def pbt_settings(args, config):
    from purejaxppo.algorithms.pbt import parse_search, search_space
    from purejaxppo.programs.pbt_program import PBTSettings

    space = search_space(config, parse_search(args.search))
    interval = 20 if args.pbt_interval is None else args.pbt_interval
    return PBTSettings(space, interval, 0.25 if args.pbt_quantile is None else args.pbt_quantile)
