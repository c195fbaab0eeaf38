"""A new ``rlhf`` run checked and read ONCE, before any work: :func:`prepare` turns the parsed
flags into a :class:`PreparedRun` (validated config, settings, the task and model read, the
devices, the run folder) that the command then trains. A bad input is a :class:`UserError`
naming the flag as typed (no SFT, no compile, no folder created).

Each problem is told by its exception's type, raised where it is found: a reward function that
cannot be loaded (``RewardSpecError``), a reward-model folder that cannot score the policy
(``RewardModelError``), a prompt file (``PromptFileError``), a model folder
(``CheckpointFolderError``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Optional

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.export_cmd import check_export_flag
from purejaxppo.cli.rlhf_flags import TASK_PRESETS, check_plain, given_settings, task_options, token_config
from purejaxppo.cli.train_setup import check_sinks


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    """What a new run trains, each part checked once: ``config`` (validated, the task's preset
    under the flags), ``settings`` (paths absolute; ``eval_batch`` a text run's evaluation
    prompts), ``task`` (built once: the settings hand every stage this same one), ``devices``
    (the count), ``run_dir``, ``init_from`` (the ``--init-from`` run's record, or None) and
    ``start`` (its policy's parameters, or None)."""

    config: Any
    settings: Any
    task: Any
    devices: int
    run_dir: str
    init_from: Optional[dict] = None
    start: Any = None


def prepare(args, cmd, group) -> PreparedRun:
    """Every flag checked and every file read, in this order: the flags' combinations, the
    config, the devices (counted, and made on one process, before anything starts JAX), the
    files and the model, the run and export folders (on process 0, which writes them), the
    ``--init-from`` run. ``cmd``: the session's :class:`~purejaxppo.cli.rlhf_flags.RLHFCommand`."""
    text = args.model_dir is not None
    check_plain(args, text)
    config = token_config(args, text)
    _check_reward_model_critic(config, args)
    devices = count_devices(cmd.devices, config.batch_size, f"--batch ({config.batch_size})", group)
    settings, task, vocab = _load(_settings(args, text, group.many), args, text)
    if config.top_k > vocab:
        raise UserError(
            f"--top-k {config.top_k} is more than the vocabulary's {vocab} tokens; give at most {vocab} (0 = off)"
        )
    _check_lora_targets(config, settings)
    run_dir = args.run_dir or os.path.join("runs", f"rlhf-{settings.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    group.share(lambda: (_check_run_dir(run_dir), check_export_flag(args, settings), check_sinks(args)))
    init_from, start = _start_from(args, settings)
    if text and not args.quiet:
        _describe_data(settings, task)
    return PreparedRun(config, settings, task, devices, run_dir, init_from, start)


def _settings(args, text: bool, many: bool):
    """The :class:`RLHFSettings` of the flags: the fields given, the rest the declared defaults
    but for the rules below (paths made absolute: a resume may start elsewhere)."""
    from purejaxppo.programs.rlhf_program import RLHFSettings

    st = given_settings(args)
    st.pop("task_options", None)
    if many:  # the evaluation during training runs on one process only (for now)
        st.setdefault("eval_every", 0)
    if args.init_from:  # the source run's policy is the start: no SFT stage unless asked for
        st.setdefault("sft_steps", 0)
    dtype = "bfloat16" if args.bf16 else "float32"
    if text:
        for dest in ("model_dir", "prompts", "eval_prompts", "sft_data", "reward_model"):
            if st.get(dest):
                st[dest] = os.path.abspath(st[dest])
        path, sep, name = (st.get("reward") or "").rpartition(":")
        if sep and path.endswith(".py"):
            st["reward"] = f"{os.path.abspath(path)}:{name}"
        if not st.get("sft_data"):  # no demonstrations: no SFT stage
            st.setdefault("sft_steps", 0)
        return RLHFSettings(task="text", dtype=dtype, **st)
    task = args.task or RLHFSettings.task
    preset = TASK_PRESETS.get(task, {"task_options": {}})
    if "sft_steps" in preset:
        st.setdefault("sft_steps", preset["sft_steps"])
    options = {**preset["task_options"], **dict(task_options(args.task_options or []))}
    return RLHFSettings(**{**st, "task": task}, task_options=tuple(sorted(options.items())), dtype=dtype)


def _load(settings, args, text: bool):
    """Build the task and load the model (the cheap part: no SFT, no compile); a problem is a
    :class:`UserError` naming the flag. Returns ``(settings, task, vocab)`` (``eval_batch`` set to
    the evaluation prompts of a text run)."""
    from purejaxppo.config import ConfigError
    from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError, read_config

    flag, folder = ("--model", settings.model_dir) if text else ("--init", settings.init)
    typed = args.model_dir if text else args.init
    try:
        task = _task(settings, args)
        if text:
            settings = dataclasses.replace(settings, eval_batch=len(task.eval_table.texts))
        if folder:
            read_config(folder)
            settings.model(None)  # read here (kept for the SFT stage)
    except (UserError, ConfigError):
        raise
    except CheckpointFolderError as e:
        raise UserError(f"{flag} {typed}: {e}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:  # a truncated safetensors file, a missing tensor
        if not folder:
            raise
        raise UserError(
            f"{flag} {typed}: the model cannot be loaded ({type(e).__name__}: {e}); "
            "check the folder holds a complete checkpoint"
        ) from None
    return settings, task, task.vocab_size if not settings.init else read_config(folder)["vocab_size"]


def _task(settings, args):
    """The settings' task, built once (:meth:`RLHFSettings.make_task` keeps it); each failure by its type."""
    from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError
    from purejaxppo.lm.data.prompts import PromptFileError
    from purejaxppo.lm.rewards.python_reward import RewardSpecError
    from purejaxppo.lm.tasks.text_task import RewardModelError

    try:
        return settings.make_task()
    except RewardSpecError as e:
        raise UserError(f"--reward {args.reward}: {e}") from None
    except (RewardModelError, PromptFileError) as e:  # their messages name the flag and the file
        raise UserError(str(e)) from None
    except CheckpointFolderError as e:
        raise UserError(f"--model {args.model_dir}: {e}") from None
    except (ValueError, TypeError) as e:  # a built-in task: an unknown field, a value out of range
        if settings.model_dir:
            raise
        raise UserError(f"--task {settings.task}: {e}") from None


def _check_reward_model_critic(config, args) -> None:
    """``--reward-model`` starts gae's separate critic from the reward model, while under LoRA
    the critic is the frozen base plus its own adapters: the two do not combine (refused here,
    not by PPO's init after the SFT stage)."""
    from purejaxppo.lm.ppo.token_config import needs_critic

    if config.lora_rank and args.reward_model and config.critic == "separate" and needs_critic(config):
        raise UserError(
            f"--lora-rank {config.lora_rank} with --reward-model: the separate critic would start from the reward "
            "model, but under LoRA the critic is the frozen base plus its own adapters; add --critic value_head, "
            "or --advantage grpo or rloo (no critic), or drop --lora-rank"
        )


def _check_lora_targets(config, settings) -> None:
    """``--lora-rank``: its targets (``--lora-targets``, else LoRA's defaults) select a kernel of
    the model, checked here rather than by PPO's init after the SFT stage."""
    if not config.lora_rank:
        return
    import jax

    from purejaxppo.lm.models import lora

    params = settings.model(jax.random.PRNGKey(0))[1]  # a folder's is loaded once (kept for the SFT stage)
    targets = config.lora_targets or lora.DEFAULT_TARGETS
    if lora.lora_paths(params, targets):
        return
    try:  # its refusal lists the kernels the model has
        lora.lora_init(jax.random.PRNGKey(0), params, config.lora_rank, config.lora_alpha, targets)
    except ValueError as e:
        if config.lora_targets:
            raise UserError(f"--lora-targets {','.join(targets)}: {e}") from None
        raise UserError(
            f"--lora-rank {config.lora_rank} adapts LoRA's default modules: {e}; choose them with --lora-targets"
        ) from None


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


def count_devices(spec: str, divides: int, what: str, group) -> int:
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


def _describe_data(settings, task) -> None:
    """What was read: prompts per file, how many were cut (never silently)."""
    line = f"data: {len(task.table.texts)} prompts ({task.table.prompt_len} tokens at most)"
    if settings.eval_prompts:
        line += f", {len(task.eval_table.texts)} evaluation prompts"
    if task.sft:
        line += f", {len(task.sft[0].texts)} SFT pairs"
    print(line, flush=True)
    for name, n in settings.text_data().cut.items():
        if n:
            print(
                f"data: cut {n} prompts of --{name.replace('_', '-')} to their last tokens (--truncate-prompts)",
                flush=True,
            )
