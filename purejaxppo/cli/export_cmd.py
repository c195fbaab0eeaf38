"""``python -m purejaxppo export RUN_DIR OUT_DIR``: an rlhf run's final policy (LoRA merged) in
the Hugging Face layout of the model it started from, loadable by ``load_pretrained`` and by
``transformers.AutoModelForCausalLM.from_pretrained(OUT_DIR)``."""

from __future__ import annotations

import argparse


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="an rlhf run folder")
    p.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) folder for the model")
    p.add_argument("--run", type=int, default=0, help="which of the folder's runs (seeds) to export (default 0)")


def cmd_export(args) -> int:
    from purejaxppo.programs.rlhf_export import export_policy

    update = export_policy(args.run_dir, args.out_dir, args.run)
    print(f"wrote {args.out_dir}: run {args.run}'s policy at update {update} of {args.run_dir} (Hugging Face layout)")
    return 0
