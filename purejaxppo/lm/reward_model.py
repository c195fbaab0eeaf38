"""Reward models: an LM trunk with a scalar head read on the LAST valid token, in and out of
Hugging Face's ``*ForSequenceClassification`` layout (local files only).

The scalar head is the model's value head (:func:`purejaxppo.lm.model.value_head`, on the
final normalised hidden state), which is exactly where HF puts ``score`` (``Linear(D, 1,
bias=False)``): a checkpoint's ``score.weight [1, D]`` becomes ``value_head.kernel [D, 1]``
with a zero bias. :func:`make_reward_fn` turns any :class:`~purejaxppo.lm.model.CausalLM` into
the ``RewardFn`` token-level PPO calls (:data:`purejaxppo.lm.experience.RewardFn`): prompt
(left-padded) and response (right-padded) concatenated, the value at the last valid token.

Families: ``model_type`` in :data:`FAMILIES` (the trunk's tensors are named as in the causal
LM, under ``transformer.`` for GPT-2).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Mapping

import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.model import FlaxLM
from purejaxppo.lm.pretrained import CheckpointFolderError, read_config
from purejaxppo.lm.hf_files import read_safetensors as load_safetensors, write_safetensors

HEAD = "score.weight"
WEIGHTS = "model.safetensors"


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


# --- families: trunk tensors <-> (model, params) ---------------------------------------------------
def _gpt2_read(tensors: Mapping, config: dict, dtype):
    from purejaxppo.lm.gpt2 import gpt2_from_config, gpt2_params_from_hf

    module = gpt2_from_config(config, dtype)
    return FlaxLM(module), gpt2_params_from_hf(tensors, module)


def _gpt2_write(lm, params) -> tuple[dict, dict]:
    from purejaxppo.lm.gpt2 import gpt2_config, gpt2_params_to_hf

    tensors = {f"transformer.{k}": v for k, v in gpt2_params_to_hf(params).items()}
    return tensors, {**gpt2_config(lm.model), "architectures": ["GPT2ForSequenceClassification"]}


#: ``model_type -> (read(trunk tensors, config, dtype) -> (lm, params), write(lm, params) -> (tensors, config))``
FAMILIES: Dict[str, tuple] = {"gpt2": (_gpt2_read, _gpt2_write)}


def _family(folder: str, config: dict) -> tuple:
    family = config.get("model_type")
    if family not in FAMILIES:
        raise CheckpointFolderError(f"{folder}: model_type {family!r} is not supported as a reward model; "
                                    f"supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[family]


def load_reward_trunk(folder: str | os.PathLike, dtype=jnp.float32) -> tuple[Any, dict, bool]:
    """``(lm, params, has_head)`` of a local model folder: a ``*ForSequenceClassification``
    checkpoint (its ``score`` head as the value head, ``has_head`` True) or a causal LM (the
    value head at zero, ``has_head`` False: a reward model to train from it). A head of more
    than one label, or with a bias, is refused."""
    folder = os.fspath(folder)
    config = read_config(folder)
    read, _ = _family(folder, config)
    path = os.path.join(folder, WEIGHTS)
    if not os.path.isfile(path):
        raise CheckpointFolderError(f"{folder} has no {WEIGHTS} (a Hugging Face model folder holds config.json and "
                                    f"{WEIGHTS})")
    tensors = dict(load_safetensors(path))
    head = tensors.pop(HEAD, None)
    if "score.bias" in tensors:
        raise CheckpointFolderError(f"{folder}: the score head has a bias; HF's sequence classifiers have none")
    tensors.pop("lm_head.weight", None) if head is not None else None  # a classifier has no LM head to check
    lm, params = read(tensors, config, dtype)
    if head is None:  # a causal LM: its value head (zero, or a stored critic's) with no bias, as HF's score
        tree = dict(params["params"])
        tree["value_head"] = {**tree["value_head"], "bias": jnp.zeros((1,), jnp.float32)}
        return lm, {**params, "params": tree}, False
    head = np.asarray(head, np.float32)
    if head.ndim != 2 or head.shape[0] != 1:
        raise CheckpointFolderError(f"{folder}: score.weight has shape {head.shape}; a reward model has one label "
                                    "(num_labels=1, shape [1, hidden])")
    tree = dict(params["params"])
    tree["value_head"] = {"kernel": jnp.asarray(head.T), "bias": jnp.zeros((1,), jnp.float32)}
    return lm, {**params, "params": tree}, True


def load_reward_model(folder: str | os.PathLike, dtype=jnp.float32) -> tuple[Callable, dict]:
    """``(reward_fn, params)`` of a local HF ``*ForSequenceClassification`` folder (one label,
    ``score`` head): ``reward_fn(params, prompt, prompt_valid, response, response_mask) -> [B]``
    (:data:`purejaxppo.lm.experience.RewardFn`). :class:`CheckpointFolderError` for a folder
    without a score head (a causal LM is no reward model) or an unsupported family."""
    lm, params, has_head = load_reward_trunk(folder, dtype)
    if not has_head:
        raise CheckpointFolderError(f"{os.fspath(folder)} holds no score head ({HEAD}): it is not a reward model; "
                                    "train one with python -m purejaxppo reward --model DIR --pairs FILE.jsonl")
    return make_reward_fn(lm), params


def save_reward_model(folder: str | os.PathLike, lm, params, extra_config: Mapping | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` in the ``*ForSequenceClassification``
    layout (trunk, ``score.weight`` = the value head's kernel transposed, ``num_labels=1``);
    ``extra_config``: entries kept from the source model's config (token ids, ...).
    ``ValueError`` when the head's bias is not zero (HF's ``score`` has none; the
    Bradley-Terry loss never moves it)."""
    head = params["params"]["value_head"]
    if float(np.abs(np.asarray(head["bias"])).max()) != 0.0:
        raise ValueError("the value head's bias is not zero; a *ForSequenceClassification score head has no bias")
    family = getattr(getattr(lm, "model", None), "__class__", type(None)).__name__.lower()
    writers = {"gpt2": FAMILIES["gpt2"][1]}
    if family not in writers:
        raise ValueError(f"save_reward_model: no writer for {type(getattr(lm, 'model', lm)).__name__}")
    tensors, config = writers[family](lm, params)
    tensors[HEAD] = np.asarray(head["kernel"], np.float32).T.copy()
    keep = {k: v for k, v in (extra_config or {}).items() if k not in config and k != "architectures"}
    config = {**keep, **config, "num_labels": 1, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0},
              "problem_type": "regression"}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(folder, WEIGHTS), tensors)
