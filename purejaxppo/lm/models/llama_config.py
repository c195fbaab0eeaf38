"""The configuration record of the Llama family (``llama``, ``mistral``, ``qwen2``, ``qwen3``)
and the RoPE frequencies it implies. Its Hugging Face ``config.json`` mapping (read and write) is
:mod:`purejaxppo.lm.checkpoints.llama_hf`'s.

RoPE types implemented: ``default``, ``linear`` and ``llama3`` (Llama 3.1/3.2's frequency
scaling); any other is refused when a config is read, with the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

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
