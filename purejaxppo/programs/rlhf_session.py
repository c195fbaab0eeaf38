"""One ``rlhf`` session from its typed request: a new run checked and read once, then its SFT
stage, PPO, the final samples, the report and the export; or a run folder continued.

The command (:mod:`purejaxppo.cli.rlhf_cmd`) turns the flags into an :class:`RLHFRequest` and
hands it here once, with the host's parts it owns (:class:`SessionHooks`: how devices are made,
the progress bar, the loggers, where lines are printed). Everything a run reads is read in
:func:`open_run`, before any work and before any folder is made, in the order of the layers:
this layer's own checks (the run and export folders, the devices), then the task and the model
(the library's loaders), then the config against them, then the ``--init-from`` run.

A problem is raised by its type where it is found (``ConfigError`` in the flags' words; the
library's ``RewardSpecError``, ``RewardModelError``, ``PromptFileError``,
``CheckpointFolderError``); the command says each in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Any, Callable, Optional

import jax

from purejaxppo.config import ConfigError
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError, read_config
from purejaxppo.lm.models import lora
from purejaxppo.lm.ppo.recipes import apply_recipe
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, needs_critic, validate_token_config
from purejaxppo.lm.rewards.python_reward import RewardFunctionError
from purejaxppo.programs import kinds
from purejaxppo.programs.rlhf_eval import PassAtKSettings
from purejaxppo.programs.rlhf_export import check_exportable, check_out_dir, export_policy
from purejaxppo.programs.rlhf_init_from import start_from_run
from purejaxppo.programs.rlhf_program import task_config
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.programs import rlhf_run  # its functions looked up when called (tests replace them)
from purejaxppo.run.guards import NonFiniteError
from purejaxppo.run.loop import RunResult
from purejaxppo.run.progress import progress_bar
from purejaxppo.run.sinks import TensorBoardLogger, WandbLogger, require_tensorboard, require_wandb


@dataclasses.dataclass(frozen=True)
class RLHFRequest:
    """What one ``rlhf`` session was asked for, typed (the command's flags).

    Attributes:
      config: a new run's :class:`TokenPPOConfig` (validated here, once); None with ``resume``.
      settings: a new run's :class:`RLHFSettings` (paths absolute); None with ``resume``.
      flag_of: ``config field -> the flag that sets it`` (the config's errors name the flags).
      given: the config fields the flags set (a ``--recipe`` leaves them as given).
      command: the command's name (a folder is continued by its own kind's command).
      seed, seeds: the SFT stage's and the runs' seed; how many runs train at once.
      devices: the ``--devices`` spec as typed (a count, or ``all``).
      run_dir: a new run's folder, or None (``runs/rlhf-TASK-<time>``).
      resume: a run folder to continue with its own settings, or None.
      init_from, init_from_run: another run's folder whose policy starts this one, and which of
        its runs (None: its only one).
      export_dir: where run 0's policy is written when the run finishes, or None.
      chunk, stop_after: this session's iterations per compiled chunk and where it stops (None:
        the record's, and the end).
      quiet: no progress bar and no lines printed but errors.
      tensorboard, wandb: also log to TensorBoard (in the run folder), to this W&B project.
    """

    config: Optional[TokenPPOConfig]
    settings: Optional[RLHFSettings]
    flag_of: Callable[[str], str]
    command: str
    given: frozenset = frozenset()
    seed: int = 0
    seeds: int = 1
    devices: str = "1"
    run_dir: Optional[str] = None
    resume: Optional[str] = None
    init_from: Optional[str] = None
    init_from_run: Optional[int] = None
    export_dir: Optional[str] = None
    chunk: Optional[int] = None
    stop_after: Optional[int] = None
    quiet: bool = False
    tensorboard: bool = False
    wandb: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SessionHooks:
    """The host's parts of a session, given by the command.

    Attributes:
      group: this process's :class:`~purejaxppo.run.processes.ProcessGroup`.
      make_devices: ``(spec, divides, what, group) -> count``: the devices made (before JAX
        starts on one process; every process's together across processes); raises on a bad spec.
      say: where lines are printed (a quiet session's prints nothing).
    """

    group: Any
    make_devices: Callable[[str, int, str, Any], int]
    say: Callable[[str], None] = functools.partial(print, flush=True)


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    """A new run, each part checked once.

    Attributes:
      config: validated, with the task's response budget and stop ids.
      settings: with ``eval_batch`` a text run's evaluation prompts and the files' hashes.
      task: built once (every stage shares this one).
      devices: the count.
      run_dir: its folder (not made yet).
      init_from: the ``--init-from`` run's record, or None; start: its policy's parameters, or None.
    """

    config: TokenPPOConfig
    settings: RLHFSettings
    task: Any
    devices: int
    run_dir: str
    init_from: Optional[dict] = None
    start: Any = None


def run_session(request: RLHFRequest, hooks: SessionHooks) -> tuple[RunResult, str]:
    """The session: a new run (:func:`open_run`, the SFT stage, PPO) or ``request.resume``
    continued, under a progress bar; then, on process 0, the report and the export.

    Args:
      request: the :class:`RLHFRequest`; hooks: the :class:`SessionHooks`.
    Returns:
      ``(result, run_dir)``: the :class:`~purejaxppo.run.loop.RunResult` and the run's folder.
    """
    say = (lambda line: None) if request.quiet else hooks.say
    group = hooks.group
    if request.tensorboard:  # a sink's package, before any work
        require_tensorboard()
    if request.wandb:
        require_wandb()
    if request.resume:
        record = group.share(lambda: _continued(request.resume, request))
        hooks.make_devices(str(record.num_devices), record.num_devices, "", group)  # still there?
        run_dir, label, config, run = request.resume, record.settings.task, record.config, None
    else:
        run = open_run(request, hooks)
        run_dir, label, config = run.run_dir, run.settings.task, run.config
    on_chunk, close = progress_bar(
        request.quiet,
        f"rlhf {label}",
        metric="score",
        eval_metric="eval_score",
        shown="score",
        steps="sequences",
        fmt=".3f",
    )
    loggers = []  # the metric sinks asked for (TensorBoard, W&B), beside metrics.csv, on process 0
    if request.tensorboard and group.writer:
        loggers.append(TensorBoardLogger(run_dir, config.batch_size, 1))
    if request.wandb and group.writer:
        loggers.append(WandbLogger(run_dir, config.batch_size, config.to_dict(), request.wandb, 1))
    options = dict(
        on_chunk=on_chunk,
        loggers=loggers,
        **{k: v for k, v in (("chunk_updates", request.chunk), ("stop_after", request.stop_after)) if v},
    )
    try:
        result = rlhf_run.resume_rlhf(run_dir, record, **options) if run is None else _train(request, run, say, options)
    finally:
        close()
    if group.writer:  # the others have no folder to read
        if not request.quiet:
            kinds.folder(run_dir)[0].report(result, run_dir)  # the folder's kind reports it
        _export_at_end(request.export_dir, result, run_dir, say)
    return result, run_dir


def _train(request: RLHFRequest, run: PreparedRun, say, options: dict) -> RunResult:
    """A new run: its SFT stage (its line said), then PPO; a reward function that failed inside
    an iteration is the user's to fix (a :class:`RewardFunctionError`, not a divergence)."""
    t = time.perf_counter()
    sft = rlhf_run.sft_model(run.settings, request.seed, run.start)
    greedy = {k[5:]: round(v, 3) for k, v in sft[2].items() if k.startswith("eval_")}
    if not run.settings.env:  # an environment run has no SFT stage
        say(f"SFT: {run.settings.sft_steps} steps in {time.perf_counter() - t:.1f}s; greedy {json.dumps(greedy)}")
    try:
        return rlhf_run.train_rlhf(
            run.config,
            run.settings,
            seed=request.seed,
            num_seeds=request.seeds,
            run_dir=run.run_dir,
            num_devices=run.devices,
            sft=sft,
            init_from=run.init_from,
            **options,
        )
    except NonFiniteError as e:
        if getattr(run.task, "reward_error", lambda: None)() is None:
            raise
        raise RewardFunctionError(str(e)) from None


def open_run(request: RLHFRequest, hooks: SessionHooks) -> PreparedRun:
    """A new run checked and read once, before any work: the config, the run and export
    folders, the devices, the task and the model, the ``--init-from`` run, then the config
    against the model (its vocabulary, LoRA's targets).

    Args:
      request: a new run's :class:`RLHFRequest`; hooks: the :class:`SessionHooks`.
    Returns:
      The :class:`PreparedRun`.
    Raises:
      ConfigError, and the loaders' own errors, naming the flag.
    """
    config, settings = validate_token_config(request.config, flag_of=request.flag_of), request.settings
    if config.lora_rank and settings.reward_model and config.critic == "separate" and needs_critic(config):
        raise ConfigError(
            f"--lora-rank {config.lora_rank} with --reward-model: the separate critic would start from the reward "
            "model, but under LoRA the critic is the frozen base plus its own adapters; add --critic value_head, "
            "or --advantage grpo or rloo (no critic), or drop --lora-rank"
        )
    passes = PassAtKSettings.of(settings)
    if passes is not None:  # pass@k runs at the evaluations
        passes.check(lambda name: "--" + name.replace("_", "-"))  # their flags are the fields' names
        if not settings.eval_every:
            raise ConfigError(
                f"--pass-samples {settings.pass_samples} samples at each evaluation, and --eval-every is 0 (none; "
                "across processes always, for now); give --eval-every N"
            )
    run_dir = request.run_dir or os.path.join("runs", f"rlhf-{settings.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    hooks.group.share(lambda: _check_folders(run_dir, request.export_dir, settings))
    devices = hooks.make_devices(request.devices, config.batch_size, f"--batch ({config.batch_size})", hooks.group)
    task, lm, params = _read(settings)
    if settings.model_dir and not settings.env:
        settings = dataclasses.replace(settings, eval_batch=len(task.eval_table.texts))
        _describe_data(task, settings, (lambda line: None) if request.quiet else hooks.say)
    init_from = start = None
    if request.init_from is not None:
        init_from, start = start_from_run(request.init_from, settings, params, request.init_from_run)
    if settings.recipe:  # on the task's response budget (dapo's overlong buffer is a fifth of it)
        config = apply_recipe(task_config(config, task), settings.recipe, request.given, request.flag_of)
    vocab = read_config(settings.init)["vocab_size"] if settings.init else task.vocab_size
    if config.top_k > vocab:
        raise ConfigError(
            f"--top-k {config.top_k} is more than the vocabulary's {vocab} tokens; give at most {vocab} (0 = off)"
        )
    if config.lora_rank:  # its targets select a kernel of the model (here, not in PPO's init after the SFT)
        try:
            lora.check_targets(params, config.lora_rank, config.lora_alpha, config.lora_targets)
        except ValueError as e:
            if config.lora_targets:
                raise ConfigError(f"--lora-targets {','.join(config.lora_targets)}: {e}") from None
            raise ConfigError(
                f"--lora-rank {config.lora_rank} adapts LoRA's default modules: {e}; choose them with --lora-targets"
            ) from None
    return PreparedRun(config, settings, task, devices, run_dir, init_from, start)


def _read(settings: RLHFSettings) -> tuple:
    """``(task, lm, params)``: the settings' task built and its model read (kept for the SFT
    stage; the cheap part: no SFT, no compile). A model folder that cannot be read is a
    :class:`CheckpointFolderError`; a built-in task's bad option a :class:`ConfigError`."""
    folder = settings.model_dir or settings.init
    if folder:
        read_config(folder)  # a folder without its config.json says so (CheckpointFolderError)
    try:
        task = settings.make_task()
    except (ValueError, TypeError) as e:  # a built-in task: an unknown field, a value out of range
        if settings.model_dir:
            raise
        raise ConfigError(f"--task {settings.task}: {e}") from None
    try:
        lm, params = settings.model(jax.random.PRNGKey(0))
    except (CheckpointFolderError, ConfigError):
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:  # a truncated safetensors file, a missing tensor
        if not (settings.model_dir or settings.init):
            raise
        raise CheckpointFolderError(
            f"the model cannot be loaded ({type(e).__name__}: {e}); check the folder holds a complete checkpoint"
        ) from None
    return task, lm, params


def _check_folders(run_dir: str, export_dir: Optional[str], settings: RLHFSettings) -> None:
    """On process 0, which writes them: the run folder (not a file, not holding a run) and the
    ``--export`` folder (new or empty, and a model with a Hugging Face layout)."""
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ConfigError(f"--run-dir {run_dir} is a file; give a folder (it is created)")
    held = [n for n in ("config.json", "metrics.csv", "checkpoints") if os.path.exists(os.path.join(run_dir, n))]
    if held:
        try:
            with open(os.path.join(run_dir, "config.json")) as f:
                hint = kinds.resume_hint(json.load(f), run_dir)  # the folder's own kind names its command
        except (OSError, ValueError, AttributeError):
            hint = f"the command that wrote it, with --resume {run_dir}"
        raise ConfigError(
            f"--run-dir {run_dir} already holds a run ({', '.join(held)}); continue it with "
            f"{hint}, or choose another --run-dir"
        )
    if export_dir is not None:
        check_out_dir(export_dir, "--export")
        check_exportable(settings, f"--export {export_dir}: this run")


def _continued(run_dir: str, request: RLHFRequest):
    """The record of a folder the command's ``--resume`` continues (its kind's command is this one), with the
    ``--export`` folder checked against it."""
    kind, record = kinds.folder(run_dir)
    if kind.command != request.command:
        raise ConfigError(
            f"{run_dir!r} holds a {kind.what} run, which `{request.command} --resume` does not continue; "
            f"continue it with python -m purejaxppo {kind.command} --resume {run_dir}"
        )
    if request.export_dir is not None:
        check_out_dir(request.export_dir, "--export")
        check_exportable(record.settings, f"--export {request.export_dir}: this run")
    return record


def _describe_data(task, settings: RLHFSettings, say) -> None:
    """What a text run read: prompts per file, how many were cut (never silently)."""
    line = f"data: {len(task.table.texts)} prompts ({task.table.prompt_len} tokens at most)"
    if settings.eval_prompts:
        line += f", {len(task.eval_table.texts)} evaluation prompts"
    if task.sft:
        line += f", {len(task.sft[0].texts)} SFT pairs"
    say(line)
    for name, n in settings.text_data().cut.items():
        if n:
            say(f"data: cut {n} prompts of --{name.replace('_', '-')} to their last tokens (--truncate-prompts)")


def _export_at_end(export_dir: Optional[str], result: RunResult, run_dir: str, say) -> None:
    """The finished run's policy out as ``export RUN_DIR DIR`` writes it (a stopped run: said, not written)."""
    if export_dir is None:
        return
    if not result.finished:
        print(f"--export: the run stopped before its last iteration; {export_dir} was not written", flush=True)
        return
    update = export_policy(run_dir, export_dir)
    say(f"wrote {export_dir}: run 0's policy at update {update} (Hugging Face layout)")
