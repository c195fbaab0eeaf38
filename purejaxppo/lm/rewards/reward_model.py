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
    """``reward_fn(params, prompt [B, P], prompt_valid [B, P], response [B, T], response_mask
    [B, T]) -> [B]`` float32: ``lm.values`` of ``prompt + response`` at the last valid token
    (the response's last token; the prompt's last when the response is empty)."""

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
    """``(reward_fn, params)`` of a local HF ``*ForSequenceClassification`` folder (one label,
    ``score`` head) of any supported family: ``reward_fn(params, prompt, prompt_valid, response,
    response_mask) -> [B]`` (:data:`purejaxppo.lm.ppo.experience.RewardFn`).
    :class:`CheckpointFolderError` for a folder that is not a sequence classifier (a causal LM is
    no reward model) or an unsupported family."""
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
    """Write the trunk and value head as an HF ``*ForSequenceClassification`` folder
    (:func:`~purejaxppo.lm.checkpoints.pretrained.save_sequence_classifier`: ``score.weight`` = the value
    head's kernel transposed, one label; ``ValueError`` for a non-zero bias); ``extra_config``:
    entries of the source model's ``config.json`` kept where the writer sets none (token ids, ...)."""
    save_sequence_classifier(folder, lm, params)
    path = os.path.join(os.fspath(folder), "config.json")
    with open(path) as f:
        config = json.load(f)
    keep = {k: v for k, v in (extra_config or {}).items() if k not in config and k != "architectures"}
    with open(path, "w") as f:
        json.dump({**keep, **config, "num_labels": 1}, f, indent=2)
