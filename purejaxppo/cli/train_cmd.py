"""``train`` (a run, a sweep or a PBT population in a new folder) and ``train --resume RUN_DIR``."""

from __future__ import annotations

import os

from purejaxppo.cli.distributed import global_devices, join
from purejaxppo.cli.errors import UserError
from purejaxppo.cli.flags import config_from_args
from purejaxppo.cli.pbt_cli import check_pbt_flags
from purejaxppo.cli.train_setup import (
    check_counts,
    check_init_from,
    check_overrides,
    check_sinks,
    compile_cache,
    distinct_sweeps,
    eval_flags,
    sinks_for,
)


def cmd_train(args) -> int:
    import math
    import time

    from purejaxppo.run.run_folder import refuse_existing_run
    from purejaxppo.agents.registry import validate_config as validate  # the config's checks, then its agent's
    from purejaxppo.envs.registry import check_env_name
    from purejaxppo.run.outputs import check_run_dir
    from purejaxppo.parallel.runs_axis import parse_sweep
    from purejaxppo.run.progress import progress_bar

    group = join(args)  # several processes: before anything starts JAX
    if args.resume:
        return cmd_resume(args, group)
    check_pbt_flags(args)
    seeds = 1 if args.seeds is None else args.seeds
    check_counts(args, seeds)
    check_overrides(args)
    grid = parse_sweep(distinct_sweeps(args.sweep)) if args.sweep else None
    n_members = math.prod(len(v) for v in grid.values()) if grid else 1
    config = validate(config_from_args(args))
    check_env_name(config.env_name)  # before any cache key or env is built from it
    init_from = check_init_from(args, config, seeds)
    evaluation = eval_flags(args, config)

    def check_folder():  # on process 0 alone, the one that writes it
        import purejaxppo.programs  # noqa: F401  (every run kind registered: a used folder names its own command)

        check_run_dir(args.run_dir or "runs")  # output paths and optional sinks: checked before any work
        if args.run_dir:
            refuse_existing_run(args.run_dir)
        check_sinks(args)

    group.share(check_folder)
    split = args.split or "seeds"
    devices = _devices(args, config, split, n_members if grid else None, seeds, group)
    cache = None if group.many else compile_cache(args)  # whole executables are per process layout
    if args.pbt is not None:
        from purejaxppo.cli.pbt_cli import cmd_train_pbt

        return cmd_train_pbt(
            args,
            config,
            devices,
            *progress_bar(args.quiet, config.env_name),
            loggers=lambda run_dir, n: sinks_for(args, run_dir, config, n) if group.writer else [],
            seeds=seeds,
            init_from=init_from,
            evaluation=evaluation,
        )
    from purejaxppo.programs.runs import train_chunked
    from purejaxppo.programs.run_kind import report_runs
    from purejaxppo.run.record import CHECKPOINT_EVERY, CHUNK_UPDATES
    from purejaxppo.parallel.runs_axis import make_population
    from purejaxppo.programs.program import Program

    members = make_population(config, grid, num_seeds=seeds).members if grid else None
    program = Program(
        config,
        num_devices=devices,
        split=split,  # unknown envs etc. fail here, before any folder
        executables=cache,
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.run_dir or os.path.join(
        "runs", f"{config.env_name.replace(':', '-')}-{'sweep-' if grid else ''}{stamp}"
    )
    if not args.quiet:
        what = f"sweep over {n_members} members x {seeds} seed(s) of" if grid else f"training {seeds} seed(s) of"
        print(
            f"purejaxppo: {what} {config.env_name} in one compile on {devices} device(s)"
            f"{' (envs split)' if split == 'envs' else ''} | {config.num_updates} updates x {config.batch_size} "
            f"steps | run folder {run_dir} | compiling...",
            flush=True,
        )
    on_chunk, close = progress_bar(args.quiet, config.env_name)
    if group.writer:
        os.makedirs(run_dir, exist_ok=True)
    try:
        res = train_chunked(
            config,
            seed=args.seed or 0,
            num_seeds=seeds,
            members=members,
            run_dir=run_dir,
            chunk_updates=args.chunk or CHUNK_UPDATES,
            program=program,
            on_chunk=on_chunk,
            checkpoint_every=args.checkpoint_every or CHECKPOINT_EVERY,
            stop_after=args.stop_after,
            loggers=sinks_for(args, run_dir, config, n_members) if group.writer else [],
            init_from=init_from,
            notes={"reference": args.reference} if args.reference else None,
            **evaluation,
        )
    finally:
        close()
    return finish(group, lambda: report_runs(res, run_dir) or 0)


def finish(group, report) -> int:
    """Process 0 reports (the CLI's ``main`` then leaves the processes in order)."""
    return report() if group.writer else 0


def _devices(args, config, split: str, n_members, seeds: int, group) -> int:
    """Count the devices and set them before JAX starts (it reads XLA_FLAGS once); ``n_members``
    is None without a sweep. Several processes: all their devices (``group``)."""
    import math

    from purejaxppo.agents.registry import minibatch_units
    from purejaxppo.cli.devices import choose_devices, set_devices

    choose = global_devices if group.many else choose_devices
    if split == "envs":  # a minibatch's units (env sequences for the GRU) are split too
        units, _ = minibatch_units(config)
        devices = choose(args.devices, math.gcd(config.num_envs, units), "", check=False)
    elif args.pbt is not None:
        runs = f"the PBT population's {args.pbt} members" + (f" x {seeds} seeds" if seeds > 1 else "")
        devices = choose(args.devices, max(args.pbt, 1) * seeds, runs)
    else:
        runs = (
            f"the sweep's {n_members} members x {seeds} seed(s) = {n_members * seeds} runs"
            if n_members
            else f"--seeds={seeds}"
        )
        devices = choose(args.devices, (n_members or 1) * seeds, runs)
    if not group.many:
        set_devices(devices)
    return devices


def _refuse_changes(args) -> None:
    """``--resume`` keeps the run's own config and seeds: any flag that would change them is refused."""
    given = sorted(
        "--" + k[4:].replace("_", "-") for k, v in vars(args).items() if k.startswith("cfg_") and v is not None
    )
    given += [
        f
        for f, v in (
            ("--seeds", args.seeds),
            ("--seed", args.seed),
            ("--run-dir", args.run_dir),
            ("--sweep", args.sweep),
            ("--split", args.split),
            ("--pbt", args.pbt),
            ("--reference", args.reference),
            ("--search", args.search),
            ("--pbt-interval", args.pbt_interval),
            ("--pbt-quantile", args.pbt_quantile),
            ("--init-from", args.init_from),
            ("--member", args.member),
            ("--eval-every", args.eval_every),
            ("--eval-episodes", args.eval_episodes),
        )
        if v is not None
    ]
    if given:
        raise UserError(
            f"--resume continues {args.resume!r} with its saved config and seeds, so {', '.join(given)} "
            "cannot be changed; drop them, or start a new run with another --run-dir"
        )


def cmd_resume(args, group) -> int:
    from purejaxppo.cli.devices import choose_devices, set_devices
    from purejaxppo.programs import kinds
    from purejaxppo.run.progress import progress_bar
    from purejaxppo.run.outputs import check_run_dir
    from purejaxppo.run.run_folder import finished_run

    run_dir = args.resume
    _refuse_changes(args)
    check_counts(args)
    record = group.share(lambda: kinds.folder(run_dir)[1])  # process 0 reads the folder
    kind = kinds.kind_named(record.kind)
    refuse_other_command(kind, run_dir, args.command)
    seeds, members, config = record.num_seeds, record.members, record.config
    if group.share(lambda: finished_run(run_dir)):  # nothing to compute, nothing to rewrite
        return finish(
            group,
            lambda: (
                print(
                    f"{run_dir} already finished all {config.num_updates} updates; nothing to "
                    f"do (its summary.json is unchanged). Evaluate it with `python -m "
                    f"purejaxppo eval {run_dir}`"
                )
                or 0
            ),
        )
    group.share(lambda: (check_run_dir(run_dir, "--resume"), check_sinks(args)))
    devices = record.num_devices
    if not group.many:
        choose_devices(str(devices), devices, "")  # still available?
        set_devices(devices)
    else:  # the same count, whichever processes hold the devices
        global_devices(str(devices), devices, "")
    cache = None if group.many else compile_cache(args)
    if not args.quiet:
        what = f"{len(members)} members x {seeds} seed(s)" if members else f"{seeds} seed(s)"
        print(
            f"purejaxppo: resuming {run_dir} ({config.env_name}, {what}, {config.num_updates} updates) | compiling...",
            flush=True,
        )
    on_chunk, close = progress_bar(args.quiet, config.env_name)
    kw = {
        "on_chunk": on_chunk,
        "stop_after": args.stop_after,
        "loggers": sinks_for(args, run_dir, config, len(members) if members else 1) if group.writer else [],
        "program": kind.program(record, num_devices=devices, split=record.split, executables=cache),
    }
    if args.chunk is not None:
        kw["chunk_updates"] = args.chunk
    if args.checkpoint_every is not None:
        kw["checkpoint_every"] = args.checkpoint_every
    try:
        res = kind.resume(run_dir, record, **kw)
    finally:
        close()
    return finish(group, lambda: kind.report(res, run_dir) or 0)


def refuse_other_command(kind, run_dir: str, command: str) -> None:
    """A folder is continued by its own kind's command: any other gets one line naming it."""
    if kind.command != command:
        raise UserError(
            f"{run_dir!r} holds a {kind.what} run, which `{command} --resume` does not continue; "
            f"continue it with python -m purejaxppo {kind.command} --resume {run_dir}"
        )
