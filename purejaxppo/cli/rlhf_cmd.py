"""``python -m purejaxppo rlhf``: token-level PPO (SFT, then PPO), or ``--resume``.

Two ways in: a built-in task (``--task reverse|grammar``, a TinyLM or ``--init`` GPT-2), or the
user's own model and data (``--model DIR --prompts FILE --reward FILE.py:FUNC``, or
``--reward-model DIR``; ``--sft-data FILE`` for a supervised stage first). Every input is
checked before any work: each flag's range and choices as it is parsed
(:mod:`purejaxppo.cli.rlhf_flags`), then the flags together, the files and the model folder, once,
into a :class:`~purejaxppo.cli.rlhf_prepare.PreparedRun` that this command trains: a bad one
is one ``error:`` line, exit 2, nothing created.

The run folder is a control run's (config.json, metrics.csv with one row per iteration and
seed, checkpoints, summary.json) plus ``samples.txt`` (greedy generations, decoded, at every
``--eval-every``); a text run's config.json also records the model folder and the sha256 of its
weights, its tokenizer and the data files (``rlhf.hashes``, checked on ``--resume``).
"""

from __future__ import annotations

import json
import time

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.export_cmd import check_export_flag, export_at_end
from purejaxppo.cli.flags import record_of
from purejaxppo.cli.rlhf_flags import RLHFCommand, add_rlhf, given_flags
from purejaxppo.cli.rlhf_prepare import count_devices, prepare
from purejaxppo.cli.train_setup import check_sinks, sinks_for

__all__ = ["add_rlhf", "cmd_rlhf"]


def _reward_failed(task) -> bool:
    """Whether the run's text reward (the user's function, called on the host) has failed: a
    stop of the run is then the user's to fix, not a divergence."""
    from purejaxppo.lm.rewards.python_reward import TextReward

    reward = getattr(task, "reward", None)
    return isinstance(reward, TextReward) and reward.error is not None


def cmd_rlhf(args) -> int:
    from purejaxppo.cli.distributed import join

    if (args.distributed or args.coordinator is not None) and args.reward:  # before waiting for the others
        raise UserError(
            "--reward (a Python function on the host) does not run across processes yet; use "
            "--reward-model DIR, or one process (--devices N splits the prompts over its devices)"
        )
    group = join(args)  # several processes: before anything starts JAX
    cmd = record_of(RLHFCommand, args)  # this session's own settings, the defaults declared there
    given = given_flags(args)
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    run = None
    if args.resume:  # the folder's kind says which command continues it
        from purejaxppo.cli.train_cmd import refuse_other_command
        from purejaxppo.programs import kinds

        record = group.share(lambda: kinds.folder(args.resume)[1])  # process 0 reads the folder
        refuse_other_command(kinds.kind_named(record.kind), args.resume, args.command)
        group.share(lambda: (check_export_flag(args, record.settings), check_sinks(args)))
        count_devices(str(record.num_devices), record.num_devices, "", group)  # still there?
        label = getattr(record.settings, "task", "")
    else:
        run = prepare(args, cmd, group)  # checked and read once; a used --run-dir is refused here, before the SFT
        label = run.settings.task
    from purejaxppo.lm.rewards.python_reward import RewardFunctionError
    from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
    from purejaxppo.run.guards import NonFiniteError
    from purejaxppo.run.progress import progress_bar

    on_chunk, close = progress_bar(
        args.quiet,
        f"rlhf {label}",
        metric="score",
        eval_metric="eval_score",
        shown="score",
        steps="sequences",
        fmt=".3f",
    )
    # a flag not given leaves the record's default (a new run) or the folder's own (a resume)
    session = {k: v for k, v in (("chunk_updates", args.chunk), ("stop_after", args.stop_after)) if v is not None}
    try:
        if args.resume:
            result = resume_rlhf(
                args.resume,
                record,
                on_chunk=on_chunk,
                loggers=sinks_for(args, args.resume, record.config, 1) if group.writer else [],
                **session,
            )
            run_dir = args.resume
        else:
            t = time.perf_counter()
            sft = sft_model(run.settings, cmd.seed, run.start)
            if not args.quiet:
                ev = {k[5:]: round(v, 3) for k, v in sft[2].items() if k.startswith("eval_")}
                print(
                    f"SFT: {run.settings.sft_steps} steps in {time.perf_counter() - t:.1f}s; greedy {json.dumps(ev)}",
                    flush=True,
                )
            run_dir = run.run_dir
            result = train_rlhf(
                run.config,
                run.settings,
                seed=cmd.seed,
                num_seeds=cmd.seeds,
                run_dir=run_dir,
                num_devices=run.devices,
                on_chunk=on_chunk,
                sft=sft,
                init_from=run.init_from,
                loggers=sinks_for(args, run_dir, run.config, 1) if group.writer else [],
                **session,
            )
    except RewardFunctionError as e:  # failed in an evaluation (outside the training chunks)
        raise UserError(str(e)) from None
    except NonFiniteError as e:
        if run is not None and _reward_failed(run.task):  # the user's function failed inside an iteration
            raise UserError(str(e)) from None
        raise
    finally:
        close()
    if group.writer:  # the others have no folder to read
        if not args.quiet:
            _report(run_dir)
        export_at_end(args, result, run_dir)
    return 0


def _report(run_dir: str) -> None:
    from purejaxppo.programs.rlhf_kind import report_token_run

    report_token_run(run_dir)
