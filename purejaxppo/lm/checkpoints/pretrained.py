"""One front door for a local Hugging Face checkpoint: ``load_pretrained(folder, dtype=...) -> (model, params)``,
and the way back, ``save_pretrained(out_dir, model, params)``.

``model`` meets :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (logits, forward, values, prefill,
decode with a KV cache); ``params`` are its Flax variables ``{"params": ...}``, with a value
head ``params["params"]["value_head"]`` (``kernel [D, 1]``, ``bias [1]``) that starts at zero
unless the checkpoint stores one. The family is chosen by ``config.json``'s ``model_type``
(:data:`FAMILIES`): ``gpt2`` and the Llama family (``llama``, ``mistral``, ``qwen2``,
``qwen3``); nothing is downloaded.

Reward models: :func:`load_sequence_classifier` reads an HF ``*ForSequenceClassification``
folder (one label) into the same model with its ``score`` head as the value head, and
:func:`save_sequence_classifier` writes it back.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.gpt2 import GPT2, gpt2_config, gpt2_from_config
from purejaxppo.lm.checkpoints.gpt2_hf import (
    gpt2_params_from_hf,
    gpt2_params_to_hf,
    gpt2_reward_params_from_hf,
    gpt2_reward_params_to_hf,
)
from purejaxppo.lm.checkpoints.hf_folder import (
    CheckpointFolderError,
    copy_tokenizer_files,
    read_config,
    read_weights,
    write_folder,
)
from purejaxppo.lm.models.llama import Llama
from purejaxppo.lm.checkpoints.llama_hf import llama_config_from_hf, llama_config_to_hf
from purejaxppo.lm.checkpoints.llama_hf import params_from_hf, params_to_hf, reward_params_from_hf, reward_params_to_hf
from purejaxppo.lm.models.adapters import FlaxLM

__all__ = [
    "CheckpointFolderError",
    "FAMILIES",
    "load_pretrained",
    "save_pretrained",
    "read_config",
    "load_sequence_classifier",
    "save_sequence_classifier",
]


def _gpt2(folder: str, config: dict, dtype, param_dtype) -> tuple[Any, dict]:
    if np.dtype(param_dtype) != np.float32:
        raise CheckpointFolderError(
            f"{folder}: gpt2 keeps float32 parameters (param_dtype {np.dtype(param_dtype)} is for the Llama family)"
        )
    module = _configured(folder, lambda: gpt2_from_config(config, dtype))
    return FlaxLM(module), _configured(folder, lambda: gpt2_params_from_hf(read_weights(folder), module))


def _llama_module(folder: str, config: dict, dtype, param_dtype):
    return Llama(_configured(folder, lambda: llama_config_from_hf(config)), dtype=dtype, param_dtype=param_dtype)


def _llama(folder: str, config: dict, dtype, param_dtype) -> tuple[Any, dict]:
    module = _llama_module(folder, config, dtype, param_dtype)
    return FlaxLM(module), _configured(folder, lambda: params_from_hf(read_weights(folder), module.config, param_dtype))


def _configured(folder: str, build: Callable):
    """``build()``, its ``ValueError`` (a config or tensor the family cannot take) as a
    :class:`CheckpointFolderError` naming the folder."""
    try:
        return build()
    except CheckpointFolderError:
        raise
    except ValueError as e:
        raise CheckpointFolderError(f"{folder}: {e}") from None


#: ``model_type -> load(folder, config, dtype, param_dtype) -> (model, params)``
FAMILIES: Dict[str, Callable[..., tuple]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _llama,
    "qwen3": _llama,
}


def _family(folder: str) -> tuple[dict, str]:
    config = read_config(folder)
    family = config.get("model_type")
    if family not in FAMILIES:
        raise CheckpointFolderError(
            f"{folder}: model_type {family!r} is not supported; supported: {', '.join(sorted(FAMILIES))}"
        )
    return config, family


def load_pretrained(folder: str | os.PathLike, dtype=jnp.float32, param_dtype=jnp.float32) -> tuple[Any, dict]:
    """A local Hugging Face causal-LM folder as a model and its parameters (nothing is
    downloaded), dispatched on ``config.json``'s ``model_type`` (:data:`FAMILIES`).

    Args:
      folder: a folder holding ``config.json`` and ``model.safetensors`` (or its sharded index).
      dtype: the compute dtype.
      param_dtype: the dtype the matrices are kept in (the Llama family; ``jnp.bfloat16``
        halves their memory; the norms and the value head stay float32). GPT-2 keeps float32.

    Returns:
      ``(model, params)``: a :class:`~purejaxppo.lm.models.adapters.FlaxLM` over a
      :class:`~purejaxppo.lm.models.gpt2.GPT2` or :class:`~purejaxppo.lm.models.llama.Llama`
      module, and its variables ``{"params": ...}`` with a ``value_head`` (``kernel [D, 1]``,
      ``bias [1]``), zero unless the folder stores one.

    Raises:
      CheckpointFolderError: an unsupported ``model_type``, a missing or unreadable file, or a
        config or tensor the family cannot take (the message names the file or field).
    """
    folder = os.fspath(folder)
    config, family = _family(folder)
    return FAMILIES[family](folder, config, dtype, param_dtype)


def _module(model):
    return getattr(model, "model", model)  # a FlaxLM or the Flax module itself


def save_pretrained(
    out_dir: str | os.PathLike,
    model,
    params,
    value_head: bool = False,
    dtype=np.float32,
    copy_from: str | os.PathLike | None = None,
) -> None:
    """Write a model as a Hugging Face causal-LM folder, which :func:`load_pretrained` and
    ``transformers``' ``AutoModelForCausalLM.from_pretrained`` read back.

    Args:
      out_dir: the folder (created); ``config.json`` and ``model.safetensors`` are written.
      model: from :func:`load_pretrained`: a ``FlaxLM`` or its GPT-2 / Llama module.
      params: its variables ``{"params": ...}`` (LoRA merged: ``purejaxppo.lm.merged_policy``).
      value_head: also store ``value_head.*`` (HF skips them; :func:`load_pretrained` reads them).
      dtype: the tensors' dtype (float32 by default: exact for float32 and bf16 parameters).
      copy_from: the source folder, whose tokenizer and generation files
        (:data:`~purejaxppo.lm.checkpoints.hf_folder.TOKENIZER_FILES`) are copied beside the weights.

    Raises:
      TypeError: a module with no Hugging Face layout here (neither GPT2 nor Llama).
    """
    module = _module(model)
    if isinstance(module, Llama):
        config = llama_config_to_hf(module.config, np.dtype(dtype).name)
        tensors = params_to_hf(params, module.config, value_head, dtype)
    elif isinstance(module, GPT2):
        config = gpt2_config(module)
        tensors = {k: v.astype(np.dtype(dtype)) for k, v in gpt2_params_to_hf(params, value_head).items()}
    else:
        raise TypeError(f"save_pretrained: {type(module).__name__} has no Hugging Face layout (GPT2 or Llama)")
    write_folder(out_dir, config, tensors)
    if copy_from is not None:
        copy_tokenizer_files(copy_from, out_dir)


_CLASSIFIERS = {
    "gpt2": "GPT2ForSequenceClassification",
    "llama": "LlamaForSequenceClassification",
    "mistral": "MistralForSequenceClassification",
    "qwen2": "Qwen2ForSequenceClassification",
    "qwen3": "Qwen3ForSequenceClassification",
}


def classifier_architecture(model_type: str) -> str:
    """HF's ``*ForSequenceClassification`` class name for ``model_type``."""
    return _CLASSIFIERS[model_type]


def load_sequence_classifier(folder: str | os.PathLike, dtype=jnp.float32, param_dtype=jnp.float32) -> tuple[Any, dict]:
    """A local Hugging Face ``*ForSequenceClassification`` folder with one label (a reward
    model) of any family here, its ``score`` head as the value head.

    Args:
      folder: the model folder.
      dtype: the compute dtype.
      param_dtype: the matrices' dtype (the Llama family).

    Returns:
      ``(model, params)`` as :func:`load_pretrained` gives them, with ``score.weight [1, D]``
      as ``value_head`` (``kernel = score.weight.T``, bias 0), so ``model.values(params,
      tokens, valid)[:, t]`` is the score of the prefix ending at ``t``. Call ``values`` only:
      the Llama family's has no LM head.

    Raises:
      CheckpointFolderError: an unsupported family, a missing file, or a ``score`` that is not
        one label.
    """
    folder = os.fspath(folder)
    config, family = _family(folder)
    if family == "gpt2":
        module = _configured(folder, lambda: gpt2_from_config(config, dtype))
        return FlaxLM(module), _configured(folder, lambda: gpt2_reward_params_from_hf(read_weights(folder), module))
    module = _llama_module(folder, config, dtype, param_dtype)
    return FlaxLM(module), _configured(
        folder, lambda: reward_params_from_hf(read_weights(folder), module.config, param_dtype)
    )


def save_sequence_classifier(out_dir: str | os.PathLike, model, params, dtype=np.float32) -> None:
    """Write a model's trunk and value head as a Hugging Face ``*ForSequenceClassification``
    folder (one label): the inverse of :func:`load_sequence_classifier`.

    Args:
      out_dir: the folder (created).
      model: a GPT-2 or Llama-family ``FlaxLM`` or its module.
      params: its variables; the value head becomes ``score.weight [1, D]``.
      dtype: the tensors' dtype.

    Raises:
      ValueError: the value head's bias is not 0 (HF's score head has none).
    """
    module = _module(model)
    if isinstance(module, GPT2):
        config = gpt2_config(module)
        tensors = {k: v.astype(np.dtype(dtype)) for k, v in gpt2_reward_params_to_hf(params).items()}
    else:
        config = llama_config_to_hf(module.config, np.dtype(dtype).name)
        tensors = reward_params_to_hf(params, module.config, dtype)
    config.update(
        architectures=[_CLASSIFIERS[config["model_type"]]], id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}
    )
    write_folder(out_dir, config, tensors)
