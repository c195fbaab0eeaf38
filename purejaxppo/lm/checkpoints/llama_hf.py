"""Llama's Hugging Face mapping: ``config.json`` <-> :class:`~purejaxppo.lm.models.llama_config.LlamaConfig`
(:func:`llama_config_from_hf`, :func:`llama_config_to_hf`; transformers 4.x's ``rope_theta`` plus
an optional ``rope_scaling`` dict and 5.x's ``rope_parameters`` are both read), and tensor names
<-> the parameter tree of :class:`purejaxppo.lm.models.llama.Llama`.

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

import json
import re
from dataclasses import fields
from typing import Mapping, Optional

import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.llama_config import ARCHITECTURES, ROPE_TYPES, LlamaConfig, RopeScaling


def _rope(config: Mapping) -> tuple[float, Optional[RopeScaling]]:
    """``(rope_theta, scaling)`` from either config style; ``ValueError`` naming the key for a
    type outside :data:`ROPE_TYPES` (``dynamic``, ``yarn``, ``longrope``, ... change the
    frequencies or the attention scale in ways not implemented here: refused, never ignored),
    for a scaling without a type, and for per-layer-type parameters."""
    key = "rope_parameters" if config.get("rope_parameters") else "rope_scaling"
    params = dict(config.get(key) or {})
    supported = f"supported: {', '.join(ROPE_TYPES)}"
    if any(isinstance(v, Mapping) for v in params.values()):
        raise ValueError(f"{key}: per-layer-type RoPE parameters ({sorted(params)}) are not supported ({supported})")
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type"))
    if kind is None and set(params) - {"rope_theta"}:
        raise ValueError(f"{key}: {params} names no rope_type ({supported})")
    kind = "default" if kind is None else kind
    if kind not in ROPE_TYPES:
        raise ValueError(f"{key}: rope_type {kind!r} is not supported ({supported})")
    if kind == "default":
        return theta, None
    keys = [f.name for f in fields(RopeScaling)][1:]
    return theta, RopeScaling(kind, **{k: params[k] for k in keys if k in params})


_OWNED = {  # the config.json keys LlamaConfig models (the rest is kept in its ``extra``)
    *("model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"),
    *("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling"),
    *("rope_parameters", "max_position_embeddings", "tie_word_embeddings", "attention_bias", "mlp_bias"),
    *("sliding_window", "use_sliding_window", "hidden_act", "torch_dtype", "dtype"),
}


def llama_config_from_hf(config: Mapping) -> LlamaConfig:
    """The record of a Hugging Face ``config.json`` (transformers 4.x or 5.x style).

    Args:
      config: the parsed ``config.json`` of model_type llama, mistral, qwen2 or qwen3.

    Returns:
      The :class:`LlamaConfig`; keys it does not model are kept in ``extra``.

    Raises:
      ValueError: another model_type, a missing key (``vocab_size``, ``hidden_size``,
        ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``), or an option
        not implemented (an activation other than SiLU, ``mlp_bias``, a RoPE type outside
        :data:`ROPE_TYPES`, per-layer RoPE parameters, Qwen's ``use_sliding_window``); the
        message names the key.
    """
    kind = config.get("model_type")
    if kind not in ARCHITECTURES:
        raise ValueError(f"model_type {kind!r} is not of the Llama family ({', '.join(ARCHITECTURES)})")
    need = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    missing = [k for k in need if k not in config]
    if missing:
        raise ValueError(f"{kind} config lacks {missing}")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{kind} config: hidden_act={config['hidden_act']!r} is not supported (only 'silu')")
    if config.get("mlp_bias"):
        raise ValueError(f"{kind} config: mlp_bias=true is not supported")
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or (128 if kind == "qwen3" else config["hidden_size"] // heads)
    theta, scaling = _rope(config)
    # attention_bias: q/k/v/o biases in Llama and Qwen3; Qwen2 always has q/k/v biases (no o bias), Mistral none
    bias = bool(config.get("attention_bias", False)) and kind in ("llama", "qwen3")
    if kind in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        raise ValueError(f"{kind} config: use_sliding_window=true is not supported (per-layer windows)")
    window = config.get("sliding_window") if kind == "mistral" else None  # the others ignore the key
    return LlamaConfig(
        model_type=kind,
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bias or kind == "qwen2",
        o_bias=bias,
        qk_norm=kind == "qwen3",
        sliding_window=window,
        extra=json.dumps({k: v for k, v in config.items() if k not in _OWNED}, sort_keys=True),
    )


def llama_config_to_hf(cfg: LlamaConfig, dtype: str = "float32") -> dict:
    """The Hugging Face ``config.json`` of ``cfg``: the inverse of :func:`llama_config_from_hf`.

    Args:
      cfg: the architecture.
      dtype: the stored weights' dtype name, written as ``torch_dtype``.

    Returns:
      A JSON-serialisable dict in transformers 4.x style (``rope_theta`` + ``rope_scaling``,
      which 5.x reads too), with ``architectures`` and ``cfg.extra``'s keys.
    """
    out = json.loads(cfg.extra)
    out.update(
        model_type=cfg.model_type,
        architectures=[ARCHITECTURES[cfg.model_type]],
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings,
        hidden_act="silu",
        torch_dtype=dtype,
    )
    out["rope_scaling"] = (
        None
        if cfg.rope_scaling is None
        else {
            "rope_type": cfg.rope_scaling.rope_type,
            **{f.name: getattr(cfg.rope_scaling, f.name) for f in fields(RopeScaling)[1:]},
        }
    )
    if cfg.model_type != "qwen2":
        out["attention_bias"] = cfg.o_bias
    if cfg.model_type in ("qwen2", "qwen3"):
        out["use_sliding_window"] = False
    if cfg.model_type == "mistral":
        out["sliding_window"] = cfg.sliding_window
    return out


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
