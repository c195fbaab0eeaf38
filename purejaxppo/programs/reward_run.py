"""The front door of reward-model runs: :func:`train_reward` (preference pairs -> a trained
reward model, through the chunk loop) and :func:`resume_reward` (continue a ``"reward-model"`` folder).

:func:`prepare` reads everything a run needs before anything is created: the model folder (a
causal LM, whose value head becomes the scalar head, or a reward model to train further), its
``tokenizer.json``, the pairs file (its SHA-256 recorded; a resume refuses a changed file).
When the run finishes, run 0's model is written into ``RUN_DIR/model`` in Hugging Face's
``*ForSequenceClassification`` layout with the tokenizer files beside it, which
``rlhf --reward-model`` and ``transformers`` load. That folder appears whole or not at all; a
Ctrl-C or SIGTERM while it is written stops with :class:`TrainingInterrupted` naming the final
checkpoint, and ``--resume`` writes it (a resume of a finished run computes nothing else).
Training itself is the chunk loop's: a signal there keeps a checkpoint to resume from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import Callable, Optional, Sequence

import jax

from purejaxppo.config import ConfigError
from purejaxppo.lm.checkpoints.hf_folder import copy_tokenizer_files
from purejaxppo.lm.data.preferences import Cuts, read_pairs, split_pairs, tokenize_pairs
from purejaxppo.lm.checkpoints.pretrained import read_config
from purejaxppo.lm.rewards.reward_model import load_reward_trunk, save_reward_model
from purejaxppo.programs.reward_program import RewardConfig, RewardProgram, RewardSettings, first_run_params
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import latest_checkpoint
from purejaxppo.run.guards import TrainingInterrupted, interrupts_deferred
from purejaxppo.run.loop import RunResult, run_chunks
from purejaxppo.run.record import RunRecord

MODEL = "model"  # the trained reward model inside the run folder


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _encoder(folder: str) -> Callable[[str], list]:
    """``encode(text) -> ids`` from the folder's ``tokenizer.json`` (no special tokens added).
    TODO: use the shared tokenizer module of purejaxppo.lm once it is merged."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise ConfigError(
            f"--model {folder} has no tokenizer.json (the pairs are text; a Hugging Face model folder "
            "holds tokenizer.json beside config.json)"
        )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    return lambda text: tok.encode(text, add_special_tokens=False).ids


def _token_id(config: dict, name: str) -> Optional[int]:
    v = config.get(name)
    v = v[0] if isinstance(v, list) and v else v
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def prepare(settings: RewardSettings, config: RewardConfig, seed: int):
    """``(lm, params, train, held, cuts)`` for ``settings`` (``model``, ``pairs``): every input
    read and checked, nothing written. :class:`ConfigError` names a bad input and the fix."""
    model = settings.model
    try:
        lm, params, _ = load_reward_trunk(model)
        model_config = read_config(model)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"--model {model}: {e}") from None
    encode = _encoder(model)
    rows = read_pairs(settings.pairs)
    eos = _token_id(model_config, "eos_token_id")
    pad = _token_id(model_config, "pad_token_id")
    batch, cuts = tokenize_pairs(
        rows,
        encode,
        max_prompt=config.max_prompt,
        max_response=config.max_response,
        eos_id=eos,
        pad_id=pad if pad is not None else (eos or 0),
    )
    vocab = model_config.get("vocab_size")
    top = int(max(batch.prompt.max(), batch.chosen.max(), batch.rejected.max()))
    if isinstance(vocab, int) and top >= vocab:
        raise ConfigError(f"--model {model}: its tokenizer gives id {top}, outside the model's vocabulary of {vocab}")
    train, held = split_pairs(batch, config.held_out, seed)
    return lm, params, train, held, cuts


def train_reward(
    config: RewardConfig,
    model: str,
    pairs: str,
    *,
    seed: int = 0,
    num_seeds: int = 1,
    run_dir: Optional[str] = None,
    resume: bool = False,
    chunk_updates: int = 1,
    checkpoint_every: int = 1,
    stop_after: Optional[int] = None,
    on_chunk: Optional[Callable[[dict], None]] = None,
    loggers: Sequence = (),
    on_note: Optional[Callable[[str], None]] = None,
    on_cuts: Optional[Callable[[Cuts], None]] = None,
) -> RunResult:
    """Train ``num_seeds`` reward models from ``model`` on the ``pairs`` file for
    ``config.epochs`` epochs (one update each); ``metrics.csv`` gets ``train_loss``,
    ``train_accuracy``, ``eval_loss``, ``eval_accuracy`` per epoch and seed. At the end run 0's
    model goes to ``RUN_DIR/model`` (HF layout). ``on_cuts(Cuts)``: told how many prompts and
    responses were cut to the budgets."""
    config = config.validate()
    pairs = os.path.abspath(pairs)
    if not os.path.isfile(pairs):
        read_pairs(pairs)  # raises the message
    settings = RewardSettings(model=os.path.abspath(model), pairs=pairs, pairs_sha256=_sha256(pairs))
    if resume:
        saved = rf.load_record(run_dir).settings
        if saved.pairs_sha256 != settings.pairs_sha256:
            raise ConfigError(
                f"{settings.pairs} changed since the run started (its SHA-256 differs); a resume "
                "needs the same pairs: put the file back or start a new run"
            )
    lm, params, train, held, cuts = prepare(settings, config, seed)
    if on_cuts is not None:
        on_cuts(cuts)
    prog = RewardProgram(config, settings, lm, params, train, held)
    record = RunRecord(
        prog.kind_for(None),
        prog.config,
        prog.settings,
        seed=seed,
        num_seeds=num_seeds,
        chunk_updates=max(1, min(chunk_updates, config.epochs)),
        split=prog.split,
        checkpoint_every=checkpoint_every,
        notes={"cuts": cuts._asdict()},
    )
    result = run_chunks(
        prog,
        record,
        run_keys(seed, num_seeds),
        run_dir=run_dir,
        resume=resume,
        stop_after=stop_after,
        on_chunk=on_chunk,
        sinks=loggers,
        on_note=on_note,
    )
    if run_dir and result.finished:
        try:
            export_reward_model(run_dir, settings.model, lm, first_run_params(result.runner_state))
        except KeyboardInterrupt as e:  # the training is saved whole: a resume writes the model, nothing else
            path = latest_checkpoint(os.path.join(run_dir, rf.CHECKPOINTS))
            raise TrainingInterrupted(path, result.updates_done, str(e) or "interrupted") from None
    return result


def export_reward_model(run_dir: str, source: str, lm, params) -> str:
    """Write ``params`` to ``RUN_DIR/model`` in the HF layout, the source's tokenizer files beside
    (written aside, then put in place: whole or not at all, an earlier one replaced)."""
    out, tmp = os.path.join(run_dir, MODEL), os.path.join(run_dir, f".{MODEL}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_reward_model(tmp, lm, params, read_config(source))
    copy_tokenizer_files(source, tmp)
    with interrupts_deferred():
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


def run_keys(seed: int, num_seeds: int) -> tuple:
    """``(keys [S],)``: the runs' inputs."""
    return (jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 5), num_seeds),)


def resume_reward(run_dir: str, record=None, **kwargs) -> RunResult:
    """Continue the reward run in ``run_dir`` with its saved config, model, pairs and seeds
    (``record``: its run record when read already)."""
    record = record if record is not None else rf.load_record(run_dir)
    opts = dict(
        seed=record.seed,
        num_seeds=record.num_seeds,
        chunk_updates=record.chunk_updates,
        checkpoint_every=record.checkpoint_every,
    )
    opts.update(kwargs)
    return train_reward(
        record.config, record.settings.model, record.settings.pairs, run_dir=run_dir, resume=True, **opts
    )
