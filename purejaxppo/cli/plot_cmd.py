"""``plot RUN_DIR...``: learning curves (and a PBT run's hyperparameter schedules) to an image."""

from __future__ import annotations

import os

from purejaxppo.cli.errors import UserError


def cmd_plot(args) -> int:
    from purejaxppo.run.outputs import check_out_file
    from purejaxppo.cli.plot import plot_runs

    if os.path.splitext(args.out)[1] == "" and not os.path.isdir(args.out):
        args.out += ".png"  # what matplotlib would write; reported under its real name
    check_out_file(args.out, "-o", (".png", ".pdf", ".svg", ".jpg", ".jpeg"))
    for d in args.run_dirs:
        if not os.path.exists(os.path.join(d, "metrics.csv")):
            raise UserError(f"{d!r} has no metrics.csv; pass run folders written by `purejaxppo train`")
    metrics = None
    if args.metric is not None:
        metrics = [m.strip() for m in args.metric.split(",")]
        if not all(metrics):
            raise UserError(
                f"--metric {args.metric!r} names an empty column; give names separated by commas, "
                "e.g. --metric episode_return,entropy"
            )
    if args.smooth < 1:
        raise UserError(f"--smooth {args.smooth}: give a number of updates of at least 1 (1 = no smoothing)")
    try:
        out = plot_runs(
            args.run_dirs, args.out, metrics, smooth=args.smooth, smoother=args.smoother, x=args.x, iqm=args.iqm
        )
    except KeyError as e:
        raise UserError(e.args[0]) from None
    print(f"learning curves of {len(args.run_dirs)} run(s) written to {out}")
    for d in args.run_dirs:  # PBT runs: their hyperparameter schedules too
        if os.path.exists(os.path.join(d, "lineage.csv")):
            from purejaxppo.programs.pbt_run import read_summary
            from purejaxppo.cli.plot import plot_schedules

            stem, ext = os.path.splitext(out)
            path = plot_schedules(
                d,
                f"{stem}-{os.path.basename(os.path.normpath(d))}-schedules{ext or '.png'}",
                read_summary(d).get("best_member"),
            )
            print(f"hyperparameter schedules of {d} written to {path}")
    return 0


def _headline(run_dirs) -> str:
    """The metric the folders' kind sums a run up with (each kind's own: return, score)."""
    from purejaxppo.programs import kinds

    names = {kinds.folder(d)[0].headline[0] for d in run_dirs}
    if len(names) > 1:
        raise UserError(
            f"these folders hold runs of different kinds (headline metrics {', '.join(sorted(names))}); "
            "name the column to plot with --metric"
        )
    return names.pop()
