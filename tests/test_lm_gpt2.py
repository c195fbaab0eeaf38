"""GPT-2 from HF-layout safetensors (purejaxppo/lm/models/gpt2.py, purejaxppo/lm/checkpoints/hf_folder.py).

* The forward pass against a plain NumPy GPT-2 written here from the HF weight dict (float64):
  logits and the value head, unpadded and left-padded (padding changes no valid position).
* safetensors (read and written with the ``safetensors`` package) against bytes laid out by hand
  from the format's description (every dtype, BF16 bit patterns), round trips, and clear errors
  for truncated or corrupt files.
* HF tensors -> file -> ``load_gpt2`` -> ``gpt2_params_to_hf`` gives them back; a missing,
  misshapen or unknown tensor, or an unsupported config, is a clear error.
* Attention in query blocks (``query_block``) against the same NumPy GPT-2.
* KV-cached decoding (``FlaxLM(GPT2)``) against ``FullRecompute`` through ``sample_response``
  on ragged left-padded prompts (as tests/test_lm_model.py does for TinyLM).
* ``transformers``' GPT2LMHeadModel on the same files (ragged left padding given as its attention mask
  and position ids), when torch and transformers are installed.
* bf16 compute stays near float32 with float32 parameters.
"""

import json
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.checkpoints.gpt2_hf import gpt2_params_from_hf, gpt2_params_to_hf, load_gpt2, save_gpt2
from purejaxppo.lm.models.adapters import FlaxLM, FullRecompute
from purejaxppo.lm.checkpoints.hf_folder import read_safetensors, write_safetensors
from purejaxppo.lm.models.sampling import sample_response

CFG = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2, layer_norm_epsilon=1e-5)
V, D, NL, NH = CFG["vocab_size"], CFG["n_embd"], CFG["n_layer"], CFG["n_head"]
B, L = 4, 9
# float32 against a float64 reference: measured at most 4.4e-6 apart on logits up to ~6 in size
# (x86 CPU), within atol + rtol * |ref| here; exact GELU instead of tanh-GELU, or flax's default
# LayerNorm epsilon (1e-6) instead of the config's, fails it.
TOL = 1e-5


def hf_weights(seed=0) -> dict:
    """Random float32 tensors under HF GPT-2 names (listed here by hand, not from the module).
    Std 0.3 (not GPT-2's 0.02) so every part moves the logits well above TOL."""
    rng = np.random.default_rng(seed)
    shapes = {"wte.weight": (V, D), "wpe.weight": (CFG["n_positions"], D), "ln_f.weight": (D,), "ln_f.bias": (D,)}
    for i in range(NL):
        for ln in ("ln_1", "ln_2"):
            shapes |= {f"h.{i}.{ln}.weight": (D,), f"h.{i}.{ln}.bias": (D,)}
        for name, (a, b) in {
            "attn.c_attn": (D, 3 * D),
            "attn.c_proj": (D, D),
            "mlp.c_fc": (D, 4 * D),
            "mlp.c_proj": (4 * D, D),
        }.items():
            shapes |= {f"h.{i}.{name}.weight": (a, b), f"h.{i}.{name}.bias": (b,)}
    return {
        k: (
            (k.endswith("ln_1.weight") or k.endswith("ln_2.weight") or k == "ln_f.weight")
            + rng.normal(0, 0.3 if len(s) == 2 else 0.1, s)
        ).astype(np.float32)
        for k, s in shapes.items()
    }


def np_gpt2(w: dict, tokens: np.ndarray, eps=1e-5):
    """Plain NumPy GPT-2 (float64) on one unpadded row ``tokens [L]`` -> (logits [L, V],
    final hidden state [L, D])."""
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def ln(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def gelu_new(x):  # HF "gelu_new": the tanh approximation
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    n, hd = len(tokens), D // NH
    x = w["wte.weight"][tokens] + w["wpe.weight"][:n]
    for i in range(NL):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (a.reshape(n, NH, hd).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        s = np.where(np.tril(np.ones((n, n), bool)), q @ k.transpose(0, 2, 1) / np.sqrt(hd), -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        o = ((a / a.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, D)
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = gelu_new(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = ln(x, "ln_f")
    return h @ w["wte.weight"].T, h


@pytest.fixture(scope="module")
def model():
    w = hf_weights()
    module = GPT2(**CFG)
    return module, w, gpt2_params_from_hf(w, CFG)


@pytest.fixture(scope="module")
def forward(model):
    module = model[0]
    return jax.jit(lambda p, t, v: FlaxLM(module).forward(p, t, v))


def _batch(lens, seed=3):
    """Left-padded ``[B, L]`` tokens (padding holds random tokens too: it must be ignored)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, (len(lens), L))
    return tokens, np.arange(L)[None] >= (L - np.asarray(lens))[:, None]


def test_logits_and_values_equal_a_numpy_gpt2(model, forward):
    module, w, params = model
    vh = np.random.default_rng(4).normal(0, 0.5, (D, 1)).astype(np.float32)
    params = {"params": {**params["params"], "value_head": {"kernel": jnp.asarray(vh), "bias": jnp.array([0.3])}}}
    tokens, valid = _batch([L] * B)
    logits, values = forward(params, tokens, valid)
    assert logits.dtype == values.dtype == jnp.float32 and values.shape == (B, L)
    for r in range(B):
        ref, h = np_gpt2(w, tokens[r])
        np.testing.assert_allclose(logits[r], ref, atol=TOL, rtol=TOL)
        np.testing.assert_allclose(values[r], h @ vh[:, 0] + 0.3, atol=TOL, rtol=TOL)  # on the final ln_f state
    np.testing.assert_allclose(FlaxLM(module).values(params, tokens, valid), values, atol=TOL)  # heads="values"
    assert float(np.abs(forward(model[2], tokens, valid)[1]).max()) == 0.0  # loaded: value head at its zero init


def test_left_padding_leaves_valid_positions_unchanged(model, forward):
    _, w, params = model
    lens = [L, 1, 5, 3]
    tokens, valid = _batch(lens, seed=5)
    logits = np.asarray(forward(params, tokens, valid)[0])
    for r, n in enumerate(lens):
        np.testing.assert_allclose(logits[r, L - n :], np_gpt2(w, tokens[r, L - n :])[0], atol=TOL, rtol=TOL)


def test_query_blocks_equal_a_numpy_gpt2(model):
    """Teacher-forced attention in blocks of queries (``query_block``, ``attention.attend``): each
    block reads only the keys up to its end; the logits stay the reference's, left padding too."""
    module, w, params = model
    lens = [L, 1, 5, 3]
    tokens, valid = _batch(lens, seed=6)
    for qb in (1, 4, 8):  # 9 queries: 9, 3 and 2 blocks (a short last block)
        logits = np.asarray(jax.jit(FlaxLM(module.clone(query_block=qb)).logits)(params, tokens, valid))
        for r, n in enumerate(lens):
            np.testing.assert_allclose(
                logits[r, L - n :],
                np_gpt2(w, tokens[r, L - n :])[0],
                atol=TOL,
                rtol=TOL,
                err_msg=f"query_block={qb}, row {r}",
            )


# --- safetensors (the package, through purejaxppo.lm.checkpoints.hf_folder) ------------------------------------------
def _hand_file(path, entries, data: bytes, pad=0):
    header = json.dumps(entries).encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_safetensors_reads_bytes_laid_out_by_hand(tmp_path):
    parts = [
        ("a", "F32", [2, 3], np.arange(6, dtype="<f4").tobytes()),
        ("b", "BF16", [3], np.array([0x3F80, 0xC000, 0x4049], "<u2").tobytes()),  # 1, -2, 3.140625
        ("c", "I64", [2], np.array([-1, 2**40], "<i8").tobytes()),
        ("d", "F16", [2], np.array([0.5, -1.5], "<f2").tobytes()),
        ("e", "I32", [1, 1], np.array([-7], "<i4").tobytes()),
    ]
    entries, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, raw in parts:
        entries[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    _hand_file(tmp_path / "x.safetensors", entries, b"".join(p[3] for p in parts), pad=5)
    got = read_safetensors(tmp_path / "x.safetensors")
    np.testing.assert_array_equal(got["a"], np.arange(6).reshape(2, 3))
    # BF16 stays bf16 (no widening), bit for bit
    assert got["b"].dtype.name == "bfloat16" and got["b"].astype(np.float32).tolist() == [1.0, -2.0, 3.140625]
    assert got["c"].tolist() == [-1, 2**40] and got["d"].tolist() == [0.5, -1.5] and got["e"].tolist() == [[-7]]
    assert set(got) == set("abcde")


def test_safetensors_round_trip(tmp_path):
    from safetensors import safe_open

    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.normal(size=(3, 4)).astype(np.float32),
        "f16": rng.normal(size=5).astype(np.float16),
        "f64": rng.normal(size=(2, 1, 2)),
        "i64": rng.integers(-9, 9, 4),
        "i32": np.int32([1, -2]),
        "u8": np.uint8([0, 255]),
        "bool": np.array([True, False]),
        "scalar": np.float32(2.5),
        "big_endian": np.arange(3, dtype=">f4"),
        "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T,
        "bf16": np.asarray(jnp.array([1.0, -0.3, 1e30], jnp.bfloat16)),
    }
    write_safetensors(tmp_path / "t.safetensors", tensors)
    got = read_safetensors(tmp_path / "t.safetensors")
    with safe_open(str(tmp_path / "t.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}  # what transformers expects
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert got[k].shape == np.shape(v) and got[k].dtype == np.asarray(v).dtype.newbyteorder("="), k
        np.testing.assert_array_equal(got[k], v)
    assert got["bf16"].view(np.uint16).tolist() == tensors["bf16"].view(np.uint16).tolist()


def test_safetensors_bad_files_are_clear_errors(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"w": np.ones((4, 4), np.float32)})
    raw = path.read_bytes()
    for content in (raw[:-1], raw[:20], raw[:5], raw[:8] + b"{" * (len(raw) - 8)):
        path.write_bytes(content)
        with pytest.raises(ValueError, match="t.safetensors is not a readable safetensors file"):
            read_safetensors(path)
    _hand_file(path, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, bytes(16))
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        read_safetensors(path)
    with pytest.raises(ValueError, match="nothing is downloaded"):
        read_safetensors(tmp_path / "nowhere.safetensors")


# --- HF layout -----------------------------------------------------------------------------------
def _write_hf(folder, tensors, config=CFG):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", **config}))
    write_safetensors(folder / "model.safetensors", tensors)


def test_hf_file_round_trip(tmp_path):
    w = hf_weights(seed=1)
    # as GPT2LMHeadModel saves: a "transformer." prefix, mask buffers and the tied lm_head copy
    causal = np.tril(np.ones((1, 1, 16, 16), bool))
    on_disk = {f"transformer.{k}": v for k, v in w.items()} | {"lm_head.weight": w["wte.weight"]}
    on_disk |= {f"transformer.h.{i}.attn.bias": causal for i in range(NL)}
    on_disk["transformer.h.0.attn.masked_bias"] = np.float32(-1e4)
    _write_hf(tmp_path / "m", on_disk)
    for path in (tmp_path / "m", tmp_path / "m" / "model.safetensors"):  # a folder or the file
        module, params = load_gpt2(path)
        assert module == GPT2(**CFG)
        back = gpt2_params_to_hf(params)
        assert set(back) == set(w)
        for k in w:
            np.testing.assert_array_equal(back[k], w[k], err_msg=k)
    # save_gpt2 writes what load_gpt2 reads, a trained value head included
    params["params"]["value_head"] = {"kernel": jnp.full((D, 1), 0.5), "bias": jnp.array([2.0])}
    save_gpt2(tmp_path / "out", module, params)
    module2, params2 = load_gpt2(tmp_path / "out")
    assert module2 == module
    jax.tree_util.tree_map(np.testing.assert_array_equal, params2, params)


def test_wrong_files_are_clear_errors(tmp_path):
    w = hf_weights()
    cases = {
        "missing": (
            {k: v for k, v in w.items() if k != "h.1.mlp.c_fc.bias"},
            CFG,
            r"missing tensor 'h.1.mlp.c_fc.bias' \(expected shape \(128,\)\)",
        ),
        "shape": (
            w | {"wpe.weight": w["wpe.weight"][:8]},
            CFG,
            r"'wpe.weight' has shape \(8, 32\), expected \(16, 32\)",
        ),
        "layers": (w, CFG | {"n_layer": 1}, r"unexpected tensors \['h.1.attn.c_attn.bias'"),
        "untied": (w | {"lm_head.weight": w["wte.weight"] + 1}, CFG, "lm_head.weight differs"),
        "activation": (w, CFG | {"activation_function": "relu"}, "activation_function='relu' is not supported"),
        "config": (w, {k: v for k, v in CFG.items() if k != "n_head"}, r"lacks \['n_head'\]"),
    }
    for name, (tensors, config, message) in cases.items():
        _write_hf(tmp_path / name, tensors, config)
        with pytest.raises(ValueError, match=message):
            load_gpt2(tmp_path / name)
    _write_hf(tmp_path / "truncated", w)
    file = tmp_path / "truncated" / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        load_gpt2(tmp_path / "truncated")
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_gpt2(tmp_path / "nowhere")


# --- KV-cached decoding ---------------------------------------------------------------------------
P, T = 6, 10  # P + T == n_positions: the longest row uses every position


@pytest.mark.slow
def test_kv_cache_decoding_equals_full_recompute(model):
    """Tolerance TOL as in tests/test_lm_model.py (two programs, other shapes and reduction
    orders): measured 2.9e-6 apart at most over every step, logits up to ~6 (x86 CPU)."""
    module, _, params = model
    lens = np.array([1, 6, 3, 2, 5])
    valid = np.arange(P)[None] >= (P - lens)[:, None]
    prompt = jnp.asarray(np.where(valid, np.random.default_rng(2).integers(1, V, (5, P)), 0))
    impls = {"cached": FlaxLM(module), "full": FullRecompute(lambda p, t, v: module.apply(p, t, v, heads="logits")[0])}
    run = {
        k: jax.jit(lambda key, p, m=m: sample_response(m, p, key, prompt, valid, T, jnp.array([7]), 0))
        for k, m in impls.items()
    }
    toks_c, logp_c, mask_c = run["cached"](jax.random.PRNGKey(7), params)
    toks_f, logp_f, mask_f = run["full"](jax.random.PRNGKey(7), params)
    np.testing.assert_array_equal(toks_c, toks_f)
    np.testing.assert_array_equal(mask_c, mask_f)
    np.testing.assert_allclose(logp_c, logp_f, atol=TOL)
    assert len({tuple(r) for r in np.asarray(toks_c)}) > 1 and 0 < int((~np.asarray(mask_c)).any(1).sum()) < 5
    # step by step, teacher-forced on random tokens: every decode's logits, then the contract
    # that the last one is the teacher-forced pass's last position
    resp = jax.random.randint(jax.random.PRNGKey(5), (5, T), 1, V)
    (lc, cc), (lf, cf) = (jax.jit(m.prefill, static_argnums=3)(params, prompt, valid, P + T) for m in impls.values())
    assert [k.shape for k in cc.k] == [(5, NH, P + T, D // NH)] * NL
    dec_c, dec_f = jax.jit(impls["cached"].decode), jax.jit(impls["full"].decode)
    for t in range(T):
        np.testing.assert_allclose(lc, lf, atol=TOL, err_msg=f"step {t}")
        lc, cc = dec_c(params, cc, resp[:, t], P + t)
        lf, cf = dec_f(params, cf, resp[:, t], P + t)
    np.testing.assert_allclose(lc, lf, atol=TOL)
    seq, seq_valid = jnp.concatenate([prompt, resp], 1), jnp.concatenate([valid, jnp.ones((5, T), bool)], 1)
    np.testing.assert_allclose(lc, jax.jit(impls["cached"].logits)(params, seq, seq_valid)[:, -1], atol=TOL)


# --- other implementations and precisions -----------------------------------------------------------
def test_transformers_gpt2_gives_the_same_logits(tmp_path, model):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    module, w, params = model
    save_gpt2(tmp_path / "m", module, params, value_head=False)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "m"), local_files_only=True).eval()
    # ragged left padding: transformers is told it by its attention mask and position ids
    # (positions count from each row's first valid token); pad slots' logits are nobody's
    tokens, valid = _batch([L, 5, 1, 7])
    positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
    with torch.no_grad():
        ref = hf(
            torch.tensor(tokens),
            attention_mask=torch.tensor(valid.astype(np.int64)),
            position_ids=torch.tensor(positions),
        ).logits.numpy()
    got = np.asarray(FlaxLM(module).logits(params, tokens, valid))
    np.testing.assert_allclose(got[valid], ref[valid], atol=1e-4, rtol=1e-4)


def _dots(jaxpr):
    """Every ``dot_general`` equation of a jaxpr, nested jaxprs (jit, custom calls) included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _dots(inner)


def test_bf16_compute_stays_near_float32(model, forward):
    module, _, params = model
    bf = GPT2(**CFG, dtype=jnp.bfloat16)
    tokens, valid = _batch([L, 4, 7, 2], seed=6)
    shapes = jax.eval_shape(bf.init, jax.random.PRNGKey(0), tokens, valid)
    assert {x.dtype for x in jax.tree_util.tree_leaves(shapes)} == {jnp.dtype(jnp.float32)}  # params stay float32
    logits_fn = lambda p, t, v: FlaxLM(bf).logits(p, t, v)  # noqa: E731
    # the compute really is bf16: every matmul (6 a block, plus the tied head) takes bf16 operands,
    # and the attention scores and the logits come out of theirs in float32
    dots = list(_dots(jax.make_jaxpr(logits_fn)(params, tokens, valid).jaxpr))
    assert len(dots) == 6 * NL + 1
    assert all(str(x.aval.dtype) == "bfloat16" for e in dots for x in e.invars), [e.invars for e in dots]
    assert sum(str(e.outvars[0].aval.dtype) == "float32" for e in dots) == NL + 1
    ref = np.asarray(forward(params, tokens, valid)[0])
    got = jax.jit(logits_fn)(params, tokens, valid)
    assert got.dtype == jnp.float32
    err = np.abs(np.asarray(got) - ref)[valid]
    # bf16 keeps 8 mantissa bits (relative rounding 2^-9 ~ 2e-3 per value); these random weights
    # (std 0.3) grow the residual stream through 2 blocks to logits of size up to ~6, so the
    # errors add up: measured 0.13 at most, 0.016 on average (x86 CPU). Bounds 0.5 / 0.05 leave
    # ~4x / ~3x; the float32 path is 4e-6 from float64, so the gap is bf16's alone.
    assert err.max() < 0.5 and err.mean() < 0.05, (err.max(), err.mean())


def test_a_gpt2_reward_model_reads_its_score_head_as_the_value_head(tmp_path, model):
    """``GPT2ForSequenceClassification`` tensors (``transformer.*`` + ``score.weight [1, D]``):
    the values are the NumPy GPT-2's final hidden state times the score row; written back as is."""
    from purejaxppo.lm.checkpoints.pretrained import load_sequence_classifier, save_sequence_classifier

    _, w, _ = model
    score = np.random.default_rng(9).normal(0, 0.5, (1, D)).astype(np.float32)
    _write_hf(tmp_path / "rm", {f"transformer.{k}": v for k, v in w.items()} | {"score.weight": score})
    lm, params = load_sequence_classifier(tmp_path / "rm")
    lens = [L, 1, 5, 3]
    tokens, valid = _batch(lens, seed=8)
    values = np.asarray(lm.values(params, tokens, valid))
    for r, n in enumerate(lens):
        np.testing.assert_allclose(values[r, L - n :], np_gpt2(w, tokens[r, L - n :])[1] @ score[0], atol=TOL, rtol=TOL)
    save_sequence_classifier(tmp_path / "back", lm, params)
    jax.tree_util.tree_map(np.testing.assert_array_equal, load_sequence_classifier(tmp_path / "back")[1], params)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == [
        "GPT2ForSequenceClassification"
    ]
    _write_hf(tmp_path / "two", {**w, "score.weight": np.zeros((2, D), np.float32)})
    with pytest.raises(ValueError, match=r"need score.weight of shape \(1, 32\) \(one label\), got \(2, 32\)"):
        load_sequence_classifier(tmp_path / "two")
