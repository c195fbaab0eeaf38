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
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)


class CheckpointFolderError(ValueError):
    """A model folder that cannot be loaded: the message names the file or field and the fix."""


def read_config(folder: str | os.PathLike) -> dict:
    """``config.json`` of a local model folder as a dict; :class:`CheckpointFolderError` when the
    folder, the file or its JSON is missing or broken."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise CheckpointFolderError(
            f"{folder} is not a folder (give a local model folder holding config.json and "
            "*.safetensors; nothing is downloaded)"
        )
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        raise CheckpointFolderError(
            f"{folder} has no config.json (a Hugging Face model folder holds config.json and model.safetensors)"
        )
    return read_json_object(path)


def read_json_object(path: str | os.PathLike) -> dict:
    """A JSON file holding an object, as a dict; :class:`CheckpointFolderError` names the file when
    it cannot be read, is not JSON or holds something else."""
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointFolderError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(out, dict):
        raise CheckpointFolderError(f"{path} holds {type(out).__name__}, not a JSON object")
    return out


def _open(path: str):
    """``safe_open`` of one file; :class:`CheckpointFolderError` for a missing, truncated or
    corrupt one (the caller uses it as a context manager)."""
    if not os.path.isfile(path):
        raise CheckpointFolderError(f"no {path} (local files only; nothing is downloaded)")
    try:
        return safe_open(path, framework="np")
    except (SafetensorError, OSError, TypeError, ValueError) as e:
        raise CheckpointFolderError(f"{path} is not a readable safetensors file (truncated or corrupt?): {e}") from None


def _get(f, path: str, name: str) -> np.ndarray:
    try:
        return f.get_tensor(name)
    except (SafetensorError, OSError, TypeError, ValueError) as e:
        raise CheckpointFolderError(f"{path} is not a readable safetensors file (truncated or corrupt?): {e}") from None


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{name: array}`` of one file (dtypes as stored; BF16 as ``ml_dtypes.bfloat16``).
    :class:`CheckpointFolderError` for a missing, truncated or corrupt file."""
    path = os.fspath(path)
    with _open(path) as f:
        return {name: _get(f, path, name) for name in f.keys()}  # noqa: SIM118 (a safe_open handle, not a dict)


class LazyWeights(Mapping):
    """``{name: array}`` over weight files, each tensor read from its file when asked for (and
    not kept): loading a checkpoint holds one tensor at a time besides the parameters built,
    not the whole file. ``shapes``: every tensor's shape, from the headers alone."""

    def __init__(self, files: list[str]):
        self._where: dict = {}
        self.shapes: dict = {}
        for path in files:
            with _open(path) as f:
                for name in f.keys():  # noqa: SIM118
                    if name in self._where:
                        raise CheckpointFolderError(f"{path}: tensor {name!r} is also in {self._where[name]}")
                    self._where[name] = path
                    self.shapes[name] = tuple(f.get_slice(name).get_shape())

    def __getitem__(self, name: str) -> np.ndarray:
        path = self._where[name]
        with _open(path) as f:
            return _get(f, path, name)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def weight_files(folder: str | os.PathLike) -> list[str]:
    """The weight files of ``folder``: ``model.safetensors``, else the shards named by
    ``model.safetensors.index.json``'s ``weight_map``; :class:`CheckpointFolderError` when
    neither is there (or the index is broken)."""
    folder = os.fspath(folder)
    if os.path.isfile(os.path.join(folder, WEIGHTS)):
        return [os.path.join(folder, WEIGHTS)]
    index = os.path.join(folder, INDEX)
    if not os.path.isfile(index):
        raise CheckpointFolderError(
            f"{folder} has no {WEIGHTS} nor {INDEX} (only safetensors weights are read; "
            "convert *.bin / *.pth with transformers' save_pretrained)"
        )
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointFolderError(f"{index} is not an index with a weight_map ({e!r})") from None


def read_weights(folder: str | os.PathLike) -> LazyWeights:
    """The folder's tensors, shards merged (a name in two shards is an error), read lazily:
    :class:`LazyWeights`."""
    return LazyWeights(weight_files(folder))


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
