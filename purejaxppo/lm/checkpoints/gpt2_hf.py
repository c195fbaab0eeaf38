"""GPT-2's weights in and out of Hugging Face's safetensors layout (``GPT2LMHeadModel`` and
``GPT2ForSequenceClassification``), from LOCAL files only (nothing is downloaded).

:class:`~purejaxppo.lm.models.gpt2.GPT2`'s parameter tree mirrors HF's names, and HF's ``Conv1D``
weight is ``[in, out]``, the layout of a Flax ``Dense`` kernel, so the mapping is a renaming, no
transposes. ``value_head`` is not in HF files: :func:`save_gpt2` stores it as ``value_head.*``,
which :func:`load_gpt2` reads when present and ``transformers`` skips.
"""

from __future__ import annotations

import json
import os
import re
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.checkpoints.hf_folder import read_safetensors, write_safetensors
from purejaxppo.lm.models.gpt2 import GPT2, gpt2_config, gpt2_from_config

# HF's causal-mask buffers and the tied head (a copy of wte): in files, not parameters here
_IGNORED = re.compile(r"h\.\d+\.attn\.(masked_)?bias|lm_head\.weight")


# --- Hugging Face layout ------------------------------------------------------------------------
def _layout(vocab: int, n_positions: int, d: int, n_layer: int) -> dict:
    """``{HF name: (path in the Flax "params" tree, shape)}`` for every tensor of an HF GPT-2."""
    out = {"wte.weight": (("wte", "embedding"), (vocab, d)), "wpe.weight": (("wpe", "embedding"), (n_positions, d))}
    dense = {"attn.c_attn": (d, 3 * d), "attn.c_proj": (d, d), "mlp.c_fc": (d, 4 * d), "mlp.c_proj": (4 * d, d)}
    norms = {f"h.{i}.{ln}": (f"h_{i}", ln) for i in range(n_layer) for ln in ("ln_1", "ln_2")}
    for name, path in {**norms, "ln_f": ("ln_f",)}.items():
        out[f"{name}.weight"], out[f"{name}.bias"] = (path + ("scale",), (d,)), (path + ("bias",), (d,))
    for i in range(n_layer):
        for name, (a, b) in dense.items():
            path = (f"h_{i}", *name.split("."))
            out[f"h.{i}.{name}.weight"] = (path + ("kernel",), (a, b))  # Conv1D [in, out] == Dense kernel
            out[f"h.{i}.{name}.bias"] = (path + ("bias",), (b,))
    return out


def _module_layout(module: GPT2) -> dict:
    return _layout(module.vocab_size, module.n_positions, module.n_embd, module.n_layer)


def _value_head_layout(d: int) -> dict:
    """The value head under HF-style names: ours, not HF's (transformers skips them, warning)."""
    return {"value_head.weight": (("value_head", "kernel"), (d, 1)), "value_head.bias": (("value_head", "bias"), (1,))}


def _check(tensors: Mapping, layout: dict, what: str) -> None:
    """``ValueError`` naming the first tensor of ``layout`` that is missing or misshapen."""
    for name, (_, shape) in layout.items():
        if name not in tensors:
            raise ValueError(f"{what}: missing tensor {name!r} (expected shape {shape})")
        if tuple(np.shape(tensors[name])) != shape:
            raise ValueError(f"{what}: tensor {name!r} has shape {tuple(np.shape(tensors[name]))}, expected {shape}")


def gpt2_params_from_hf(tensors: Mapping[str, np.ndarray], config: GPT2 | Mapping) -> dict:
    """HF GPT-2 tensors (names with or without the ``transformer.`` prefix) -> the Flax variables
    ``{"params": ...}`` of :class:`GPT2` (float32). ``config``: the module or an HF config dict.
    The causal-mask buffers and ``lm_head.weight`` (must equal ``wte.weight``: the head is tied)
    are skipped; ``value_head.*`` is read when present, else the head keeps its zero init.
    ``ValueError`` for a missing, misshapen or unknown tensor."""
    module = config if isinstance(config, GPT2) else gpt2_from_config(config)
    named = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    layout, heads, d = _module_layout(module), _value_head_layout(module.n_embd), module.n_embd
    unknown = sorted(k for k in named if k not in layout and k not in heads and not _IGNORED.fullmatch(k))
    if unknown:
        raise ValueError(f"GPT-2 weights: unexpected tensors {unknown[:5]} (another architecture or n_layer?)")
    _check(named, layout, "GPT-2 weights")
    if "lm_head.weight" in named and not np.array_equal(named["lm_head.weight"], named["wte.weight"]):
        raise ValueError("GPT-2 weights: lm_head.weight differs from wte.weight; only the tied head is supported")
    if any(n in named for n in heads):
        layout = {**layout, **heads}
        _check(named, heads, "GPT-2 weights")
    tree: dict = {"value_head": {"kernel": jnp.zeros((d, 1)), "bias": jnp.zeros((1,))}}
    for name, (path, _) in layout.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = jnp.asarray(np.asarray(named[name], np.float32))
    return {"params": tree}


def gpt2_params_to_hf(params: Mapping, value_head: bool = False) -> dict[str, np.ndarray]:
    """The inverse of :func:`gpt2_params_from_hf`: ``{HF name: float32 array}`` (no prefix, no
    buffers, no ``lm_head.weight``); ``value_head=True`` adds ``value_head.weight/bias``.
    ``params``: the variables ``{"params": ...}`` or the ``params`` tree itself."""
    tree = params.get("params", params)
    n_layer = sum(1 for k in tree if re.fullmatch(r"h_\d+", k))
    (vocab, d), n_positions = np.shape(tree["wte"]["embedding"]), np.shape(tree["wpe"]["embedding"])[0]
    layout = _layout(vocab, n_positions, d, n_layer)
    if value_head:
        layout.update(_value_head_layout(d))
    out = {}
    for name, (path, _) in layout.items():
        node = tree
        for key in path:
            node = node[key]
        out[name] = np.asarray(node, np.float32)
    return out


def gpt2_reward_params_from_hf(tensors: Mapping[str, np.ndarray], config: GPT2 | Mapping) -> dict:
    """HF ``GPT2ForSequenceClassification`` tensors with one label (``transformer.*`` and
    ``score.weight [1, n_embd]``, no bias) -> the variables of :class:`GPT2`, the score row as
    the value head (``kernel = score.weight.T``, ``bias = 0``)."""
    named = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    module = config if isinstance(config, GPT2) else gpt2_from_config(config)
    score = named.pop("score.weight", None)
    if score is None or tuple(np.shape(score)) != (1, module.n_embd):
        raise ValueError(
            f"GPT-2 reward-model weights: need score.weight of shape (1, {module.n_embd}) (one label), "
            f"got {None if score is None else tuple(np.shape(score))}"
        )
    params = gpt2_params_from_hf(named, module)
    params["params"]["value_head"] = {"kernel": jnp.asarray(np.asarray(score, np.float32).T), "bias": jnp.zeros((1,))}
    return params


def gpt2_reward_params_to_hf(params: Mapping) -> dict[str, np.ndarray]:
    """The inverse of :func:`gpt2_reward_params_from_hf` (float32; ``ValueError`` for a value
    head bias that is not 0: HF's score head has none)."""
    head = params.get("params", params)["value_head"]
    if np.any(np.asarray(head["bias"]) != 0):
        raise ValueError(
            f"reward model: value_head bias {np.asarray(head['bias']).tolist()} is not 0; HF's score head has no bias"
        )
    out = {f"transformer.{k}": v for k, v in gpt2_params_to_hf(params).items()}
    return out | {"score.weight": np.asarray(head["kernel"], np.float32).T.copy()}


def load_gpt2(path: str | os.PathLike, dtype=jnp.float32) -> tuple[GPT2, dict]:
    """A LOCAL Hugging Face GPT-2 (``GPT2LMHeadModel``) as a :class:`~purejaxppo.lm.models.gpt2.GPT2`
    module and its variables; nothing is downloaded. (``purejaxppo.lm.load_pretrained`` reads
    any family and returns a ``FlaxLM``.)

    Args:
      path: a folder holding ``config.json`` and ``model.safetensors``, or the ``.safetensors``
        file itself (``config.json`` beside it).
      dtype: the module's compute dtype (parameters are float32).

    Returns:
      ``(module, {"params": ...})``; the value head is read from ``value_head.*`` when stored,
      else zero.

    Raises:
      FileNotFoundError: no weights file or no ``config.json``.
      ValueError: a config option GPT-2 here does not implement, or a missing, misshapen or
        unknown tensor (``lm_head.weight`` must equal ``wte.weight``: the head is tied).
    """
    path = os.fspath(path)
    folder, file = (
        (path, os.path.join(path, "model.safetensors")) if os.path.isdir(path) else (os.path.dirname(path), path)
    )
    cfg_path = os.path.join(folder, "config.json")
    for need in (file, cfg_path):
        if not os.path.isfile(need):
            raise FileNotFoundError(f"load_gpt2: no {need} (local files only; nothing is downloaded)")
    with open(cfg_path) as f:
        module = gpt2_from_config(json.load(f), dtype)
    return module, gpt2_params_from_hf(read_safetensors(file), module)


def save_gpt2(folder: str | os.PathLike, module: GPT2, params: Mapping, value_head: bool = True) -> None:
    """Write a GPT-2 as a Hugging Face folder; :func:`load_gpt2` and ``transformers`` read it back.

    Args:
      folder: the folder (created); ``config.json`` and ``model.safetensors`` (HF layout,
        float32, metadata ``format=pt`` as transformers expects) are written.
      module: the :class:`~purejaxppo.lm.models.gpt2.GPT2` module.
      params: its variables ``{"params": ...}`` (or the tree itself).
      value_head: also store ``value_head.*`` (a trained critic survives the round trip).

    Raises:
      ValueError: ``params`` do not fit ``module`` (a missing or misshapen tensor).
    """
    tensors = gpt2_params_to_hf(params, value_head)
    _check(tensors, _module_layout(module), f"save_gpt2 (params do not fit {module})")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(gpt2_config(module), f, indent=2)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
