"""``python -m purejaxppo export RUN_DIR OUT_DIR``: an rlhf run's final policy (LoRA merged) in
the Hugging Face layout of the model it started from, loadable by ``load_pretrained`` and by
``transformers.AutoModelForCausalLM.from_pretrained(OUT_DIR)``; and ``rlhf --export DIR``,
the same written when a run finishes (:func:`check_export_flag` before any work,
:func:`export_at_end`)."""

from __future__ import annotations

import argparse

from purejaxppo.cli.errors import UserError


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="an rlhf run folder")
    p.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) folder for the model")
    p.add_argument("--run", type=int, default=0, help="which of the folder's runs (seeds) to export (default 0)")


def cmd_export(args) -> int:
    from purejaxppo.programs.rlhf_export import export_policy

    update = export_policy(args.run_dir, args.out_dir, args.run)
    print(f"wrote {args.out_dir}: run {args.run}'s policy at update {update} of {args.run_dir} (Hugging Face layout)")
    return 0


def check_export_flag(args, settings) -> None:
    """``--export DIR``: a new or empty folder, and a run whose model has a Hugging Face layout."""
    if args.export_dir is None:
        return
    from purejaxppo.config import ConfigError
    from purejaxppo.programs.rlhf_export import check_exportable, check_out_dir

    try:
        check_out_dir(args.export_dir, "--export")
        check_exportable(settings, f"--export {args.export_dir}: this run")
    except ConfigError as e:
        raise UserError(str(e)) from None


def export_at_end(args, result, run_dir: str) -> None:
    """The finished run's policy out as ``export RUN_DIR DIR`` writes it (a stopped run: said, not written)."""
    if args.export_dir is None:
        return
    if not result.finished:
        print(f"--export: the run stopped before its last iteration; {args.export_dir} was not written", flush=True)
        return
    from purejaxppo.programs.rlhf_export import export_policy

    update = export_policy(run_dir, args.export_dir)
    if not args.quiet:
        print(f"wrote {args.export_dir}: run 0's policy at update {update} (Hugging Face layout)", flush=True)
