"""``python -m purejaxppo rlhf``: token-level PPO (SFT, then PPO), or ``--resume``.

Two ways in: a built-in task (``--task reverse|grammar``, a TinyLM or ``--init`` GPT-2), or the
user's own model and data (``--model DIR --prompts FILE --reward FILE.py:FUNC``, or
``--reward-model DIR``; ``--sft-data FILE`` for a supervised stage first). Every input is
checked before any work (:mod:`purejaxppo.cli.rlhf_flags`, then the files and the model
folder here): a bad one is one ``error:`` line, exit 2, nothing created.

The run folder is a control run's (config.json, metrics.csv with one row per iteration and
seed, checkpoints, summary.json) plus ``samples.txt`` (greedy generations, decoded, at every
``--eval-every``); a text run's config.json also records the model folder and the sha256 of its
weights, its tokenizer and the data files (``rlhf.hashes``, checked on ``--resume``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.rlhf_flags import (
    BOTH,
    TASK_PRESETS,
    TEXT,
    TEXT_SWITCHES,
    TOY,
    add_rlhf,
    check_plain,
    given_flags,
    task_options,
    token_config,
)
from purejaxppo.cli.train_setup import check_sinks, sinks_for

__all__ = ["add_rlhf", "cmd_rlhf"]


def _settings(args, text: bool):
    """The :class:`RLHFSettings` of the flags (paths made absolute: a resume may start elsewhere)."""
    from purejaxppo.programs.rlhf_program import RLHFSettings

    st = {dest: getattr(args, dest) for dest, *_ in {**TEXT, **TOY, **BOTH}.values() if getattr(args, dest) is not None}
    st.update({dest: True for dest, _ in TEXT_SWITCHES.values() if getattr(args, dest)})
    st.setdefault("eval_every", 10)
    if text:
        for dest in ("model_dir", "prompts", "eval_prompts", "sft_data", "reward_model"):
            if st.get(dest):
                st[dest] = os.path.abspath(st[dest])
        path, sep, name = (st.get("reward") or "").rpartition(":")
        if sep and path.endswith(".py"):
            st["reward"] = f"{os.path.abspath(path)}:{name}"
        st.setdefault("sft_steps", 100 if st.get("sft_data") else 0)
        return RLHFSettings(task="text", dtype="bfloat16" if args.bf16 else "float32", **st)
    task = args.task or "reverse"
    preset = TASK_PRESETS.get(task, {"task_options": {}})
    st.setdefault("sft_steps", preset.get("sft_steps", 100))
    options = {**preset["task_options"], **dict(task_options(args.task_options or []))}
    settings = RLHFSettings(
        task=task, task_options=tuple(sorted(options.items())), dtype="bfloat16" if args.bf16 else "float32", **st
    )
    try:
        settings.make_task()
    except (ValueError, TypeError) as e:  # an unknown task, an unknown field, a value out of range
        raise UserError(f"--task {task}: {e}") from None
    return settings


def _load(settings, args, text: bool):
    """Read every file and load the model (the cheap part: no SFT, no compile); a problem is a
    :class:`UserError` naming the flag. Returns ``(settings, vocab)`` (``eval_batch`` set to the
    evaluation prompts of a text run)."""
    from purejaxppo.config import ConfigError
    from purejaxppo.lm.pretrained import CheckpointFolderError, read_config

    flag, folder = ("--model", settings.model_dir) if text else ("--init", settings.init)
    try:
        if text:
            task = _text_task(settings, args)
            settings = dataclasses.replace(settings, eval_batch=len(task.eval_table.texts))
        if folder:
            read_config(folder)
            settings.model(None)  # read here (a text run's model is kept for the SFT stage)
    except (UserError, ConfigError):
        raise
    except CheckpointFolderError as e:
        raise UserError(f"{flag} {_typed(args, flag)}: {e}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:  # a truncated safetensors file, a missing tensor
        if not folder:
            raise
        raise UserError(
            f"{flag} {_typed(args, flag)}: the model cannot be loaded ({type(e).__name__}: {e}); "
            "check the folder holds a complete checkpoint"
        ) from None
    return settings, settings.make_task().vocab_size if not settings.init else read_config(folder)["vocab_size"]


def _text_task(settings, args):
    from purejaxppo.lm.pretrained import CheckpointFolderError
    from purejaxppo.lm.prompt_data import PromptFileError
    from purejaxppo.lm.text_reward import RewardSpecError

    try:
        return settings.make_task()
    except RewardSpecError as e:
        raise UserError(f"--reward {args.reward}: {e}") from None
    except CheckpointFolderError as e:
        if str(e).startswith("--reward-model"):
            raise UserError(str(e)) from None
        if settings.reward_model and os.path.abspath(settings.reward_model) in str(e):
            raise UserError(f"--reward-model {args.reward_model}: {e}") from None
        raise
    except PromptFileError as e:
        raise UserError(str(e)) from None


def _typed(args, flag: str) -> str:
    return getattr(args, {**TEXT, **TOY}[flag][0])


def _check_run_dir(run_dir: str) -> None:
    """A new run's folder: not a file, and not holding a run (say which command continues it)."""
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise UserError(f"--run-dir {run_dir} is a file; give a folder (it is created)")
    held = [n for n in ("config.json", "metrics.csv", "checkpoints") if os.path.exists(os.path.join(run_dir, n))]
    if held:
        from purejaxppo.programs import kinds  # every kind registered, so the folder's answers

        try:
            with open(os.path.join(run_dir, "config.json")) as f:
                hint = kinds.resume_hint(json.load(f), run_dir)  # the folder's own kind names its command
        except (OSError, ValueError, AttributeError):
            hint = f"the command that wrote it, with --resume {run_dir}"
        raise UserError(
            f"--run-dir {run_dir} already holds a run ({', '.join(held)}); continue it with "
            f"{hint}, or choose another --run-dir"
        )


def _prepare(args):
    """Everything checked and read before any work: ``(config, settings, devices, run_dir)``."""
    from purejaxppo.cli.devices import choose_devices

    text = args.model_dir is not None
    check_plain(args, text)
    config = token_config(args, text)
    settings, vocab = _load(_settings(args, text), args, text)
    if config.top_k > vocab:
        raise UserError(
            f"--top-k {config.top_k} is more than the vocabulary's {vocab} tokens; give at most {vocab} (0 = off)"
        )
    devices = choose_devices(args.devices, config.batch_size, f"--batch ({config.batch_size})")
    run_dir = args.run_dir or os.path.join("runs", f"rlhf-{settings.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    _check_run_dir(run_dir)
    if text and not args.quiet:
        _describe_data(settings)
    return config, settings, devices, run_dir


def _describe_data(settings) -> None:
    """What was read: prompts per file, how many were cut (never silently)."""
    task, data = settings.make_task(), settings.text_data()
    line = f"data: {len(task.table.texts)} prompts ({task.table.prompt_len} tokens at most)"
    if settings.eval_prompts:
        line += f", {len(task.eval_table.texts)} evaluation prompts"
    if task.sft:
        line += f", {len(task.sft[0].texts)} SFT pairs"
    print(line, flush=True)
    for name, n in data.cut.items():
        if n:
            print(
                f"data: cut {n} prompts of --{name.replace('_', '-')} to their last tokens (--truncate-prompts)",
                flush=True,
            )


def cmd_rlhf(args) -> int:
    from purejaxppo.cli.devices import set_devices

    given = given_flags(args)
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    if args.resume:  # the folder's kind says which command continues it
        from purejaxppo.cli.train_cmd import refuse_other_command
        from purejaxppo.programs import kinds

        kind, record = kinds.folder(args.resume)
        refuse_other_command(kind, args.resume, args.command)
        devices, label = record.num_devices, getattr(record.settings, "task", "")
    else:
        config, settings, devices, run_dir = _prepare(args)  # a used --run-dir is refused here, before the SFT
        label = settings.task
    check_sinks(args)
    set_devices(devices)
    from purejaxppo.lm.text_reward import RewardFunctionError
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
    chunk = {} if args.chunk is None else {"chunk_updates": args.chunk}  # else the record's default
    try:
        if args.resume:
            resume_rlhf(
                args.resume, record, on_chunk=on_chunk, loggers=sinks_for(args, args.resume, record.config, 1), **chunk
            )
            run_dir = args.resume
        else:
            t = time.perf_counter()
            sft = sft_model(settings, args.seed)
            if not args.quiet:
                ev = {k[5:]: round(v, 3) for k, v in sft[2].items() if k.startswith("eval_")}
                print(
                    f"SFT: {settings.sft_steps} steps in {time.perf_counter() - t:.1f}s; greedy {json.dumps(ev)}",
                    flush=True,
                )
            train_rlhf(
                config,
                settings,
                seed=args.seed,
                num_seeds=args.seeds,
                run_dir=run_dir,
                num_devices=devices,
                on_chunk=on_chunk,
                sft=sft,
                loggers=sinks_for(args, run_dir, config, 1),
                **chunk,
            )
    except RewardFunctionError as e:  # failed in an evaluation (outside the training chunks)
        raise UserError(str(e)) from None
    except NonFiniteError as e:
        if "the reward function" in str(e):  # the text reward failed inside an iteration: the user's to fix
            raise UserError(str(e)) from None
        raise
    finally:
        close()
    if not args.quiet:
        _report(run_dir)
    return 0


def _report(run_dir: str) -> None:
    from purejaxppo.programs.rlhf_kind import report_token_run

    report_token_run(run_dir)
