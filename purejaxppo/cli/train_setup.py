"""What ``train`` and ``train --resume`` share: flag checks before any work, the optional sinks
and the compile caches (each kind's closing report is its own, :mod:`purejaxppo.run.kinds`)."""

from __future__ import annotations

import os

from purejaxppo.cli.errors import MAX_EPISODES, UserError, check_seed

MAX_RUNS = 2**31 - 1


def add_sink_flags(p) -> None:
    """``--tensorboard`` and ``--wandb [PROJECT]``: where a run logs besides metrics.csv."""
    p.add_argument("--tensorboard", action="store_true", help="also log to RUN_DIR/tb (needs purejaxppo[tensorboard])")
    p.add_argument(
        "--wandb",
        nargs="?",
        const="purejaxppo",
        default=None,
        metavar="PROJECT",
        help="also log to Weights & Biases project PROJECT (needs purejaxppo[wandb])",
    )


def sinks_for(args, run_dir, config, num_members):
    from purejaxppo.run.sinks import TensorBoardLogger, WandbLogger

    out = []
    if args.tensorboard:
        out.append(TensorBoardLogger(run_dir, config.batch_size, num_members))
    if args.wandb:
        out.append(WandbLogger(run_dir, config.batch_size, config.to_dict(), args.wandb, num_members))
    return out


def check_init_from(args, config, seeds):
    """``--init-from`` (+ ``--member``): its record for config.json, checked before any work; or None."""
    if args.init_from is None:
        if args.member is not None:
            raise UserError("--member K picks the member of an --init-from sweep or PBT run; add --init-from RUN_DIR")
        return None
    import purejaxppo.programs  # noqa: F401  (every run kind registered: the source may be any)
    from purejaxppo.run.warm_start import describe

    return describe(args.init_from, args.member, config, seeds)


def check_counts(args, seeds=None) -> None:
    for flag, v in (
        ("--seeds", seeds),
        ("--chunk", args.chunk),
        ("--checkpoint-every", args.checkpoint_every),
        ("--stop-after", args.stop_after),
    ):
        if v is not None and v < 1:
            raise UserError(f"{flag}={v} must be >= 1")
    for flag, v in (("--seeds", seeds), ("--pbt", args.pbt)):
        if v is not None and v > MAX_RUNS:
            raise UserError(
                f"{flag}={v:,} must be at most {MAX_RUNS:,} (the device counts the runs in int32); use fewer"
            )
    check_seed("--seed", args.seed)


def check_overrides(args) -> None:
    """A hyperparameter given as a flag AND swept (--sweep) or searched (--search) would be
    ignored for the swept one: refused, naming both."""
    for what, specs in (("--sweep", args.sweep), ("--search", getattr(args, "search", None))):
        for spec in specs or []:
            name = spec.split("=", 1)[0].strip().replace("-", "_")
            if getattr(args, f"cfg_{name}", None) is not None:
                raise UserError(
                    f"--{name.replace('_', '-')} is given and {what} {spec!r} sets the same "
                    f"hyperparameter per member; drop one of them"
                )


def eval_flags(args, config) -> dict:
    """``--eval-every``/``--eval-episodes`` checked before any work -> ``train_chunked`` keywords."""
    if args.eval_every is None:
        if args.eval_episodes is not None:
            raise UserError("--eval-episodes needs --eval-every N (how often to evaluate, in updates)")
        return {}
    from purejaxppo.programs.eval_program import check_eval

    episodes = 10 if args.eval_episodes is None else args.eval_episodes
    if episodes > MAX_EPISODES:
        raise UserError(
            f"--eval-episodes={episodes} must be between 1 and {MAX_EPISODES:,} (all episodes of all "
            "runs play in parallel, in memory)"
        )
    check_eval(args.eval_every, episodes, config.num_updates)
    return {"eval_every": args.eval_every, "eval_episodes": episodes}


def distinct_sweeps(specs: list) -> list:
    """``--sweep lr=1e-3 --sweep lr=1e-4`` would silently keep one: refused, naming the fix."""
    seen = {}
    for spec in specs:
        name = spec.split("=", 1)[0].strip().replace("-", "_")
        if name in seen:
            values = f"{seen[name].split('=', 1)[-1]},{spec.split('=', 1)[-1]}"
            raise UserError(
                f"--sweep {name} is given twice ({seen[name]!r} and {spec!r}); list all values in one: "
                f"--sweep {name}={values}"
            )
        seen[name] = spec
    return specs


def check_sinks(args) -> None:
    from purejaxppo.run.sinks import require_tensorboard, require_wandb

    if args.tensorboard:
        require_tensorboard()
    if args.wandb:
        require_wandb()


def compile_cache(args):
    """Turn on the compile caches (unless opted out): JAX's persistent cache, and the folder of
    whole executables inside it (:mod:`purejaxppo.run.executable_cache`) that is returned; or None."""
    if getattr(args, "no_compile_cache", False) or os.environ.get("PUREJAXPPO_NO_COMPILE_CACHE"):
        return None
    from purejaxppo.run.compile_cache import announce_once, enable

    path = enable()
    notice = announce_once(path) if path else None
    if notice and not args.quiet:
        print(notice, flush=True)
    if not path or os.environ.get("PUREJAXPPO_NO_EXECUTABLE_CACHE"):  # JAX's cache alone (benchmarks compare)
        return None
    return os.path.join(path, "executables")
