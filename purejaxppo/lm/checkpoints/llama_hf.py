"""Hugging Face tensor names <-> the parameter tree of :class:`purejaxppo.lm.models.llama.Llama`.

Two layouts of the same trunk (``model.*``):

* causal LM (``*ForCausalLM``): ``lm_head.weight [V, D]`` unless the head is tied to
  ``model.embed_tokens.weight``; our value head, when stored, as ``value_head.weight [D, 1]``
  and ``value_head.bias [1]`` (not HF names: transformers skips them, warning);
* reward model (``*ForSequenceClassification`` with one label): ``score.weight [1, D]``, no
  bias, which becomes the value head (``kernel = score.weight.T``, ``bias = 0``): the reward is
  then ``values[:, t]`` at the last valid token.

HF's ``nn.Linear`` weight is ``[out, in]``; a Flax ``Dense`` kernel is ``[in, out]``: every
projection is transposed on the way in and out; embeddings and norms are not.
"""

from __future__ import annotations

import re
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.llama_config import LlamaConfig

# what files may hold that is not a parameter here: old checkpoints' RoPE buffers
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")


def trunk_layout(c: LlamaConfig) -> dict:
    """``{HF name: (path in the Flax "params" tree, HF shape, transposed)}`` of the trunk
    (``model.*``): embeddings, every layer, the final norm."""
    d, hd, q, kv = c.hidden_size, c.head_dim, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    out = {
        "model.embed_tokens.weight": (("embed_tokens", "embedding"), (c.vocab_size, d), False),
        "model.norm.weight": (("norm", "scale"), (d,), False),
    }
    linears = {
        "self_attn.q_proj": (q, d, c.qkv_bias),
        "self_attn.k_proj": (kv, d, c.qkv_bias),
        "self_attn.v_proj": (kv, d, c.qkv_bias),
        "self_attn.o_proj": (d, q, c.o_bias),
        "mlp.gate_proj": (c.intermediate_size, d, False),
        "mlp.up_proj": (c.intermediate_size, d, False),
        "mlp.down_proj": (d, c.intermediate_size, False),
    }
    norms = {"input_layernorm": d, "post_attention_layernorm": d}
    if c.qk_norm:
        norms |= {"self_attn.q_norm": hd, "self_attn.k_norm": hd}
    for i in range(c.num_hidden_layers):
        pre = f"model.layers.{i}."
        for name, (n_out, n_in, bias) in linears.items():
            path = (f"layers_{i}", *name.split("."))
            out[f"{pre}{name}.weight"] = (path + ("kernel",), (n_out, n_in), True)
            if bias:
                out[f"{pre}{name}.bias"] = (path + ("bias",), (n_out,), False)
        for name, n in norms.items():
            out[f"{pre}{name}.weight"] = ((f"layers_{i}", *name.split("."), "scale"), (n,), False)
    return out


def causal_layout(c: LlamaConfig) -> dict:
    """The trunk plus ``lm_head.weight`` when untied."""
    head = (
        {}
        if c.tie_word_embeddings
        else {"lm_head.weight": (("lm_head", "kernel"), (c.vocab_size, c.hidden_size), True)}
    )
    return {**trunk_layout(c), **head}


def value_head_layout(c: LlamaConfig) -> dict:
    """Our value head under HF-style names (ours; ``kernel [D, 1]`` stored as is)."""
    return {
        "value_head.weight": (("value_head", "kernel"), (c.hidden_size, 1), False),
        "value_head.bias": (("value_head", "bias"), (1,), False),
    }


def _is_norm(path: tuple) -> bool:
    return path[-1] == "scale"


def _check(tensors: Mapping, layout: dict, what: str) -> None:
    """``ValueError`` naming the first tensor of ``layout`` missing or misshapen (shapes from
    ``tensors.shapes`` when it has them: a lazy mapping is not read for this)."""
    shapes = getattr(tensors, "shapes", None)
    for name, (_, shape, _) in layout.items():
        if name not in tensors:
            raise ValueError(f"{what}: missing tensor {name!r} (expected shape {shape})")
        got = shapes[name] if shapes is not None else tuple(np.shape(tensors[name]))
        if got != shape:
            raise ValueError(f"{what}: tensor {name!r} has shape {got}, expected {shape}")


def _tree(tensors: Mapping, layout: dict, param_dtype) -> dict:
    """The ``params`` tree: matrices in ``param_dtype``, norms and the value head float32."""
    tree: dict = {}
    for name, (path, _, transposed) in layout.items():
        x = np.asarray(tensors[name])
        x = x.T if transposed else x
        keep32 = _is_norm(path) or path[0] == "value_head"
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = jnp.asarray(x.astype(np.float32 if keep32 else np.dtype(param_dtype)))
    return tree


def params_from_hf(tensors: Mapping[str, np.ndarray], c: LlamaConfig, param_dtype=jnp.float32) -> dict:
    """HF causal-LM tensors -> the variables ``{"params": ...}`` of ``Llama(c)``; the value
    head from ``value_head.*`` when stored, else zeros. A tied head's ``lm_head.weight`` copy,
    when a file holds one, is skipped. ``ValueError`` names a missing, misshapen or unknown
    tensor (another family or layer count)."""
    what = f"{c.model_type} weights"
    layout, heads = causal_layout(c), value_head_layout(c)
    tied_copy = {"lm_head.weight"} if c.tie_word_embeddings else set()
    unknown = sorted(
        k for k in tensors if k not in layout and k not in heads and k not in tied_copy and not _IGNORED.fullmatch(k)
    )
    if "score.weight" in unknown:
        raise ValueError(
            f"{what}: score.weight makes this a reward model (*ForSequenceClassification): "
            "read it with load_sequence_classifier"
        )
    if unknown:
        raise ValueError(f"{what}: unexpected tensors {unknown[:5]} (another architecture or layer count?)")
    _check(tensors, layout, what)
    if any(n in tensors for n in heads):
        _check(tensors, heads, what)
        layout = {**layout, **heads}
    tree = _tree(tensors, layout, param_dtype)
    tree.setdefault("value_head", {"kernel": jnp.zeros((c.hidden_size, 1)), "bias": jnp.zeros((1,))})
    return {"params": tree}


def _to_hf(tree: Mapping, layout: dict, dtype) -> dict[str, np.ndarray]:
    out = {}
    for name, (path, _, transposed) in layout.items():
        node = tree
        for key in path:
            node = node[key]
        x = np.asarray(node)
        out[name] = np.ascontiguousarray((x.T if transposed else x).astype(np.dtype(dtype)))
    return out


def params_to_hf(params: Mapping, c: LlamaConfig, value_head: bool = False, dtype=np.float32) -> dict[str, np.ndarray]:
    """The inverse of :func:`params_from_hf`: ``{HF name: array in dtype}``; ``value_head=True``
    adds ``value_head.*``. ``params``: the variables ``{"params": ...}`` or the tree itself."""
    layout = {**causal_layout(c), **(value_head_layout(c) if value_head else {})}
    return _to_hf(params.get("params", params), layout, dtype)


def trunk_params_from_hf(tensors: Mapping[str, np.ndarray], c: LlamaConfig, param_dtype=jnp.float32) -> dict:
    """The trunk (``model.*``) with a zero value head, and the LM head when the tensors hold an
    untied one (a causal LM) but not required (a classifier's trunk): for a reward model, which
    reads values only. ``ValueError`` for a missing or misshapen trunk tensor."""
    layout = trunk_layout(c)
    head = causal_layout(c).get("lm_head.weight")
    if head is not None and "lm_head.weight" in tensors:
        layout["lm_head.weight"] = head
    _check(tensors, layout, f"{c.model_type} weights")
    tree = _tree(tensors, layout, param_dtype)
    tree["value_head"] = {"kernel": jnp.zeros((c.hidden_size, 1)), "bias": jnp.zeros((1,))}
    return {"params": tree}


def trunk_params_to_hf(params: Mapping, c: LlamaConfig, dtype=np.float32) -> dict[str, np.ndarray]:
    """The trunk's tensors (``model.*``) under HF names, in ``dtype``."""
    return _to_hf(params.get("params", params), trunk_layout(c), dtype)


def reward_params_from_hf(tensors: Mapping[str, np.ndarray], c: LlamaConfig, param_dtype=jnp.float32) -> dict:
    """HF ``*ForSequenceClassification`` tensors (one label: ``score.weight [1, D]``, no bias)
    -> trunk + value head (``kernel = score.weight.T``, ``bias = 0``); no LM head (call the
    model with ``heads="values"``). ``ValueError`` for a missing, misshapen or unknown tensor
    (``score.weight`` with more than one row is a multi-label classifier: refused)."""
    what = f"{c.model_type} reward-model weights"
    layout = {**trunk_layout(c), "score.weight": (("value_head", "kernel"), (1, c.hidden_size), True)}
    if "score.weight" not in tensors:
        raise ValueError(
            f"{what}: missing tensor 'score.weight' (a *ForSequenceClassification model with one label; "
            "a causal LM is read by load_pretrained)"
        )
    unknown = sorted(k for k in tensors if k not in layout and not _IGNORED.fullmatch(k))
    if unknown:
        raise ValueError(
            f"{what}: unexpected tensors {unknown[:5]} (a reward model holds model.* and score.weight "
            "[1, hidden_size] only)"
        )
    _check(tensors, layout, what)
    tree = _tree(tensors, layout, param_dtype)
    tree["value_head"]["bias"] = jnp.zeros((1,))
    return {"params": tree}


def reward_params_to_hf(params: Mapping, c: LlamaConfig, dtype=np.float32) -> dict[str, np.ndarray]:
    """The inverse of :func:`reward_params_from_hf`: trunk + ``score.weight [1, D]``;
    ``ValueError`` when the value head's bias is not 0 (HF's score head has none)."""
    tree = params.get("params", params)
    bias = np.asarray(tree["value_head"]["bias"])
    if np.any(bias != 0):
        raise ValueError(f"reward model: value_head bias {bias.tolist()} is not 0; HF's score head has no bias")
    layout = {**trunk_layout(c), "score.weight": (("value_head", "kernel"), (1, c.hidden_size), True)}
    return _to_hf(tree, layout, dtype)
