"""``python -m purejaxppo reward``: train a reward model on preference pairs, or ``--resume`` one.

``--model DIR`` (a local Hugging Face folder: a causal LM to start from, or a reward model to
train further; its ``tokenizer.json`` reads the text), ``--pairs FILE.jsonl`` (rows with
``prompt``, ``chosen``, ``rejected`` and an optional ``margin``). The run folder is every run
kind's (config.json, metrics.csv with ``train_loss``, ``train_accuracy``, ``eval_loss``,
``eval_accuracy`` per epoch, checkpoints, summary.json) plus ``model/``, the trained reward
model in the ``*ForSequenceClassification`` layout, for ``rlhf --reward-model`` and transformers.
"""

from __future__ import annotations

import argparse
import os
import time

from purejaxppo.cli.errors import UserError, check_seed
from purejaxppo.cli.train_setup import add_sink_flags, check_sinks, sinks_for

# flag -> (RewardConfig field, type, help)
CONFIG_FLAGS = {
    "--epochs": ("epochs", int, "epochs over the training pairs (default 3)"),
    "--minibatch": ("minibatch", int, "pairs per optimizer step (default 16)"),
    "--lr": ("learning_rate", float, "AdamW learning rate (default 1e-5)"),
    "--weight-decay": ("weight_decay", float, "AdamW weight decay (default 0)"),
    "--max-grad-norm": ("max_grad_norm", float, "global gradient clip; 0 = off (default 1)"),
    "--held-out": ("held_out", float, "share of pairs held out for the accuracy (default 0.1)"),
    "--max-prompt": ("max_prompt", int, "prompt tokens kept (the last ones; longer prompts are cut, counted)"),
    "--max-response": ("max_response", int, "response tokens kept (longer responses are cut, counted)"),
}


def add_reward(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="local model folder (config.json, model.safetensors, tokenizer.json)")
    p.add_argument("--pairs", default=None, help=".jsonl preference pairs: prompt, chosen, rejected (margin)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="independent runs trained at once (default 1)")
    p.add_argument("--run-dir", default=None, help="run folder (default runs/reward-<time>)")
    p.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue this run folder (no other flags)")
    p.add_argument("--chunk", type=int, default=1, help="epochs per compiled chunk (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_sink_flags(p)
    for flag, (dest, typ, text) in CONFIG_FLAGS.items():
        p.add_argument(flag, dest=f"rm_{dest}", type=typ, default=None, help=text, metavar=flag[2:].upper())


def cmd_reward(args) -> int:
    from purejaxppo.programs.reward_program import RewardConfig

    given = [f for f, (d, _, _) in CONFIG_FLAGS.items() if getattr(args, f"rm_{d}") is not None]
    given += [f for f in ("--model", "--pairs") if getattr(args, f[2:]) is not None]
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    check_seed("--seed", args.seed)
    if args.seeds < 1 or args.chunk < 1:
        raise UserError(f"--seeds={args.seeds} and --chunk={args.chunk} must be >= 1")
    if not args.resume:
        for flag in ("--model", "--pairs"):
            if getattr(args, flag[2:]) is None:
                raise UserError(f"{flag} is required (python -m purejaxppo reward --model DIR --pairs FILE.jsonl)")
        config = RewardConfig(
            **{d: getattr(args, f"rm_{d}") for d, _, _ in CONFIG_FLAGS.values() if getattr(args, f"rm_{d}") is not None}
        ).validate()
    check_sinks(args)
    from purejaxppo.programs.reward_run import resume_reward, train_reward
    from purejaxppo.run.progress import progress_bar

    def cuts(c):
        if not args.quiet and (c.prompts or c.responses):
            print(
                f"note: cut {c.prompts} prompt(s) to --max-prompt and {c.responses} response(s) to --max-response",
                flush=True,
            )

    on_chunk, close = progress_bar(
        args.quiet, "reward", metric="eval_accuracy", shown="held-out accuracy", steps="pairs", fmt=".3f"
    )
    try:
        if args.resume:  # the folder's kind says which command continues it
            from purejaxppo.cli.train_cmd import refuse_other_command
            from purejaxppo.programs import kinds

            kind, record = kinds.folder(args.resume)
            refuse_other_command(kind, args.resume, args.command)
            run_dir = args.resume
            result = resume_reward(
                run_dir, record, on_chunk=on_chunk, on_cuts=cuts, loggers=sinks_for(args, run_dir, record.config, 1)
            )
        else:
            run_dir = args.run_dir or os.path.join("runs", f"reward-{time.strftime('%Y%m%d-%H%M%S')}")
            result = train_reward(
                config,
                args.model,
                args.pairs,
                seed=args.seed,
                num_seeds=args.seeds,
                run_dir=run_dir,
                chunk_updates=args.chunk,
                on_chunk=on_chunk,
                on_cuts=cuts,
                loggers=sinks_for(args, run_dir, config, 1),
            )
    finally:
        close()
    if not args.quiet:
        from purejaxppo.programs.reward_kind import RewardRuns

        RewardRuns().report(result, run_dir)
    return 0
