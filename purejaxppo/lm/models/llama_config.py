"""The configuration record of the Llama family (``llama``, ``mistral``, ``qwen2``, ``qwen3``)
read from and written back to a Hugging Face ``config.json`` dict, and the RoPE frequencies it
implies.

Both config styles are read: transformers 4.x (``rope_theta`` plus an optional ``rope_scaling``
dict) and 5.x (``rope_parameters`` holding ``rope_theta`` and the scaling). RoPE types
implemented: ``default``, ``linear`` and ``llama3`` (Llama 3.1/3.2's frequency scaling); any
other is refused by :func:`llama_config_from_hf` with the list.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Mapping, Optional

import numpy as np

#: the model types this record describes, with the ``architectures`` entry HF writes for each
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE frequency scaling: ``rope_type`` ``"linear"`` (every frequency divided by
    ``factor``) or ``"llama3"`` (low frequencies divided by ``factor``, high ones kept, a smooth
    blend between; the wavelength bounds come from ``original_max_position_embeddings``)."""

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    """One Llama-family architecture (the fields of its ``config.json`` that the model reads).
    Frozen and hashable: it is a field of the :class:`~purejaxppo.lm.models.llama.Llama` module.
    ``ValueError`` when ``num_attention_heads`` is not a multiple of ``num_key_value_heads``.

    Attributes:
      model_type: ``"llama"``, ``"mistral"``, ``"qwen2"`` or ``"qwen3"``.
      vocab_size: token embedding rows ``V``.
      hidden_size: the hidden width ``D``.
      intermediate_size: the SwiGLU MLP's width.
      num_hidden_layers: decoder layers.
      num_attention_heads: query heads ``H``.
      num_key_value_heads: key/value heads ``K`` (grouped-query attention; ``H % K == 0``).
      head_dim: per-head width; may differ from ``hidden_size // num_attention_heads`` (Qwen3).
      rms_norm_eps: the RMSNorms' epsilon.
      rope_theta: RoPE base.
      rope_scaling: a :class:`RopeScaling` (``linear`` or ``llama3``) or None.
      max_position_embeddings: the positions the model was trained for (VALID tokens per row).
      tie_word_embeddings: the LM head is ``embed_tokens`` transposed (no ``lm_head``).
      qkv_bias: q/k/v projections with a bias (Qwen2, or ``attention_bias``).
      o_bias: the output projection with a bias too (``attention_bias``).
      qk_norm: a per-head RMSNorm on queries and keys before RoPE (Qwen3).
      sliding_window: a query sees at most this many keys back (itself included), None for
        full attention (Mistral).
      extra: the source ``config.json``'s other keys (token ids, ...) as JSON text, written
        back unchanged; not compared.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[RopeScaling] = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sliding_window: Optional[int] = None
    extra: str = field(default="{}", compare=False)  # JSON text: hashable, as a Flax module's field must be

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{self.model_type} config: num_attention_heads={self.num_attention_heads} is not a "
                f"multiple of num_key_value_heads={self.num_key_value_heads}"
            )


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


_OWNED = {
    "model_type",
    "architectures",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "max_position_embeddings",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "sliding_window",
    "use_sliding_window",
    "hidden_act",
    "torch_dtype",
    "dtype",
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


def rope_inv_freq(cfg: LlamaConfig) -> np.ndarray:
    """``[head_dim // 2]`` float32 inverse frequencies ``theta^(-2i/head_dim)``, scaled as
    ``cfg.rope_scaling`` says (computed in float64; the transcription of transformers'
    ``_compute_default/linear/llama3_parameters``)."""
    d = cfg.head_dim
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    s = cfg.rope_scaling
    if s is not None and s.rope_type == "linear":
        inv = inv / s.factor
    elif s is not None and s.rope_type == "llama3":
        old = s.original_max_position_embeddings
        low_wavelen, high_wavelen = old / s.low_freq_factor, old / s.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / s.factor, inv)
        smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = np.where(medium, (1 - smooth) * scaled / s.factor + smooth * scaled, scaled)
    return inv.astype(np.float32)
