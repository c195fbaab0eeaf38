"""The files of a local Hugging Face model folder: ``config.json`` and the weights, one
``model.safetensors`` or shards listed by ``model.safetensors.index.json``; read and written
with the ``safetensors`` package's NumPy API. Nothing is downloaded.

BF16 tensors come back as ``ml_dtypes.bfloat16`` arrays (no widening: a bf16 checkpoint loaded
into bf16 parameters never exists in float32); the package names that dtype ``"bfloat16"``,
which NumPy knows once ``ml_dtypes`` is imported (JAX imports it; this module does too).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Mapping

import ml_dtypes  # noqa: F401  (registers the "bfloat16" NumPy dtype the reader asks for)
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

WEIGHTS, INDEX, CONFIG = "model.safetensors", "model.safetensors.index.json", "config.json"
#: the files beside the weights that an export carries over from the source folder, when there
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "generation_config.json")


class CheckpointFolderError(ValueError):
    """A model folder that cannot be loaded: the message names the file or field and the fix."""


def read_config(folder: str | os.PathLike) -> dict:
    """``config.json`` of a local model folder as a dict; :class:`CheckpointFolderError` when the
    folder, the file or its JSON is missing or broken."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise CheckpointFolderError(f"{folder} is not a folder (give a local model folder holding config.json and "
                                    "*.safetensors; nothing is downloaded)")
    path = os.path.join(folder, CONFIG)
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


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{name: array}`` of one file (dtypes as stored; BF16 as ``ml_dtypes.bfloat16``).
    :class:`CheckpointFolderError` for a missing, truncated or corrupt file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointFolderError(f"no {path} (local files only; nothing is downloaded)")
    try:
        with safe_open(path, framework="np") as f:
            return {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, TypeError, ValueError) as e:
        raise CheckpointFolderError(f"{path} is not a readable safetensors file (truncated or corrupt?): {e}") from None


def weight_files(folder: str | os.PathLike) -> list[str]:
    """The weight files of ``folder``: ``model.safetensors``, else the shards named by
    ``model.safetensors.index.json``'s ``weight_map``; :class:`CheckpointFolderError` when
    neither is there (or the index is broken)."""
    folder = os.fspath(folder)
    if os.path.isfile(os.path.join(folder, WEIGHTS)):
        return [os.path.join(folder, WEIGHTS)]
    index = os.path.join(folder, INDEX)
    if not os.path.isfile(index):
        raise CheckpointFolderError(f"{folder} has no {WEIGHTS} nor {INDEX} (only safetensors weights are read; "
                                    "convert *.bin / *.pth with transformers' save_pretrained)")
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointFolderError(f"{index} is not an index with a weight_map ({e!r})") from None


def read_weights(folder: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the folder's weights, shards merged (a name in two shards is an error)."""
    out: dict = {}
    for path in weight_files(folder):
        tensors = read_safetensors(path)
        twice = sorted(set(tensors) & set(out))
        if twice:
            raise CheckpointFolderError(f"{path}: tensors {twice[:3]} are also in another shard")
        out.update(tensors)
    return out


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray]) -> None:
    """One safetensors file with metadata ``format=pt`` (what transformers expects)."""
    save_file({k: np.asarray(v, order="C") for k, v in tensors.items()}, os.fspath(path), metadata={"format": "pt"})


def write_folder(folder: str | os.PathLike, config: Mapping, tensors: Mapping[str, np.ndarray]) -> None:
    """``config.json`` and ``model.safetensors`` into ``folder`` (created)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, CONFIG), "w") as f:
        json.dump(dict(config), f, indent=2)
    write_safetensors(os.path.join(folder, WEIGHTS), tensors)


def copy_tokenizer_files(source: str | os.PathLike, folder: str | os.PathLike) -> list[str]:
    """Copy :data:`TOKENIZER_FILES` that ``source`` has into ``folder``; the names copied."""
    copied = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(source, n))]
    for name in copied:
        shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
    return copied
