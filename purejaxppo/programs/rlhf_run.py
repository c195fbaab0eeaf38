"""The front door of token-level PPO runs: :func:`train_rlhf` (SFT, then PPO through the chunk
loop) and :func:`resume_rlhf` (continue a run folder of kind ``"rlhf"``).

The SFT stage is part of the run's record, not of its state: it is one pure compiled program
of the seed and the settings (:func:`purejaxppo.lm.sft.sft_training.train_sft`), run before update 0, and
its result is the policy, the critic's starting point and the frozen reference (all three in
every checkpoint). A resume therefore restores them instead of repeating the SFT (a folder
left without any checkpoint, by a crash before the first, repeats it: the same program of the
same seed, the same model). Before PPO starts, ``config.json`` records the SFT model's own
evaluation (``sft``: greedy score and diagnostics on the evaluation prompts), the baseline the
PPO curves are read against.

Signals: Ctrl-C or SIGTERM in the SFT stage stops it with :class:`TrainingInterrupted` whose
``hint`` says that nothing of it is kept (it runs before the run folder exists) and the command
starts over; from PPO's first compile on, the chunk loop keeps a checkpoint to resume from. A
signal inside a Python reward function waits for the chunk (:mod:`purejaxppo.run.signals`),
the reward's calls left in that chunk are skipped. The final iteration's samples are written
when the run finishes (:func:`~purejaxppo.programs.rlhf_eval.final_samples`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, validate_token_config
from purejaxppo.lm.rewards.python_reward import RewardFunctionError
from purejaxppo.lm.sft.sft_training import evaluate_policy, train_sft
from purejaxppo.programs.rlhf_eval import EVAL_KEY, SHOWN, PassAtKSettings, RLHFEvaluator, final_samples
from purejaxppo.programs.rlhf_program import RLHFProgram
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.run import processes, signals
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import latest_checkpoint
from purejaxppo.run.guards import TrainingInterrupted
from purejaxppo.run.loop import RunResult, run_chunks
from purejaxppo.run.record import CHUNK_UPDATES, RunRecord

SAMPLES = "samples.txt"


def sft_model(settings: RLHFSettings, seed: int, start=None):
    """``(lm, params, record)``: the settings' model after its SFT stage (from ``seed``), and
    ``record`` (the SFT's final loss and its greedy evaluation). ``start``: parameters of the
    settings' model to begin from instead of its own (another run's policy,
    :mod:`purejaxppo.programs.rlhf_init_from`). Ctrl-C/SIGTERM: :class:`TrainingInterrupted`
    (no checkpoint; its ``hint`` says the stage starts over)."""
    try:
        # a signal inside the text reward of the evaluation waits for it
        with signals.interrupts_at_safe_points("; nothing was saved: run the same command again"):
            return _sft_model(settings, seed, start)
    except KeyboardInterrupt as e:
        raise TrainingInterrupted(
            None,
            0,
            str(e) or "interrupted",
            hint="the SFT stage was interrupted before PPO started; nothing of it is kept (it is saved "
            "with the first checkpoint): run the same command again, it starts over",
        ) from None


def _sft_model(settings: RLHFSettings, seed: int, start=None):
    task = settings.make_task()
    key = jax.random.PRNGKey(seed)
    lm, params = settings.model(jax.random.fold_in(key, 1))
    params = params if start is None else start
    if settings.env:  # an environment run: no demonstrations, no fixed prompts to evaluate
        return lm, params, {"steps": 0, "final_loss": None}
    losses = np.zeros(0)
    if settings.sft_steps:
        params, losses = train_sft(
            lm,
            params,
            task,
            jax.random.fold_in(key, 2),
            steps=settings.sft_steps,
            batch=settings.sft_batch,
            learning_rate=settings.sft_lr,
        )
    evaluation = evaluate_policy(lm, params, task, jax.random.PRNGKey(EVAL_KEY), settings.eval_batch, greedy=True)
    getattr(task, "check_reward", lambda: None)()  # a text reward that failed on the SFT model's answers
    record = {
        "steps": settings.sft_steps,
        "final_loss": float(np.mean(np.asarray(losses)[-10:])) if len(losses) else None,
        **{f"eval_{k}": float(v) for k, v in evaluation.items()},
    }
    return lm, params, record


def train_rlhf(
    config: TokenPPOConfig,
    settings: RLHFSettings = RLHFSettings(),
    *,
    seed: int = 0,
    num_seeds: int = 1,
    run_dir: Optional[str] = None,
    resume: bool = False,
    num_devices: int = 1,
    chunk_updates: int = CHUNK_UPDATES,
    checkpoint_every: int = 1,
    stop_after: Optional[int] = None,
    on_chunk: Optional[Callable[[dict], None]] = None,
    loggers: Sequence = (),
    on_note: Optional[Callable[[str], None]] = None,
    sft: Optional[tuple] = None,
    program: Optional[RLHFProgram] = None,
    init_from: Optional[dict] = None,
) -> RunResult:
    """SFT (unless resuming, or ``sft=(lm, params, record)`` is given), then ``config.num_iterations``
    PPO iterations of ``num_seeds`` runs in chunks of ``chunk_updates``, a checkpoint every
    ``checkpoint_every`` chunks. Metrics per iteration and run go to ``metrics.csv``.
    ``program``: an :class:`RLHFProgram` of this setup whose compiled chunks to reuse (its
    SFT model is the one used; ``sft`` is then only the record). ``init_from``: the record of the
    run the model came from (:func:`purejaxppo.programs.rlhf_init_from.start_from_run`), kept in
    ``config.json``."""
    settings = checked_data(settings, resume)
    validate_token_config(config)
    group = processes.current()
    if resume and group.share(lambda: latest_checkpoint(os.path.join(run_dir, rf.CHECKPOINTS)) is None):
        _start_again(run_dir, init_from)  # it stopped before its first checkpoint
        program = None  # built on the SFT model, not on a template
        lm, params, record = sft_model(settings, seed)
    elif resume:
        record = group.share(lambda: rf.load_record(run_dir).notes.get("sft"))  # process 0's folder
        lm, params = (program.lm, program.sft_params) if program else RLHFProgram.template(settings)
    else:
        lm, params, record = sft if sft is not None else sft_model(settings, seed)
    prog = program or RLHFProgram(config, settings, lm, params, num_devices=num_devices)
    if prog.text_reward is not None:  # a signal during a call: the chunk's remaining calls are skipped
        prog.text_reward.skip = signals.pending
    evaluator = (
        RLHFEvaluator(
            prog.task,
            lm,
            settings.eval_every,
            settings.eval_batch,
            None if run_dir is None else f"{run_dir}/{SAMPLES}",
            pass_at_k=PassAtKSettings.of(settings),
        )
        if settings.eval_every
        else None
    )
    run = RunRecord(
        prog.kind_for(None),
        prog.config,
        settings,
        seed=seed,
        num_seeds=num_seeds,
        chunk_updates=max(1, min(chunk_updates, prog.config.num_iterations)),
        num_devices=num_devices,
        split=prog.split,
        checkpoint_every=checkpoint_every,
        init_from=init_from,
        notes={"sft": record},
    )
    try:
        result = run_chunks(
            prog,
            run,
            run_keys(seed, num_seeds),
            run_dir=run_dir,
            resume=resume,
            stop_after=stop_after,
            on_chunk=on_chunk,
            sinks=loggers,
            on_note=on_note,
            evaluator=evaluator,
        )
        if run_dir and result.finished and not settings.env:  # an environment's episodes: none shown yet
            # without an evaluation during training, only the answers shown are computed
            shown = evaluator or RLHFEvaluator(prog.task, lm, 1, min(settings.eval_batch, SHOWN))
            _final_samples(run_dir, shown, result)
    except RewardFunctionError as e:  # in an evaluation (in an iteration it is the NaN stop's message)
        if not run_dir:
            raise
        path = latest_checkpoint(os.path.join(run_dir, rf.CHECKPOINTS))
        where = f"; the last checkpoint is {path}" if path else ""
        raise RewardFunctionError(
            f"{e}; training stopped{where}. Fix the function, then continue the run with "
            f"python -m purejaxppo rlhf --resume {run_dir}"
        ) from None
    return result


def _start_again(run_dir: str, init_from: Optional[dict]) -> None:
    """A folder without a checkpoint (a crash before the first) starts over from the SFT stage;
    not one that started from another run's policy, which it does not keep."""
    if init_from is not None:
        raise ConfigError(
            f"{run_dir} holds no checkpoint (it stopped before its first), and the policy it started from "
            f"(--init-from {init_from.get('run_dir')}) is not kept in it; delete {run_dir} and run the "
            "command that made it again"
        )


def _final_samples(run_dir: str, evaluator: RLHFEvaluator, result: RunResult) -> None:
    """samples.txt's block of the final iteration (with or without an evaluation there)."""
    try:
        note = f"; the run is saved: `python -m purejaxppo rlhf --resume {run_dir}` writes its samples"
        with signals.interrupts_at_safe_points(note):
            final_samples(
                os.path.join(run_dir, SAMPLES), result.updates_done, evaluator, result.runner_state, processes.current()
            )
    except KeyboardInterrupt as e:  # the run is saved whole: a resume writes the samples and nothing else
        path = latest_checkpoint(os.path.join(run_dir, rf.CHECKPOINTS))
        raise TrainingInterrupted(path, result.updates_done, str(e) or "interrupted") from None


def checked_data(settings: RLHFSettings, resume: bool) -> RLHFSettings:
    """A text run's settings with the hashes of its model and data files: recorded when a run
    starts (unless given), compared on a resume (a changed file would not continue the same run:
    :class:`ConfigError` naming it)."""
    if not settings.model_dir or settings.env:  # an environment run reads no data files
        return settings
    now = settings.text_data().hashes
    if not resume:
        return settings if settings.hashes else dataclasses.replace(settings, hashes=tuple(sorted(now.items())))
    changed = [name for name, sha in settings.hashes if now.get(name) != sha]
    if changed:
        raise ConfigError(
            f"the {', '.join(changed)} changed since this run started (sha256 in config.json's "
            "settings.hashes); restore the files it was started with, or start a new run"
        )
    return settings


def run_keys(seed: int, num_seeds: int) -> tuple:
    """``(keys [S],)``: the PPO stage's inputs of ``num_seeds`` runs (apart from the SFT's keys)."""
    return (jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 3), num_seeds),)


def resume_rlhf(run_dir: str, record=None, **kwargs) -> RunResult:
    """Continue the RLHF run in ``run_dir`` with its saved config, settings, seeds and layout
    (keyword arguments override the others, e.g. ``stop_after``, ``on_chunk``)."""
    record = record if record is not None else rf.load_record(run_dir)
    opts = dict(
        seed=record.seed,
        num_seeds=record.num_seeds,
        num_devices=record.num_devices,
        chunk_updates=record.chunk_updates,
        checkpoint_every=record.checkpoint_every,
        init_from=record.init_from,
    )
    opts.update(kwargs)
    return train_rlhf(record.config, record.settings, run_dir=run_dir, resume=True, **opts)
