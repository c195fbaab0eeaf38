"""Reward models: an LM trunk with a scalar head read on the LAST valid token, in and out of
Hugging Face's ``*ForSequenceClassification`` layout (local files only).

The scalar head is the model's value head (:func:`purejaxppo.lm.models.causal_lm.value_head`, on the
final normalised hidden state), which is exactly where HF puts ``score`` (``Linear(D, 1,
bias=False)``): a checkpoint's ``score.weight [1, D]`` becomes ``value_head.kernel [D, 1]``
with a zero bias. :func:`make_reward_fn` turns any :class:`~purejaxppo.lm.models.causal_lm.CausalLM` into
the ``RewardFn`` token-level PPO calls (:data:`purejaxppo.lm.ppo.experience.RewardFn`): prompt
(left-padded) and response (right-padded) concatenated, the value at the last valid token.

Families: every one :mod:`purejaxppo.lm.checkpoints.pretrained` reads and writes (GPT-2 and the Llama
family), through its ``load_sequence_classifier`` / ``save_sequence_classifier``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

import jax.numpy as jnp

from purejaxppo.lm.checkpoints.pretrained import (
    CheckpointFolderError,
    load_pretrained,
    load_sequence_classifier,
    read_config,
    save_sequence_classifier,
)


def last_valid(valid) -> jnp.ndarray:
    """``[B]`` index of the last True of each row of ``valid [B, L]`` (0 for a row with none)."""
    valid = jnp.asarray(valid, bool)
    return valid.shape[1] - 1 - jnp.argmax(valid[:, ::-1], axis=1)


def make_reward_fn(lm) -> Callable:
    """Turn a model's value head into the reward token-level PPO calls.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` whose value head is the score
        head (``purejaxppo.lm.load_sequence_classifier``'s).

    Returns:
      ``reward_fn(params, prompt [B, P] int32, prompt_valid [B, P] bool, response [B, T] int32,
      response_mask [B, T] bool) -> [B]`` float32: ``lm.values`` of ``prompt + response`` at
      the last valid token (the response's last; the prompt's last when the response is
      empty). Pure and jittable.
    """

    def reward_fn(params, prompt, prompt_valid, response, response_mask):
        tokens = jnp.concatenate([prompt, response.astype(prompt.dtype)], axis=1)
        valid = jnp.concatenate([prompt_valid.astype(bool), response_mask.astype(bool)], axis=1)
        values = lm.values(params, tokens, valid)
        return jnp.take_along_axis(values, last_valid(valid)[:, None], axis=1)[:, 0].astype(jnp.float32)

    return reward_fn


# --- Hugging Face folders (the families' readers and writers, purejaxppo.lm.checkpoints.pretrained) ----------
def is_sequence_classifier(config: Mapping) -> bool:
    """Whether an HF ``config.json`` dict describes a ``*ForSequenceClassification`` model."""
    return any(str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or ())


def load_reward_trunk(folder: str | os.PathLike, dtype=jnp.float32) -> tuple[Any, dict, bool]:
    """``(lm, params, has_head)`` of a local model folder of any family
    :func:`~purejaxppo.lm.checkpoints.pretrained.load_pretrained` reads: a ``*ForSequenceClassification``
    checkpoint (``config.json``'s ``architectures``; its ``score`` head as the value head,
    ``has_head`` True) or a causal LM (its value head, zero unless stored, with the bias set to
    0 as HF's ``score`` has none; ``has_head`` False: a reward model to train from it)."""
    folder = os.fspath(folder)
    if is_sequence_classifier(read_config(folder)):
        lm, params = load_sequence_classifier(folder, dtype)
        return lm, params, True
    lm, params = load_pretrained(folder, dtype)
    tree = dict(params["params"])
    tree["value_head"] = {**tree["value_head"], "bias": jnp.zeros((1,), jnp.float32)}
    return lm, {**params, "params": tree}, False


def load_reward_model(folder: str | os.PathLike, dtype=jnp.float32) -> tuple[Callable, dict]:
    """A local Hugging Face ``*ForSequenceClassification`` folder (one label, ``score`` head)
    of any supported family, as the reward token-level PPO calls.

    Args:
      folder: the model folder.
      dtype: the compute dtype.

    Returns:
      ``(reward_fn, params)``: ``reward_fn(params, prompt, prompt_valid, response,
      response_mask) -> [B]`` float32 (:func:`make_reward_fn`) and the model's variables.

    Raises:
      CheckpointFolderError: a folder that is not a sequence classifier (a causal LM is no
        reward model), an unsupported family, or a missing or broken file.
    """
    folder = os.fspath(folder)
    if not is_sequence_classifier(read_config(folder)):
        raise CheckpointFolderError(
            f"{folder} holds no score head (config.json's architectures name no "
            "*ForSequenceClassification): it is not a reward model; train one with "
            "python -m purejaxppo reward --model DIR --pairs FILE.jsonl"
        )
    lm, params = load_sequence_classifier(folder, dtype)
    return make_reward_fn(lm), params


def save_reward_model(folder: str | os.PathLike, lm, params, extra_config: Mapping | None = None) -> None:
    """Write a reward model as a Hugging Face ``*ForSequenceClassification`` folder (one label),
    which :func:`load_reward_model` and ``transformers`` read back.

    Args:
      folder: the folder (created).
      lm: the model (a GPT-2 or Llama-family ``FlaxLM``); its value head is the score head
        (``score.weight`` = the kernel transposed).
      params: its variables.
      extra_config: entries of the source model's ``config.json`` kept where the writer sets
        none (token ids, ...).

    Raises:
      ValueError: the value head's bias is not 0 (HF's score head has none).
    """
    save_sequence_classifier(folder, lm, params)
    path = os.path.join(os.fspath(folder), "config.json")
    with open(path) as f:
        config = json.load(f)
    keep = {k: v for k, v in (extra_config or {}).items() if k not in config and k != "architectures"}
    with open(path, "w") as f:
        json.dump({**keep, **config, "num_labels": 1}, f, indent=2)
