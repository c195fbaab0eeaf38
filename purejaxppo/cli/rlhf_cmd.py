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
from purejaxppo.cli.export_cmd import check_export_flag, export_at_end
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
    if args.init_from:  # the source run's policy is the start: no SFT stage unless asked for
        st.setdefault("sft_steps", 0)
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
    from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError, read_config

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
    from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError
    from purejaxppo.lm.data.prompts import PromptFileError
    from purejaxppo.lm.rewards.python_reward import RewardSpecError

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


def _prepare(args, group):
    """Everything checked and read before any work: ``(config, settings, devices, run_dir,
    (init_from, start))``. The devices are counted (and made, on one process) before anything
    starts JAX; the run folder and the export folder are checked on process 0, which writes them."""
    text = args.model_dir is not None
    check_plain(args, text)
    config = token_config(args, text)
    devices = _devices(args.devices, config.batch_size, f"--batch ({config.batch_size})", group)
    settings, vocab = _load(_settings(args, text), args, text)
    if config.top_k > vocab:
        raise UserError(
            f"--top-k {config.top_k} is more than the vocabulary's {vocab} tokens; give at most {vocab} (0 = off)"
        )
    run_dir = args.run_dir or os.path.join("runs", f"rlhf-{settings.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    group.share(lambda: (_check_run_dir(run_dir), check_export_flag(args, settings), check_sinks(args)))
    start = _start_from(args, settings)
    if text and not args.quiet:
        _describe_data(settings)
    return config, settings, devices, run_dir, start


def _devices(spec: str, divides: int, what: str, group) -> int:
    """``--devices`` as a count: on one process its devices (set before JAX starts); across
    processes every process's devices together (:func:`~purejaxppo.cli.distributed.global_devices`)."""
    from purejaxppo.cli.devices import choose_devices, set_devices
    from purejaxppo.cli.distributed import global_devices

    if group.many:
        return global_devices(spec, divides, what)
    devices = choose_devices(spec, divides, what)
    set_devices(devices)
    return devices


def _start_from(args, settings):
    """``--init-from RUN_DIR``: ``(its init_from record, the policy's parameters)``, or ``(None, None)``."""
    if args.init_from is None:
        return None, None
    import jax

    from purejaxppo.config import ConfigError
    from purejaxppo.programs.rlhf_init_from import start_from_run

    try:
        return start_from_run(args.init_from, settings, settings.model(jax.random.PRNGKey(0))[1], args.init_from_run)
    except ConfigError as e:
        raise UserError(str(e)) from None


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
    from purejaxppo.cli.distributed import join

    if (args.distributed or args.coordinator is not None) and args.reward:  # before waiting for the others
        raise UserError(
            "--reward (a Python function on the host) does not run across processes yet; use "
            "--reward-model DIR, or one process (--devices N splits the prompts over its devices)"
        )
    group = join(args)  # several processes: before anything starts JAX
    given = given_flags(args)
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    if group.many and args.eval_every is None:
        args.eval_every = 0  # the evaluation during training runs on one process only (for now)
    if args.resume:  # the folder's kind says which command continues it
        from purejaxppo.cli.train_cmd import refuse_other_command
        from purejaxppo.programs import kinds

        record = group.share(lambda: kinds.folder(args.resume)[1])  # process 0 reads the folder
        refuse_other_command(kinds.kind_named(record.kind), args.resume, args.command)
        group.share(lambda: (check_export_flag(args, record.settings), check_sinks(args)))
        devices = _devices(str(record.num_devices), record.num_devices, "", group)  # still there?
        label = getattr(record.settings, "task", "")
    else:
        # a used --run-dir is refused here, before the SFT
        config, settings, devices, run_dir, (init_from, start) = _prepare(args, group)
        label = settings.task
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
            sft = sft_model(settings, args.seed, start)
            if not args.quiet:
                ev = {k[5:]: round(v, 3) for k, v in sft[2].items() if k.startswith("eval_")}
                print(
                    f"SFT: {settings.sft_steps} steps in {time.perf_counter() - t:.1f}s; greedy {json.dumps(ev)}",
                    flush=True,
                )
            result = train_rlhf(
                config,
                settings,
                seed=args.seed,
                num_seeds=args.seeds,
                run_dir=run_dir,
                num_devices=devices,
                on_chunk=on_chunk,
                sft=sft,
                init_from=init_from,
                loggers=sinks_for(args, run_dir, config, 1) if group.writer else [],
                **session,
            )
    except RewardFunctionError as e:  # failed in an evaluation (outside the training chunks)
        raise UserError(str(e)) from None
    except NonFiniteError as e:
        if "the reward function" in str(e):  # the text reward failed inside an iteration: the user's to fix
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
