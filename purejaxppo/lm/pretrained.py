"""One front door for a local Hugging Face checkpoint: ``load_pretrained(folder, dtype=...) -> (model, params)``.

``model`` meets :class:`~purejaxppo.lm.model.CausalLM` (logits, forward, values, prefill,
decode with a KV cache); ``params`` are its Flax variables ``{"params": ...}``, with a value
head ``params["params"]["value_head"]`` (``kernel [D, 1]``, ``bias [1]``) that starts at zero
unless the checkpoint stores one. The family is chosen by ``config.json``'s ``model_type``
(:data:`FAMILIES`); nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict

import jax.numpy as jnp

from purejaxppo.lm.model import FlaxLM


class CheckpointFolderError(ValueError):
    """A model folder that cannot be loaded: the message names the file or field and the fix."""


def read_config(folder: str | os.PathLike) -> dict:
    """``config.json`` of a local model folder as a dict; :class:`CheckpointFolderError` when the
    folder, the file or its JSON is missing or broken."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise CheckpointFolderError(f"{folder} is not a folder (give a local model folder holding config.json and "
                                    "*.safetensors; nothing is downloaded)")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise CheckpointFolderError(f"{folder} has no config.json (a Hugging Face model folder holds config.json and "
                                    "model.safetensors)")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointFolderError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointFolderError(f"{path} holds {type(config).__name__}, not a JSON object")
    return config


def _gpt2(folder: str, config: dict, dtype) -> tuple[Any, dict]:
    from purejaxppo.lm.gpt2 import load_gpt2

    module, params = load_gpt2(folder, dtype)
    return FlaxLM(module), params


#: ``model_type -> load(folder, config, dtype) -> (model, params)``
FAMILIES: Dict[str, Callable[..., tuple]] = {"gpt2": _gpt2}


def load_pretrained(folder: str | os.PathLike, dtype=jnp.float32) -> tuple[Any, dict]:
    """``(model, params)`` of the local checkpoint in ``folder``, dispatched on ``model_type``.
    ``dtype``: the compute dtype. :class:`CheckpointFolderError` names an unsupported family or a
    missing file."""
    folder = os.fspath(folder)
    config = read_config(folder)
    family = config.get("model_type")
    if family not in FAMILIES:
        raise CheckpointFolderError(f"{folder}: model_type {family!r} is not supported; supported: "
                                    f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[family](folder, config, dtype)
