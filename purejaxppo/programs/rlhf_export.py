"""The trained policy of an ``rlhf`` run folder, out in the Hugging Face layout of the model it
came from: :func:`export_policy` (``python -m purejaxppo export RUN_DIR OUT_DIR``).

The newest checkpoint is restored into the run's own state template (no training program is
compiled); the policy's parameters are read with :func:`purejaxppo.lm.ppo.policy_export.merged_policy`,
so LoRA adapters come out merged into the frozen base (``W + alpha/r * A @ B``). The folder the
run started from gives the family, the config and the tokenizer files copied beside the weights.
The value head is not written (a causal LM has none; transformers would warn about it).
"""

from __future__ import annotations

import os

import jax

from purejaxppo.config import ConfigError
from purejaxppo.lm.checkpoints.pretrained import save_pretrained
from purejaxppo.lm.ppo.policy_export import merged_policy
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import CheckpointError, latest_checkpoint


def source_folder(settings: RLHFSettings):
    """The Hugging Face folder the run's model was loaded from, or None (a built-in TinyLM)."""
    for name in ("model", "model_dir", "init"):
        value = getattr(settings, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def check_out_dir(out_dir: str, flag: str = "OUT_DIR") -> None:
    """``out_dir`` is new or an empty folder (an export never overwrites a model); else
    :class:`ConfigError` naming ``flag`` (how the user gave the folder)."""
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ConfigError(f"{flag} {out_dir} exists and is not an empty folder; give a new folder")


def check_exportable(settings: RLHFSettings, what: str) -> None:
    """The run (``what``: its folder, or the flags that start it) began from a Hugging Face
    folder, whose layout the export writes; a built-in TinyLM has none (:class:`ConfigError`)."""
    if not source_folder(settings):
        raise ConfigError(
            f"{what} trains a built-in TinyLM, which has no Hugging Face layout; export takes a run "
            "started from a local Hugging Face model folder (--model DIR or --init DIR)"
        )


def final_policy(run_dir: str, run: int = 0):
    """``(settings, lm, params, update)``: run ``run``'s policy parameters (LoRA merged, host
    arrays) at the newest checkpoint of ``run_dir``, a folder whose kind holds a language-model
    policy (it offers ``initial_policy``: token-level PPO's). :class:`ConfigError` /
    :class:`CheckpointError` name what is wrong with the folder."""
    from purejaxppo.programs import kinds

    kind, record = kinds.folder(run_dir)
    if getattr(kind, "initial_policy", None) is None:
        able = ", ".join(k.what for k in kinds.offering("initial_policy"))
        raise ConfigError(f"{run_dir} holds a {kind.what} run; export takes a run folder of: {able}")
    if not 0 <= run < record.num_seeds:
        raise ConfigError(f"--run {run}: the folder has runs 0..{record.num_seeds - 1}")
    if latest_checkpoint(os.path.join(run_dir, rf.CHECKPOINTS)) is None:
        raise CheckpointError(f"{run_dir} has no checkpoint yet (nothing trained to export)")
    loaded = kind.load(run_dir, record)
    return record.settings, loaded.agent_fns.lm, loaded_policy(loaded.runner, run), loaded.update


def loaded_policy(runner, run: int = 0):
    """Run ``run``'s policy parameters (LoRA merged, host arrays) of a token-level state ``[S, ...]``."""
    return merged_policy(jax.tree.map(lambda x: x[run], runner))


def export_policy(run_dir: str, out_dir: str, run: int = 0) -> int:
    """Write run ``run``'s final policy into ``out_dir`` (config.json, model.safetensors, the
    source folder's tokenizer files); returns the checkpoint's update. ``out_dir`` must be new
    or empty: an export never overwrites a model."""
    check_out_dir(out_dir)
    settings, lm, params, update = final_policy(run_dir, run)
    check_exportable(settings, run_dir)
    save_pretrained(
        out_dir, lm, params, copy_from=source_folder(settings)
    )  # the family's writer, tokenizer files copied
    return update
