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
import dataclasses
import os
import time
from typing import Optional

from purejaxppo.cli.errors import UserError, seed_setting
from purejaxppo.cli.flags import add_field_flags, field_flag, given_fields, one_line_errors, record_of
from purejaxppo.cli.train_setup import add_sink_flags, check_sinks, sinks_for
from purejaxppo.config.fields import setting


@dataclasses.dataclass(frozen=True)
class RewardCommand:
    """How one ``reward`` session runs, besides the training config (``RewardConfig``): the
    fields' declarations are the flags'."""

    model: Optional[str] = setting(
        None,
        "a local model folder (config.json, model.safetensors, tokenizer.json): a causal LM to start from, or "
        "a reward model to train further",
        metavar="DIR",
    )
    pairs: Optional[str] = setting(
        None, ".jsonl preference pairs: prompt, chosen, rejected and an optional margin per line", metavar="FILE"
    )
    seed: int = seed_setting("the held-out split and the runs")
    seeds: int = setting(1, "independent runs trained at once, all from the same model", lo=1)
    run_dir: Optional[str] = setting(None, "the run folder (default runs/reward-<time>)", metavar="DIR")
    resume: Optional[str] = setting(
        None, "continue this run folder with its own settings (no --model, --pairs or config flags)", metavar="RUN_DIR"
    )
    chunk: int = setting(1, "epochs per compiled chunk (a progress report and a checkpoint after each)", lo=1)
    quiet: bool = setting(False, "no progress bar and no report at the end", switch=True)


def add_reward(p: argparse.ArgumentParser) -> None:
    """The command's flags, each generated from its field's declaration (:class:`RewardCommand`,
    ``RewardConfig``): help, range (checked as argparse parses) and default."""
    from purejaxppo.programs.reward_program import RewardConfig

    one_line_errors(p)
    add_field_flags(p, RewardCommand)
    add_sink_flags(p)
    add_field_flags(p.add_argument_group("training (defaults: RewardConfig's)"), RewardConfig, dest_prefix="rm_")


def _config_flag(name: str) -> str:
    from purejaxppo.programs.reward_program import RewardConfig

    return field_flag(next(f for f in dataclasses.fields(RewardConfig) if f.name == name))


def cmd_reward(args) -> int:
    from purejaxppo.programs.reward_program import RewardConfig

    cmd = record_of(RewardCommand, args)  # this session's own settings, the defaults declared there
    changes = given_fields(RewardConfig, args, "rm_")
    given = [_config_flag(name) for name in changes]
    given += [flag for flag in ("--model", "--pairs", "--seed", "--seeds") if getattr(args, flag[2:]) is not None]
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    if not args.resume:
        for flag in ("--model", "--pairs"):
            if getattr(args, flag[2:]) is None:
                raise UserError(f"{flag} is required (python -m purejaxppo reward --model DIR --pairs FILE.jsonl)")
        config = RewardConfig(**changes).validate(_config_flag)
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
                seed=cmd.seed,
                num_seeds=cmd.seeds,
                run_dir=run_dir,
                chunk_updates=cmd.chunk,
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
