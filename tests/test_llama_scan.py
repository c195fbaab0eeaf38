"""The Llama trunk under ``scan_layers`` (purejaxppo/lm/models/llama.py: the layers as one ``lax.scan``
over their stacked parameters; the parameter tree is the unrolled one's) against the unrolled
trunk and against tests/_llama_reference.py's NumPy forward, per family:

* logits at every valid position of ragged left-padded rows (NumPy, 1e-5 as test_lm_llama.py);
* gradients of a loss of logits and values w.r.t. every parameter equal the unrolled trunk's;
* cached decoding (the cache stacked ``[layers, B, K, S, hd]``, grown in rungs) equals the full
  recompute at every step;
* LoRA unmerged (the method interceptor inside the scan's body) equals the merged weights, and
  ``remat_layers`` changes no gradient.

Tolerances: scanned and unrolled are different XLA programs of the same float32 arithmetic
(same op order per layer; fusion may differ), so they agree to float32 rounding, not bit for
bit: 1e-5 relative + absolute on logits and values of size ~1-5, 1e-5 on gradients scaled by
their largest entry (measured differences below 1e-6).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _llama_reference import CONFIGS, hf_weights, np_llama, write_checkpoint
from purejaxppo.lm.models import lora
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.checkpoints.pretrained import load_pretrained

TOL = 1e-5
LENS = [9, 1, 5, 3]
L = 9


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    name = request.param
    cfg, w = CONFIGS[name], hf_weights(CONFIGS[name], seed=1)
    model, params = load_pretrained(write_checkpoint(tmp_path_factory.mktemp(name) / "m", cfg, w))
    rng = np.random.default_rng(5)  # a non-zero value head, so the values' gradient reaches the trunk
    head = {"kernel": jnp.asarray(rng.normal(0, 0.5, (cfg["hidden_size"], 1)), jnp.float32), "bias": jnp.zeros(1)}
    params = {"params": {**params["params"], "value_head": head}}
    scanned = FlaxLM(model.model.clone(scan_layers=True))
    return name, cfg, w, model, scanned, params


def _batch(vocab, seed=3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (len(LENS), L)), np.arange(L)[None] >= (L - np.asarray(LENS))[:, None]


def test_scanned_logits_equal_the_numpy_forward_and_the_unrolled_trunk(pair):
    name, cfg, w, unrolled, scanned, params = pair
    tokens, valid = _batch(cfg["vocab_size"])
    logits, values = jax.jit(scanned.forward)(params, tokens, valid)
    ref_logits, ref_values = jax.jit(unrolled.forward)(params, tokens, valid)
    np.testing.assert_allclose(values, ref_values, atol=TOL, rtol=TOL)
    for r, n in enumerate(LENS):
        np.testing.assert_allclose(logits[r, L - n :], np_llama(w, cfg, tokens[r, L - n :])[0], atol=TOL, rtol=TOL)
        np.testing.assert_allclose(logits[r, L - n :], ref_logits[r, L - n :], atol=TOL, rtol=TOL)
    # the jaxpr has one scan and the layers' Dense products once (not num_hidden_layers times)
    jaxpr = jax.make_jaxpr(scanned.logits)(params, tokens, valid)
    assert [e.primitive.name for e in jaxpr.eqns].count("scan") == 1


def _loss(model):
    def loss(params, tokens, valid):
        logits, values = model.forward(params, tokens, valid)
        logp = jax.nn.log_softmax(logits, -1)
        return jnp.sum(jnp.where(valid[..., None], logp * jnp.cos(jnp.arange(logp.shape[-1])), 0.0)) + jnp.sum(
            jnp.where(valid, values**2, 0.0)
        )

    return jax.jit(jax.value_and_grad(loss))


def test_scanned_gradients_equal_the_unrolled_trunk_and_remat_changes_none(pair):
    name, cfg, _, unrolled, scanned, params = pair
    tokens, valid = _batch(cfg["vocab_size"], seed=4)
    v0, g0 = _loss(unrolled)(params, tokens, valid)
    remat = FlaxLM(scanned.model.clone(remat_layers=True))
    for model in (scanned, remat):
        v, g = _loss(model)(params, tokens, valid)
        np.testing.assert_allclose(v, v0, rtol=TOL)
        for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(g)[0], jax.tree.leaves(g0)):
            scale = float(jnp.abs(b).max()) or 1.0
            np.testing.assert_allclose(a / scale, b / scale, atol=TOL, err_msg=f"{name} {jax.tree_util.keystr(path)}")
    assert float(jnp.abs(g0["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"]).max()) > 0


def test_scanned_cached_decoding_equals_full_recompute(pair):
    """prefill into a small stacked cache, grown by ``FlaxLM.grow`` half way, then decode: the
    logits at every step equal the teacher-forced pass of the whole sequence."""
    name, cfg, _, _, scanned, params = pair
    p, t = 6, 5
    lens = np.array([6, 1, 3, 4])
    valid = np.arange(p)[None] >= (p - lens)[:, None]
    prompt = np.where(valid, np.random.default_rng(2).integers(1, cfg["vocab_size"], (4, p)), 0)
    resp = np.random.default_rng(6).integers(1, cfg["vocab_size"], (4, t))
    logits, cache = jax.jit(scanned.prefill, static_argnums=3)(params, prompt, valid, p + 2)
    kv_heads, hd = cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert cache.k.shape == (cfg["num_hidden_layers"], 4, kv_heads, p + 2, hd)
    assert cache.v.shape == (cfg["num_hidden_layers"], 4, kv_heads, hd, p + 2)
    full, decode = jax.jit(scanned.logits), jax.jit(scanned.decode)
    for step in range(t + 1):
        seq = np.concatenate([prompt, resp[:, :step]], 1)
        seq_valid = np.concatenate([valid, np.ones((4, step), bool)], 1)
        np.testing.assert_allclose(logits, full(params, seq, seq_valid)[:, -1], atol=TOL, rtol=TOL, err_msg=f"{step}")
        if step == 2:
            cache = scanned.grow(cache, p + t)
            assert cache.k.shape[3] == cache.v.shape[4] == cache.valid.shape[1] == p + t
        if step < t:
            logits, cache = decode(params, cache, jnp.asarray(resp[:, step]), jnp.int32(p + step))


def test_lora_unmerged_inside_the_scan_equals_the_merged_weights(pair):
    name, cfg, _, unrolled, scanned, params = pair
    tokens, valid = _batch(cfg["vocab_size"], seed=7)
    adapters = lora.lora_init(jax.random.PRNGKey(4), params, 2, 3.0)
    rng = np.random.default_rng(6)
    adapters = adapters.replace(
        tree=jax.tree_util.tree_map_with_path(
            lambda p, x: jnp.asarray(rng.normal(0, 0.2, x.shape), jnp.float32) if "lora_b" in str(p) else x,
            adapters.tree,
        )
    )
    got = jax.jit(scanned.logits)(lora.lora_attach(params, adapters), tokens, valid)
    want = jax.jit(unrolled.logits)(lora.lora_merge(params, adapters), tokens, valid)
    base = jax.jit(unrolled.logits)(params, tokens, valid)
    for r, n in enumerate(LENS):
        np.testing.assert_allclose(got[r, L - n :], want[r, L - n :], atol=TOL, rtol=TOL)
    assert float(jnp.abs(got - base).max()) > 1e-2  # the adapters do change the logits
