"""Independent references for the Llama-family tests: tiny HF ``config.json`` dicts of each
family, random weights under HF's tensor names (listed here by hand, not from the package's
layout), and a plain NumPy forward pass (float64) written from transformers' modeling files
(``modeling_llama`` / ``mistral`` / ``qwen2`` / ``qwen3`` and ``modeling_rope_utils``)."""

import json
import math

import numpy as np
from safetensors.numpy import save_file

BASE = dict(
    vocab_size=61,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    rms_norm_eps=1e-5,
    max_position_embeddings=64,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
)
#: one config per family, each exercising what sets the family apart
CONFIGS = {
    # Llama 3.1-style frequency scaling (4.x style), GQA 4/2, untied head
    "llama": BASE
    | dict(
        model_type="llama",
        num_key_value_heads=2,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=1024,
        ),
    ),
    # one KV head (MQA), a sliding window shorter than the rows
    "mistral": BASE
    | dict(
        model_type="mistral", num_key_value_heads=1, rope_theta=10000.0, sliding_window=4, tie_word_embeddings=False
    ),
    # q/k/v bias, a tied head, the 5.x config style (rope_parameters)
    "qwen2": BASE
    | dict(
        model_type="qwen2",
        num_key_value_heads=2,
        tie_word_embeddings=True,
        use_sliding_window=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000.0),
    ),
    # per-head q/k RMSNorm, head_dim 16 != 32 / 4, tied
    "qwen3": BASE
    | dict(
        model_type="qwen3",
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        attention_bias=False,
        use_sliding_window=False,
    ),
}
#: Llama with ``attention_bias``: biases on q, k, v and o
LLAMA_BIAS = dict(CONFIGS["llama"], attention_bias=True, tie_word_embeddings=True)


def head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def hf_weights(cfg: dict, seed: int = 0, dtype=np.float32) -> dict:
    """Random tensors under HF's ``*ForCausalLM`` names. Matrices std 0.2 (not 0.02) and norm
    scales ``1 + N(0, 0.1)`` so every part moves the logits well above the tolerance."""
    rng = np.random.default_rng(seed)
    d, hd, f = cfg["hidden_size"], head_dim(cfg), cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    o_bias = cfg["model_type"] in ("llama", "qwen3") and cfg.get("attention_bias", False)  # Llama/Qwen3: o_proj too
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], d), "model.norm.weight": (d,)}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        }
        if bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.bias": (kv,),
            }
        if o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (d,)
        if cfg["model_type"] == "qwen3":
            shapes |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
    out = {}
    for k, s in shapes.items():
        norm = k.endswith("norm.weight")
        out[k] = ((1.0 if norm else 0.0) + rng.normal(0, 0.1 if norm or len(s) == 1 else 0.2, s)).astype(dtype)
    return out


def inv_freq(cfg: dict) -> np.ndarray:
    """transformers' ``_compute_default_rope_parameters`` / ``_compute_llama3_parameters`` /
    linear, transcribed (float64), from either config style."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    base = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    dim = head_dim(cfg)
    inv = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "linear":
        return inv / rope["factor"]
    if kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        inv_llama = np.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return np.where(is_medium, smoothed, inv_llama)
    assert kind == "default", kind
    return inv


def np_llama(w: dict, cfg: dict, tokens: np.ndarray):
    """One unpadded row ``tokens [n]`` -> ``(logits [n, V], final hidden [n, D])``, float64."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    eps, hd = cfg["rms_norm_eps"], head_dim(cfg)
    h_q, h_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None

    def rms(x, weight):
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def linear(x, name):
        return x @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)

    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    n = len(tokens)
    freqs = np.arange(n)[:, None] * inv_freq(cfg)[None]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]  # [n, 1, hd]
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = linear(h, p + "self_attn.q_proj").reshape(n, h_q, hd)
        k = linear(h, p + "self_attn.k_proj").reshape(n, h_kv, hd)
        v = linear(h, p + "self_attn.v_proj").reshape(n, h_kv, hd)
        if cfg["model_type"] == "qwen3":
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        out = np.zeros((n, h_q, hd))
        for head in range(h_q):
            g = head // (h_q // h_kv)  # repeat_kv
            for t in range(n):
                keys = [j for j in range(t + 1) if window is None or j > t - window]
                s = np.array([q[t, head] @ k[j, g] for j in keys]) / math.sqrt(hd)
                a = np.exp(s - s.max())
                out[t, head] = (a / a.sum()) @ v[keys, g]
        x = x + linear(out.reshape(n, h_q * hd), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = linear(h, p + "mlp.gate_proj")
        x = x + linear(gate / (1 + np.exp(-gate)) * linear(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    h = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T, h


def write_checkpoint(folder, cfg, tensors):
    """An HF folder written with the safetensors package itself (not the code under test)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
