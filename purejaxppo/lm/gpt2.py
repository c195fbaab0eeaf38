"""GPT-2 (the architecture of Hugging Face's ``GPT2LMHeadModel``) with a value head, and its
weights in and out of HF's safetensors layout, from LOCAL files only (nothing is downloaded).

:class:`GPT2` has :class:`purejaxppo.lm.model.TinyLM`'s calling convention, so
``FlaxLM(GPT2(...))`` is a :class:`purejaxppo.lm.model.CausalLM` (KV-cached generation,
left-padded prompts, positions from the mask). Its parameter tree mirrors HF's names:
``wte``, ``wpe``, ``h_{i}/{ln_1, attn/{c_attn, c_proj}, ln_2, mlp/{c_fc, c_proj}}``, ``ln_f``,
plus ``value_head`` (not in HF files: :func:`save_gpt2` stores it as ``value_head.*``, which
:func:`load_gpt2` reads when present and ``transformers`` skips). HF's ``Conv1D`` weight is ``[in, out]``, the layout of a
Flax ``Dense`` kernel, so the mapping is a renaming, no transposes.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.attention import QUERY_BLOCK, attend, attention_mask, write_kv
from purejaxppo.lm.model import KVCache, cache_view, empty_kv_cache, positions_from_mask, value_head, written_cache
from purejaxppo.lm.hf_files import read_safetensors, write_safetensors

CONFIG_KEYS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "layer_norm_epsilon")
# HF's causal-mask buffers and the tied head (a copy of wte): in files, not parameters here
_IGNORED = re.compile(r"h\.\d+\.attn\.(masked_)?bias|lm_head\.weight")


class _Attention(nn.Module):
    n_head: int
    dtype: Any
    query_block: int = QUERY_BLOCK

    @nn.compact
    def __call__(self, x, attn_mask, kv=None, slot=0):
        """``x [B, L, D]``, ``attn_mask [B, L, S]``; ``kv = (k [B, H, S, hd], v [B, H, hd, S])``
        or None (then ``S == L``): the chunk's keys/values are written at ``slot`` first.
        ``-> (out, kv)``."""
        b, l, d = x.shape
        hd = d // self.n_head
        qkv = nn.Dense(3 * d, dtype=self.dtype, name="c_attn")(x).reshape(b, l, 3, self.n_head, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, L, H, hd]
        spec = "bkhd"
        if kv is not None:
            kv = write_kv(kv, k, v, slot)
            (k, v), spec = kv, "cache"
        out = attend(q, k, v, attn_mask, spec, self.query_block if kv is None else 0)  # float32 softmax
        return nn.Dense(d, dtype=self.dtype, name="c_proj")(out.reshape(b, l, d)), kv


class _MLP(nn.Module):
    dtype: Any

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        h = nn.Dense(4 * d, dtype=self.dtype, name="c_fc")(x)
        return nn.Dense(d, dtype=self.dtype, name="c_proj")(nn.gelu(h, approximate=True))  # HF "gelu_new"


class _Block(nn.Module):
    n_head: int
    eps: float
    dtype: Any
    query_block: int = QUERY_BLOCK

    @nn.compact
    def __call__(self, x, attn_mask, kv=None, slot=0):
        ln = lambda name: nn.LayerNorm(epsilon=self.eps, dtype=self.dtype, name=name)  # noqa: E731
        a, kv = _Attention(self.n_head, self.dtype, self.query_block, name="attn")(ln("ln_1")(x), attn_mask, kv, slot)
        x = x + a
        return x + _MLP(self.dtype, name="mlp")(ln("ln_2")(x)), kv


class GPT2(nn.Module):
    """GPT-2: token + learned position embeddings, ``n_layer`` pre-LayerNorm blocks (fused qkv
    with bias, tanh-GELU MLP of width ``4 * n_embd``), ``ln_f``, the LM head tied to ``wte``
    (``logits = h @ wte.T``) and a zero-initialised ``value_head`` on the final hidden state.
    ``dtype``: the compute dtype (parameters stay float32; softmax, logits, values float32).
    At most ``n_positions`` VALID tokens per row (padding takes no position)."""

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5
    dtype: Any = jnp.float32
    query_block: int = QUERY_BLOCK  # teacher-forced attention in blocks of this many queries (attention.attend)

    @nn.compact
    def __call__(
        self,
        tokens: jax.Array,
        valid: jax.Array,
        cache: KVCache | None = None,
        slot=0,
        heads: str = "both",
        logits_from: int = 0,
    ):
        """``tokens, valid [B, L] -> (logits [B, L, V], values [B, L])`` (float32); with a
        ``cache`` the chunk sits at slots ``slot..slot+L-1`` and the updated cache is returned
        third. ``heads`` (static): ``"logits"`` / ``"values"`` computes that head only (the
        other output is None). ``logits_from`` (static): logits of positions ``logits_from..L-1``
        only (``[B, L - logits_from, V]``). The contract of :class:`purejaxppo.lm.model.TinyLM`."""
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head}")
        valid = valid.astype(bool)
        start, key_valid = cache_view(valid, cache, slot)
        wte = nn.Embed(self.vocab_size, self.n_embd, dtype=self.dtype, name="wte")
        wpe = nn.Embed(self.n_positions, self.n_embd, dtype=self.dtype, name="wpe")
        x = wte(tokens) + wpe(positions_from_mask(valid, start))
        attn_mask = attention_mask(key_valid, slot, tokens.shape[1])
        ks, vs = [], []
        for i in range(self.n_layer):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            x, kv = _Block(self.n_head, self.layer_norm_epsilon, self.dtype, self.query_block, name=f"h_{i}")(
                x, attn_mask, kv, slot
            )
            if kv is not None:
                ks.append(kv[0])
                vs.append(kv[1])
        x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype, name="ln_f")(x)
        logits = values = None
        if heads in ("both", "logits"):
            # tied head, h @ wte.T: [B, L, D] x [V, D] -> [B, L, V], accumulated in float32
            w = wte.embedding.astype(self.dtype)
            logits = jnp.einsum("bld,vd->blv", x[:, logits_from:], w, preferred_element_type=jnp.float32)
        if heads in ("both", "values"):
            values = value_head(x, self.dtype)
        if cache is None:
            return logits, values
        return logits, values, written_cache(cache, ks, vs, key_valid, valid)

    def empty_cache(self, batch: int, max_len: int) -> KVCache:
        """A :class:`KVCache` of ``max_len`` slots holding nothing (in the compute dtype)."""
        return empty_kv_cache(batch, max_len, self.n_layer, self.n_head, self.n_embd // self.n_head, self.dtype)


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


def gpt2_from_config(config: Mapping, dtype=jnp.float32) -> GPT2:
    """A :class:`GPT2` from an HF ``config.json`` dict; ``ValueError`` for a missing key or an
    option this architecture does not implement (another activation, ``n_inner != 4 * n_embd``,
    untied embeddings, unscaled or layer-scaled attention)."""
    missing = [k for k in CONFIG_KEYS[:-1] if k not in config]
    if missing:
        raise ValueError(f"GPT-2 config lacks {missing} (needs {list(CONFIG_KEYS)})")
    unsupported = {
        "activation_function": "gelu_new",
        "n_inner": 4 * config["n_embd"],
        "tie_word_embeddings": True,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
    }
    for key, want in unsupported.items():
        if config.get(key) is not None and config[key] != want:
            raise ValueError(f"GPT-2 config {key}={config[key]!r} is not supported (only {want!r})")
    if config["n_embd"] % config["n_head"]:
        raise ValueError(f"GPT-2 config: n_embd={config['n_embd']} is not a multiple of n_head={config['n_head']}")
    return GPT2(**{k: config[k] for k in CONFIG_KEYS if k in config}, dtype=dtype)


def gpt2_config(module: GPT2) -> dict:
    """The HF ``config.json`` dict of ``module`` (loadable by ``transformers``' GPT2LMHeadModel)."""
    cfg = {k: getattr(module, k) for k in CONFIG_KEYS}
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        **cfg,
        "n_ctx": module.n_positions,
        "n_inner": None,
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
    }


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
    """``(GPT2 module, variables)`` from a LOCAL HF GPT-2: a folder holding ``config.json`` and
    ``model.safetensors``, or the ``.safetensors`` file itself (``config.json`` beside it).
    Nothing is downloaded. ``dtype``: the module's compute dtype (parameters are float32)."""
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
    """Write ``config.json`` and ``model.safetensors`` (HF layout, float32, metadata
    ``format=pt`` as transformers expects) into ``folder``; :func:`load_gpt2` reads them back.
    ``value_head``: also store ``value_head.*`` (a trained critic survives the round trip)."""
    tensors = gpt2_params_to_hf(params, value_head)
    _check(tensors, _module_layout(module), f"save_gpt2 (params do not fit {module})")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(gpt2_config(module), f, indent=2)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
