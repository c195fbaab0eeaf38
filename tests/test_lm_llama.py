"""The Llama family (purejaxppo/lm/models/llama.py, llama_config.py, llama_hf.py, hf_files.py,
pretrained.py) against independent references (tests/_llama_reference.py: a NumPy forward
written from transformers' modeling files, HF tensor names listed by hand).

* Per family (llama with llama3 RoPE scaling, mistral with a sliding window and one KV head,
  qwen2 with q/k/v bias and a tied head in the 5.x config style, qwen3 with q/k norms and
  ``head_dim != hidden / heads``): ``model.logits`` on ragged LEFT-padded rows equals the NumPy
  forward at every valid position; KV-cached decoding equals the full recompute.
* RoPE frequencies: llama3 scaling against a hand-computed case and the transcription; linear.
* Files: checkpoints written with the ``safetensors`` package directly; sharded index; bf16
  stored weights (exact into float32 or bf16 parameters); errors name what is supported.
* Export: ``save_pretrained`` writes the tensors the checkpoint was made of (HF names, bit for
  bit) and ``load_pretrained`` reads them back exactly; bf16 export; tokenizer files copied.
* Reward models (``*ForSequenceClassification``): the score row is the value head.
* bf16 parameters and compute: bf16 matmul operands, float32 logits, near the float32 model.

With RoPE, a constant shift of a row's positions changes no logit (only relative positions
enter the scores), so the left-padding checks guard the mask and the cache's count rather than
the offset itself; transformers' own position ids are checked in test_lm_llama_transformers.py.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from _llama_reference import CONFIGS, LLAMA_BIAS, hf_weights, inv_freq, np_llama, write_checkpoint
from purejaxppo.lm.models.llama import Llama
from purejaxppo.lm.checkpoints.llama_hf import llama_config_from_hf
from purejaxppo.lm.models.llama_config import rope_inv_freq
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError, load_pretrained

B, L = 4, 9
LENS = [9, 1, 5, 3]
# float32 against float64: measured at most 2.6e-6 apart on logits up to ~5 (x86 CPU, AVX2 and SSE4.2; with
# matrices of std 0.3 one qwen2 logit drifted 1.6e-5: float32 rounding through the residual stream); the
# check is atol + rtol * |ref|.
TOL = 1e-5


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def family(request, tmp_path_factory):
    name = request.param
    cfg, w = CONFIGS[name], hf_weights(CONFIGS[name], seed=1)
    folder = write_checkpoint(tmp_path_factory.mktemp(name) / "m", cfg, w)
    model, params = load_pretrained(folder)
    return name, cfg, w, model, params


def batch(lens, vocab, seed=3):
    """Left-padded ``[B, L]`` tokens (padding holds random tokens too: it must be ignored)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (len(lens), L))
    return tokens, np.arange(L)[None] >= (L - np.asarray(lens))[:, None]


def test_logits_equal_a_numpy_forward_on_left_padded_rows(family):
    name, cfg, w, model, params = family
    assert isinstance(model.model, Llama) and model.model.config.model_type == name
    tokens, valid = batch(LENS, cfg["vocab_size"])
    logits, values = jax.jit(model.forward)(params, tokens, valid)
    assert logits.dtype == values.dtype == jnp.float32 and logits.shape == (B, L, cfg["vocab_size"])
    assert float(jnp.abs(values).max()) == 0.0  # no value head stored: zero init
    for r, n in enumerate(LENS):
        ref, _ = np_llama(w, cfg, tokens[r, L - n :])
        np.testing.assert_allclose(np.asarray(logits[r, L - n :]), ref, atol=TOL, rtol=TOL, err_msg=f"{name} row {r}")


def test_llama_attention_bias_and_a_tied_head(tmp_path):
    w = hf_weights(LLAMA_BIAS, seed=3)
    assert "model.layers.0.self_attn.o_proj.bias" in w and "lm_head.weight" not in w
    model, params = load_pretrained(write_checkpoint(tmp_path / "m", LLAMA_BIAS, w))
    tokens, valid = batch(LENS, LLAMA_BIAS["vocab_size"], seed=2)
    logits = np.asarray(jax.jit(model.logits)(params, tokens, valid))
    for r, n in enumerate(LENS):
        np.testing.assert_allclose(
            logits[r, L - n :], np_llama(w, LLAMA_BIAS, tokens[r, L - n :])[0], atol=TOL, rtol=TOL
        )


def test_query_blocks_and_the_value_head(family):
    """Blocked teacher-forced attention gives the same logits; a stored value head reads the
    final normed hidden state (``value_head.*`` in the file)."""
    name, cfg, w, model, params = family
    tokens, valid = batch(LENS, cfg["vocab_size"], seed=4)
    blocked = type(model)(model.model.clone(query_block=4))
    logits = np.asarray(jax.jit(blocked.logits)(params, tokens, valid))
    vh = np.random.default_rng(5).normal(0, 0.5, (cfg["hidden_size"], 1)).astype(np.float32)
    with_head = {"params": {**params["params"], "value_head": {"kernel": jnp.asarray(vh), "bias": jnp.array([0.3])}}}
    values = np.asarray(jax.jit(model.values)(with_head, tokens, valid))
    for r, n in enumerate(LENS):
        ref, h = np_llama(w, cfg, tokens[r, L - n :])
        np.testing.assert_allclose(logits[r, L - n :], ref, atol=TOL, rtol=TOL)
        np.testing.assert_allclose(values[r, L - n :], h @ vh[:, 0] + 0.3, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("laid_out", [False, True], ids=["stored", "decode_params"])
def test_cached_decoding_equals_full_recompute(family, laid_out):
    """prefill + decode (the cache holds the KV heads only) against the teacher-forced pass of
    the whole sequence, at every step, on ragged left-padded prompts; with the stored weights
    and with what the sampler hands them (``decode_params``: the kernels transposed)."""
    name, cfg, _, model, params = family
    decode_params = model.decode_params(params) if laid_out else params
    if laid_out:
        assert "kernel_t" in decode_params["params"]["layers_0"]["mlp"]["down_proj"]
    p, t = 6, 5
    lens = np.array([6, 1, 3, 4])
    valid = np.arange(p)[None] >= (p - lens)[:, None]
    prompt = np.where(valid, np.random.default_rng(2).integers(1, cfg["vocab_size"], (4, p)), 0)
    resp = np.random.default_rng(6).integers(1, cfg["vocab_size"], (4, t))
    logits, cache = jax.jit(model.prefill, static_argnums=3)(decode_params, prompt, valid, p + t)
    kv_heads, hd = cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert [k.shape for k in cache.k] == [(4, kv_heads, p + t, hd)] * cfg["num_hidden_layers"]
    assert [v.shape for v in cache.v] == [(4, kv_heads, hd, p + t)] * cfg["num_hidden_layers"]
    full = jax.jit(model.logits)
    decode = jax.jit(model.decode)
    for step in range(t + 1):
        seq = np.concatenate([prompt, resp[:, :step]], 1)
        seq_valid = np.concatenate([valid, np.ones((4, step), bool)], 1)
        np.testing.assert_allclose(
            logits, full(params, seq, seq_valid)[:, -1], atol=TOL, rtol=TOL, err_msg=f"{name} step {step}"
        )
        if step < t:
            logits, cache = decode(decode_params, cache, jnp.asarray(resp[:, step]), jnp.int32(p + step))


# --- RoPE -------------------------------------------------------------------------------------------
def test_llama3_rope_scaling_by_hand_and_against_the_transcription():
    """head_dim 8, theta 10^4: frequencies 1, 0.1, 0.01, 0.001 (wavelengths 2*pi*{1, 10, 100,
    1000}). With original context 1024 and factors 1/4 the bounds are 1024 and 256: the first
    two are kept, the last divided by 8, the third (wavelength 628) blended."""
    rope = dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=1024
    )
    cfg = dict(CONFIGS["llama"], head_dim=8, rope_theta=10000.0, rope_scaling=rope)
    got = rope_inv_freq(llama_config_from_hf(cfg))
    s = (1024 / (2 * math.pi / 0.01) - 1) / 3
    np.testing.assert_allclose(got, [1.0, 0.1, (1 - s) * 0.01 / 8 + s * 0.01, 0.001 / 8], rtol=1e-6)
    np.testing.assert_allclose(got, inv_freq(cfg), rtol=1e-6)
    realistic = dict(rope, original_max_position_embeddings=8192)  # Llama 3.1 8B's, head_dim 128
    cfg = dict(CONFIGS["llama"], hidden_size=512, head_dim=128, rope_theta=500000.0, rope_scaling=realistic)
    np.testing.assert_allclose(rope_inv_freq(llama_config_from_hf(cfg)), inv_freq(cfg), rtol=1e-6)
    # the 5.x style says the same thing
    cfg5 = {k: v for k, v in cfg.items() if k not in ("rope_theta", "rope_scaling")}
    cfg5["rope_parameters"] = dict(realistic, rope_theta=500000.0)
    assert llama_config_from_hf(cfg5) == llama_config_from_hf(cfg)
    linear = dict(CONFIGS["llama"], rope_scaling=dict(type="linear", factor=4.0))
    np.testing.assert_allclose(
        rope_inv_freq(llama_config_from_hf(linear)), 10000.0 ** (-np.arange(0, 8, 2) / 8) / 4, rtol=1e-6
    )


# --- files -----------------------------------------------------------------------------------------
def _same_params(a, b):
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)


def test_sharded_checkpoint_loads_as_the_single_file(tmp_path, family):
    name, cfg, w, _, params = family
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    names = sorted(w)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: w[k] for k in keys}, str(folder / file), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _same_params(load_pretrained(folder)[1], params)
    save_file({names[0]: w[names[0]]}, str(folder / "model-00002-of-00002.safetensors"))  # a name in both shards
    with pytest.raises(CheckpointFolderError, match=f"tensor '{names[0]}' is also in .*model-00001-of-00002"):
        load_pretrained(folder)


def test_bf16_stored_weights_load_exactly(tmp_path):
    import ml_dtypes

    cfg = CONFIGS["qwen3"]
    w = hf_weights(cfg, seed=2, dtype=ml_dtypes.bfloat16)
    model, params = load_pretrained(write_checkpoint(tmp_path / "bf", cfg, w))
    wide = {k: v.astype(np.float32) for k, v in w.items()}
    _same_params(params, load_pretrained(write_checkpoint(tmp_path / "f32", cfg, wide))[1])
    # kept in bf16: the matrices are the stored bits; norms and the value head float32
    model16, params16 = load_pretrained(tmp_path / "bf", param_dtype=jnp.bfloat16)
    p = params16["params"]
    assert p["embed_tokens"]["embedding"].dtype == jnp.bfloat16
    assert p["layers_0"]["self_attn"]["q_proj"]["kernel"].dtype == jnp.bfloat16
    assert p["layers_0"]["self_attn"]["q_norm"]["scale"].dtype == jnp.float32
    assert p["norm"]["scale"].dtype == p["value_head"]["kernel"].dtype == jnp.float32
    np.testing.assert_array_equal(
        np.asarray(p["layers_1"]["mlp"]["down_proj"]["kernel"]).view(np.uint16),
        w["model.layers.1.mlp.down_proj.weight"].T.view(np.uint16),
    )
    # bf16 parameters, float32 compute: the same numbers as the float32 load of the same bits
    tokens, valid = batch(LENS, cfg["vocab_size"])
    np.testing.assert_allclose(
        model16.logits(params16, tokens, valid), model.logits(params, tokens, valid), atol=1e-5, rtol=1e-5
    )


def test_a_tied_file_may_hold_the_head_copy_and_an_untied_one_must(tmp_path):
    cfg = CONFIGS["qwen2"]
    w = hf_weights(cfg)
    _, params = load_pretrained(write_checkpoint(tmp_path / "a", cfg, w))
    copy = w | {"lm_head.weight": w["model.embed_tokens.weight"]}
    _same_params(load_pretrained(write_checkpoint(tmp_path / "b", cfg, copy))[1], params)
    untied = dict(cfg, tie_word_embeddings=False)
    with pytest.raises(CheckpointFolderError, match=r"missing tensor 'lm_head.weight'"):
        load_pretrained(write_checkpoint(tmp_path / "c", untied, w))


def test_bad_folders_are_one_clear_error(tmp_path):
    cfg, w = CONFIGS["llama"], hf_weights(CONFIGS["llama"])
    supported = "supported: gpt2, llama, mistral, qwen2, qwen3"
    with pytest.raises(CheckpointFolderError, match=f"model_type 'falcon' is not supported; {supported}"):
        load_pretrained(write_checkpoint(tmp_path / "falcon", dict(cfg, model_type="falcon"), w))
    with pytest.raises(CheckpointFolderError, match="has no config.json"):
        load_pretrained(tmp_path)
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointFolderError, match="has no model.safetensors nor model.safetensors.index.json"):
        load_pretrained(tmp_path / "noweights")
    cases = {
        "missing": (
            cfg,
            {k: v for k, v in w.items() if k != "model.layers.1.mlp.up_proj.weight"},
            r"missing tensor 'model.layers.1.mlp.up_proj.weight' \(expected shape \(40, 32\)\)",
        ),
        "layers": (dict(cfg, num_hidden_layers=1), w, r"unexpected tensors \['model.layers.1."),
        "rope": (
            dict(cfg, rope_scaling=dict(rope_type="yarn", factor=4.0)),
            w,
            "rope_type 'yarn' is not supported .supported: default, linear, llama3",
        ),
        "act": (dict(cfg, hidden_act="gelu"), w, "hidden_act='gelu' is not supported"),
        "heads": (dict(cfg, num_key_value_heads=3), w, "not a multiple of num_key_value_heads=3"),
    }
    for name, (c, tensors, message) in cases.items():
        with pytest.raises(CheckpointFolderError, match=message):
            load_pretrained(write_checkpoint(tmp_path / name, c, tensors))
    folder = write_checkpoint(tmp_path / "truncated", cfg, w)
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-7])
    with pytest.raises(CheckpointFolderError, match="not a readable safetensors file"):
        load_pretrained(folder)


# --- export ------------------------------------------------------------------------------------------
def test_save_pretrained_round_trips_exactly(tmp_path, family):
    """save_pretrained -> load_pretrained gives the same parameters bit for bit, the same config
    record (the source's other keys kept), and HF names: the tensors written are the ones the
    checkpoint was made of."""
    from safetensors.numpy import load_file

    from purejaxppo.lm.checkpoints.pretrained import save_pretrained

    name, cfg, w, model, params = family
    save_pretrained(tmp_path / "out", model, params)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == name and written["bos_token_id"] == 1 and written["eos_token_id"] == 2
    back = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(back) == set(w)
    for k in w:
        np.testing.assert_array_equal(back[k], w[k], err_msg=k)
    model2, params2 = load_pretrained(tmp_path / "out")
    assert model2.model.config == model.model.config
    _same_params(params2, params)
    # a trained value head survives when asked for, and only then
    params["params"]["value_head"] = {"kernel": jnp.full((cfg["hidden_size"], 1), 0.5), "bias": jnp.array([2.0])}
    save_pretrained(tmp_path / "vh", model, params, value_head=True)
    _same_params(load_pretrained(tmp_path / "vh")[1], params)
    params["params"]["value_head"] = params2["params"]["value_head"]
    # stored in bf16: the bf16 rounding of every tensor; the tokenizer files come along
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tokenizer.json").write_text("{}")
    (tmp_path / "src" / "generation_config.json").write_text('{"eos_token_id": 2}')
    save_pretrained(tmp_path / "bf", model, params, dtype=jnp.bfloat16, copy_from=tmp_path / "src")
    assert (tmp_path / "bf" / "tokenizer.json").read_text() == "{}"
    assert json.loads((tmp_path / "bf" / "generation_config.json").read_text()) == {"eos_token_id": 2}
    assert json.loads((tmp_path / "bf" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    back16 = load_file(str(tmp_path / "bf" / "model.safetensors"))
    for k in w:
        assert back16[k].dtype == jnp.bfloat16, k
        np.testing.assert_array_equal(back16[k], w[k].astype(jnp.bfloat16), err_msg=k)


# --- reward models (*ForSequenceClassification) ------------------------------------------------------
def test_a_sequence_classifier_reads_its_score_head_as_the_value_head(tmp_path):
    """``model.*`` + ``score.weight [1, D]``: values at every valid position are the NumPy
    trunk's final hidden state times the score row (no bias); written back bit for bit."""
    from purejaxppo.lm.checkpoints.pretrained import load_sequence_classifier, save_sequence_classifier

    cfg = dict(CONFIGS["llama"], architectures=["LlamaForSequenceClassification"], pad_token_id=0)
    w = {k: v for k, v in hf_weights(cfg, seed=7).items() if k != "lm_head.weight"}
    score = np.random.default_rng(8).normal(0, 0.5, (1, cfg["hidden_size"])).astype(np.float32)
    folder = write_checkpoint(tmp_path / "rm", cfg, w | {"score.weight": score})
    model, params = load_sequence_classifier(folder)
    tokens, valid = batch(LENS, cfg["vocab_size"], seed=9)
    values = np.asarray(jax.jit(model.values)(params, tokens, valid))
    for r, n in enumerate(LENS):
        _, h = np_llama(
            w | {"lm_head.weight": np.zeros((cfg["vocab_size"], cfg["hidden_size"]))}, cfg, tokens[r, L - n :]
        )
        np.testing.assert_allclose(values[r, L - n :], h @ score[0], atol=TOL, rtol=TOL)
    save_sequence_classifier(tmp_path / "back", model, params)
    from safetensors.numpy import load_file

    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert set(back) == set(w) | {"score.weight"}
    np.testing.assert_array_equal(back["score.weight"], score)
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert written["architectures"] == ["LlamaForSequenceClassification"] and written["pad_token_id"] == 0
    _same_params(load_sequence_classifier(tmp_path / "back")[1], params)
    # refused: a causal LM folder given as a reward model and the reverse, two labels, a bias HF cannot hold
    with pytest.raises(CheckpointFolderError, match="missing tensor 'score.weight'"):
        load_sequence_classifier(write_checkpoint(tmp_path / "lm", CONFIGS["llama"], hf_weights(CONFIGS["llama"])))
    with pytest.raises(CheckpointFolderError, match="a reward model.*load_sequence_classifier"):
        load_pretrained(folder)
    two = write_checkpoint(tmp_path / "two", cfg, w | {"score.weight": np.zeros((2, cfg["hidden_size"]), np.float32)})
    with pytest.raises(CheckpointFolderError, match=r"'score.weight' has shape \(2, 32\), expected \(1, 32\)"):
        load_sequence_classifier(two)
    params["params"]["value_head"]["bias"] = jnp.array([0.5])
    with pytest.raises(ValueError, match="bias .0.5. is not 0"):
        save_sequence_classifier(tmp_path / "bias", model, params)


# --- precision ---------------------------------------------------------------------------------------
def test_bf16_parameters_and_compute_stay_near_float32(family):
    """bf16 matrices (norms, value head float32) and bf16 compute: every matmul takes bf16
    operands and the logits come back float32, near the float32 model's."""
    name, cfg, w, model, params = family
    bf = type(model)(model.model.clone(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16))
    params16 = jax.tree_util.tree_map_with_path(
        lambda path, x: x if "scale" in str(path) or "value_head" in str(path) else x.astype(jnp.bfloat16), params
    )
    shapes = jax.eval_shape(bf.model.init, jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    assert jax.tree.map(lambda x: x.dtype, shapes) == jax.tree.map(lambda x: x.dtype, params16)
    tokens, valid = batch(LENS, cfg["vocab_size"], seed=6)
    # 9 matmuls a layer (q, k, v, o, gate, up, down, scores, weights x values) and the head, all
    # on bf16 operands; all but weights x values come out in float32 (the seven projections are
    # cast back to bf16 after: model.flat_dot; the attention scores and the logits stay float32)
    dots = list(_dots(jax.make_jaxpr(bf.logits)(params16, tokens, valid).jaxpr))
    assert len(dots) == 9 * cfg["num_hidden_layers"] + 1
    assert all(str(x.aval.dtype) == "bfloat16" for e in dots for x in e.invars)
    assert sum(str(e.outvars[0].aval.dtype) == "float32" for e in dots) == 8 * cfg["num_hidden_layers"] + 1
    got = jax.jit(bf.logits)(params16, tokens, valid)
    assert got.dtype == jnp.float32
    err = np.abs(np.asarray(got) - np.asarray(model.logits(params, tokens, valid)))[valid]
    # bf16 keeps 8 mantissa bits (~2e-3 relative per value); through 2 layers to logits of size
    # up to ~5 the errors add up: measured at most 0.18 (qwen2; 0.06-0.10 the others), mean
    # 0.010-0.015 (x86 CPU). The float32 path is ~2e-6 from float64: the gap is bf16's alone.
    assert err.max() < 0.5 and err.mean() < 0.05, (name, err.max(), err.mean())


def _dots(jaxpr):
    """Every ``dot_general`` equation of a jaxpr, nested ones included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _dots(inner)


@pytest.mark.parametrize("name", ["llama", "qwen3"])  # untied and tied heads
def test_load_reward_model_scores_the_last_valid_token(tmp_path, name):
    """purejaxppo.lm.rewards.reward_model on a Llama-family classifier: the reward of prompt + response
    (ragged, left-padded prompt, right-padded response) is the NumPy trunk's last valid hidden
    state times the score row; save_reward_model writes what load_sequence_classifier reads."""
    from purejaxppo.lm.checkpoints.pretrained import load_sequence_classifier
    from purejaxppo.lm.rewards.reward_model import load_reward_model, load_reward_trunk, save_reward_model

    cfg = CONFIGS[name]
    w = {k: v for k, v in hf_weights(cfg, seed=4).items() if k != "lm_head.weight"}
    score = np.random.default_rng(5).normal(0, 0.5, (1, cfg["hidden_size"])).astype(np.float32)
    classifier = cfg | {"architectures": [cfg["model_type"].capitalize() + "ForSequenceClassification"]}
    folder = write_checkpoint(tmp_path / "rm", classifier, w | {"score.weight": score})
    reward_fn, params = load_reward_model(folder)
    p_lens, r_lens, p, t = [4, 1, 2], [3, 0, 2], 4, 3
    rng = np.random.default_rng(6)
    prompt, response = rng.integers(0, cfg["vocab_size"], (3, p)), rng.integers(0, cfg["vocab_size"], (3, t))
    prompt_valid = np.arange(p)[None] >= (p - np.asarray(p_lens))[:, None]
    response_mask = np.arange(t)[None] < np.asarray(r_lens)[:, None]
    got = np.asarray(reward_fn(params, prompt, prompt_valid, response, response_mask))
    head = {"lm_head.weight": np.zeros((cfg["vocab_size"], cfg["hidden_size"]))}
    for r in range(3):
        seq = np.concatenate([prompt[r, p - p_lens[r] :], response[r, : r_lens[r]]])
        _, h = np_llama(w | head, cfg, seq)
        np.testing.assert_allclose(got[r], h[-1] @ score[0], atol=TOL, rtol=TOL)
    lm, trunk_params, has_head = load_reward_trunk(folder)
    assert has_head
    save_reward_model(tmp_path / "back", lm, trunk_params, extra_config=cfg)
    expected = {"llama": "LlamaForSequenceClassification", "qwen3": "Qwen3ForSequenceClassification"}[name]
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == [expected]
    _same_params(load_sequence_classifier(tmp_path / "back")[1], load_sequence_classifier(folder)[1])


ROPE_REFUSED = [
    # (the config's rope entries, what the one error says)
    (dict(rope_scaling=dict(rope_type="dynamic", factor=2.0)), "rope_scaling: rope_type 'dynamic' is not supported"),
    (dict(rope_scaling=dict(type="dynamic", factor=2.0)), "rope_scaling: rope_type 'dynamic' is not supported"),
    (
        dict(rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=1e6)),
        "rope_parameters: rope_type 'yarn' is not supported",
    ),
    (
        dict(rope_scaling=dict(type="longrope", short_factor=[1.0], long_factor=[2.0])),
        "rope_scaling: rope_type 'longrope' is not supported",
    ),
    (dict(rope_scaling=dict(factor=2.0)), "rope_scaling: {'factor': 2.0} names no rope_type"),
    (
        dict(
            rope_parameters=dict(full_attention=dict(rope_type="default"), sliding_attention=dict(rope_type="default"))
        ),
        "rope_parameters: per-layer-type RoPE parameters",
    ),
]


@pytest.mark.parametrize("rope,message", ROPE_REFUSED, ids=[m.split(":", 1)[1][:30] for _, m in ROPE_REFUSED])
def test_rope_types_not_implemented_are_refused_naming_the_supported_ones(rope, message):
    """A scaling this family's RoPE does not implement changes the model's numbers: refused, never
    read as the default (both config styles, the old ``type`` key too)."""
    cfg = {k: v for k, v in CONFIGS["llama"].items() if k not in ("rope_scaling", "rope_parameters")}
    with pytest.raises(ValueError) as e:
        llama_config_from_hf({**cfg, **rope})
    assert message in str(e.value) and "(supported: default, linear, llama3)" in str(e.value), str(e.value)
    # the kept ones still read: no scaling, and the old key's spelling of a supported type
    assert llama_config_from_hf(cfg).rope_scaling is None
    assert llama_config_from_hf({**cfg, "rope_scaling": {"type": "linear", "factor": 2.0}}).rope_scaling.factor == 2.0


def test_rlhf_refuses_a_model_with_yarn_rope_in_one_line(tmp_path, capsys):
    from _lm_fixtures import tiny_llama_folder

    from purejaxppo.cli.main import main

    model = tiny_llama_folder(tmp_path / "m", "llama")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "p.txt").write_text("hello\n")
    (tmp_path / "r.py").write_text("def f(prompts, responses):\n    return [0.0] * len(prompts)\n")
    argv = ["rlhf", "--model", model, "--prompts", str(tmp_path / "p.txt"), "--reward", f"{tmp_path / 'r.py'}:f"]
    assert main([*argv, "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --model {model}"), err
    assert "rope_type 'yarn' is not supported (supported: default, linear, llama3)" in err[0], err
    assert not (tmp_path / "run").exists()
