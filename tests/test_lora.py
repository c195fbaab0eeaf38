"""LoRA as a parameter transform (purejaxppo/lm/models/lora.py) and in token-level PPO (token_ppo.py).

Independent references: the base model's own logits (fresh adapters, B = 0, must give them
bit for bit); a NumPy GPT-2 (tests/test_lm_gpt2.py's, float64) whose adapted linears compute
the UNMERGED ``x @ W + (x @ A) @ B * s``, against the JAX model run on the merged tree; a
NumPy ``W + s * A @ B``; a checkpoint written and read back (the continuation bit-identical).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.lm.models import lora
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.checkpoints.gpt2_hf import gpt2_params_from_hf
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.ppo.token_ppo import make_token_ppo, policy_params
from purejaxppo.run.checkpoint import restore_checkpoint, save_checkpoint
from test_lm_gpt2 import CFG, TOL, _batch, hf_weights, np_gpt2

TARGETS = ("c_attn", "c_proj", "c_fc")


@pytest.fixture(scope="module")
def gpt2():
    w = hf_weights()
    return GPT2(**CFG), w, gpt2_params_from_hf(w, CFG)


def test_fresh_adapters_give_the_base_logits_exactly(gpt2):
    module, _, params = gpt2
    adapters = lora.lora_init(jax.random.PRNGKey(1), params, rank=4, alpha=8.0, targets=TARGETS)
    tokens, valid = _batch([9, 3, 5, 1])
    fn = jax.jit(FlaxLM(module).forward)
    for got, want in zip(fn(lora.lora_merge(params, adapters), tokens, valid), fn(params, tokens, valid)):
        np.testing.assert_array_equal(got, want)
    # every targeted kernel got factors (GPT-2's two c_proj per block included), nothing else
    n_layer = CFG["n_layer"]
    assert len(lora.lora_paths(params, TARGETS)) == 4 * n_layer
    assert all(
        float(np.abs(x).max()) > 0
        for x in jax.tree.leaves(adapters.tree)
        if x.shape[0] == CFG["n_embd"] and x.ndim == 2 and x.shape[1] == 4
    )  # A is random (B is the zero)


class _Unmerged:
    """A weight that NumPy's ``x @ w`` computes unmerged: ``x @ W + (x @ A) @ B * s``."""

    __array_ufunc__ = None  # ndarray @ this -> this.__rmatmul__

    def __init__(self, w, a, b, s):
        self.w, self.a, self.b, self.s = w, a, b, s

    def astype(self, dtype):
        return _Unmerged(*(x.astype(dtype) for x in (self.w, self.a, self.b)), self.s)

    def __rmatmul__(self, x):
        return x @ self.w + (x @ self.a) @ self.b * self.s


def test_merged_model_equals_a_numpy_gpt2_computing_the_factors_unmerged(gpt2):
    module, w, params = gpt2
    rank, alpha = 3, 6.0
    adapters = lora.lora_init(jax.random.PRNGKey(2), params, rank, alpha, TARGETS)
    rng = np.random.default_rng(5)
    tree = jax.tree_util.tree_map_with_path(  # B non-zero, so the adapters move every adapted layer
        lambda p, x: jnp.asarray(rng.normal(0, 0.2, x.shape), jnp.float32) if "lora_b" in str(p) else x, adapters.tree
    )
    adapters = adapters.replace(tree=tree)
    np_w = dict(w)
    for i in range(CFG["n_layer"]):
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            f = tree["params"][f"h_{i}"]
            for k in name.split("."):
                f = f[k]
            f = f["kernel"]
            np_w[f"h.{i}.{name}.weight"] = _Unmerged(
                w[f"h.{i}.{name}.weight"], np.asarray(f["lora_a"]), np.asarray(f["lora_b"]), alpha / rank
            )
    lens = [9, 2, 6, 4]
    tokens, valid = _batch(lens, seed=8)
    logits = np.asarray(jax.jit(FlaxLM(module).logits)(lora.lora_merge(params, adapters), tokens, valid))
    base = np.asarray(jax.jit(FlaxLM(module).logits)(params, tokens, valid))
    for r, n in enumerate(lens):
        ref = np_gpt2(np_w, tokens[r, 9 - n :])[0]
        assert np.abs(ref - base[r, 9 - n :]).max() > 0.1  # the adapters matter
        np.testing.assert_allclose(logits[r, 9 - n :], ref, atol=TOL, rtol=TOL)


def test_delta_of_a_many_dimensional_kernel_against_numpy():
    rng = np.random.default_rng(0)
    w, a, b = rng.normal(size=(6, 2, 3)), rng.normal(size=(6, 4)), rng.normal(size=(4, 6))
    got = lora.lora_delta(
        jnp.asarray(w, jnp.float32), {"lora_a": jnp.asarray(a, jnp.float32), "lora_b": jnp.asarray(b, jnp.float32)}, 0.5
    )
    np.testing.assert_allclose(got, w + 0.5 * (a @ b).reshape(6, 2, 3), atol=1e-5, rtol=1e-5)
    assert got.dtype == jnp.float32
    over_bf16 = lora.lora_delta(
        jnp.asarray(w, jnp.bfloat16),
        {"lora_a": jnp.asarray(a, jnp.float32), "lora_b": jnp.asarray(b, jnp.float32)},
        0.5,
    )
    assert over_bf16.dtype == jnp.float32  # a small delta is not rounded away in a bf16 sum


def test_targets_that_match_nothing_name_the_kernels(gpt2):
    with pytest.raises(ValueError, match=r"match no kernel.*h_0/attn/c_attn"):
        lora.lora_init(jax.random.PRNGKey(0), gpt2[2], 2, 4.0, ("q_proj",))
    only = lora.lora_paths(gpt2[2], ("attn/c_proj",))  # a path suffix picks one of the two c_proj
    assert only == [("params", f"h_{i}", "attn", "c_proj", "kernel") for i in range(CFG["n_layer"])]


# --- in token-level PPO ------------------------------------------------------------------------
P, T, B = 4, 5, 8


def prompts(key, b):
    lens = jax.random.randint(key, (b,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (b, P), 2, CFG["vocab_size"])
    return jnp.where(valid, toks, 0).astype(jnp.int32), valid


def count_threes(_, prompt, prompt_valid, response, mask):
    return jnp.sum((response == 3) & mask, axis=1).astype(jnp.float32)


def _ppo(critic="separate", **kw):
    kw = dict(dict(lora_rank=2, lora_alpha=4.0, lora_targets=TARGETS), **kw)
    cfg = TokenPPOConfig(
        batch_size=B,
        num_iterations=2,
        update_epochs=2,
        num_minibatches=2,
        max_new_tokens=T,
        stop_ids=(1,),
        actor_lr=1e-2,
        critic_lr=1e-2,
        beta=0.1,
        critic=critic,
        **kw,
    )
    return cfg, make_token_ppo(cfg, FlaxLM(GPT2(**CFG)), count_threes, prompts=prompts)


@pytest.mark.parametrize("critic", ["separate", "value_head"])
def test_only_the_adapters_train_and_the_base_is_the_reference(gpt2, critic):
    params = gpt2[2]
    _, tp = _ppo(critic)
    state = jax.jit(lambda k, p: tp.init(k, p, p))(jax.random.PRNGKey(0), params)
    assert isinstance(state.train.params["policy"], lora.Adapters)
    assert (state.train.params["critic"] is None) == (critic == "value_head")
    # the optimizer holds the adapters' moments only: far fewer numbers than the base
    assert lora.count(state.train.opt_state) < 0.5 * lora.count(params)
    new, metrics = jax.jit(tp.iteration)(state)
    assert np.isfinite(float(metrics["loss"] if "loss" in metrics else metrics["score"]))
    jax.tree.map(np.testing.assert_array_equal, new.reference, params)  # the base: bit-identical
    for role in ("policy",) + (("critic",) if critic == "separate" else ()):
        old, now = state.train.params[role].tree, new.train.params[role].tree
        moved = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))), old, now)
        assert all(v for p, v in jax.tree_util.tree_flatten_with_path(moved)[0] if "lora_b" in str(p)), role
    vh = new.train.params["critic" if critic == "separate" else "policy"].tree["params"]["value_head"]["kernel"]
    assert float(np.abs(vh).max()) > 0  # the value head (zero at the start) trains whole
    # the policy the evaluator sees is the merged one, and it moved away from the base
    merged = policy_params(new)
    assert (
        float(
            np.abs(
                merged["params"]["h_0"]["attn"]["c_attn"]["kernel"]
                - params["params"]["h_0"]["attn"]["c_attn"]["kernel"]
            ).max()
        )
        > 0
    )


def test_bf16_base_and_exact_resume_through_a_checkpoint(gpt2, tmp_path):
    params = gpt2[2]
    _, tp = _ppo(lora_base_dtype="bfloat16")
    step = jax.jit(tp.iteration)
    state = jax.jit(lambda k, p: tp.init(k, p, p))(jax.random.PRNGKey(3), params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(state.reference))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.train.params))
    state, _ = step(state)
    path = save_checkpoint(str(tmp_path), 1, state)
    template = jax.tree.map(jnp.zeros_like, state)
    restored, _ = restore_checkpoint(path, template)
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    a, ma = step(state)
    b, mb = step(restored)
    jax.tree.map(np.testing.assert_array_equal, (a, ma), (b, mb))


def test_bad_lora_configs_are_refused(gpt2):
    for kw, msg in [
        (dict(lora_rank=-1), "lora_rank"),
        (dict(lora_rank=2, lora_alpha=0.0), "lora_alpha"),
        (dict(lora_rank=0, lora_base_dtype="bfloat16"), "LoRA only"),
        (dict(lora_rank=2, lora_base_dtype="float16"), "lora_base_dtype"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            make_token_ppo(TokenPPOConfig(batch_size=4, num_minibatches=2, **kw), FlaxLM(GPT2(**CFG)), count_threes)
    _, tp = _ppo(lora_targets=("q_proj",))
    with pytest.raises(ConfigError, match="match no kernel"):
        tp.init(jax.random.PRNGKey(0), gpt2[2], None)
    _, tp = _ppo()
    with pytest.raises(ConfigError, match="reference IS the frozen base"):
        tp.init(jax.random.PRNGKey(0), gpt2[2], jax.tree.map(jnp.copy, gpt2[2]))


# --- the Llama family: its projections are the default targets ------------------------------------
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3"])
def test_llama_family_merged_adapters_equal_a_numpy_forward_of_the_merged_weights(name, tmp_path):
    """Fresh adapters give the base exactly; with B non-zero the model equals tests/_llama_reference.py's
    NumPy forward on HF weights merged by hand, ``W_hf + s * (A @ B).T`` (HF stores ``[out, in]``)."""
    from _llama_reference import CONFIGS, hf_weights, np_llama, write_checkpoint

    from purejaxppo.lm.checkpoints.pretrained import load_pretrained

    cfg, w = CONFIGS[name], hf_weights(CONFIGS[name], seed=1)
    model, params = load_pretrained(write_checkpoint(tmp_path / "m", cfg, w))
    adapters = lora.lora_init(jax.random.PRNGKey(4), params, 2, 3.0)  # the default targets: q_proj ... down_proj
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert len(lora.lora_paths(params)) == 7 * cfg["num_hidden_layers"]
    lens = [9, 2, 6, 4]
    tokens, valid = _batch(lens, seed=8)
    tokens = tokens % cfg["vocab_size"]
    logits = jax.jit(model.logits)
    np.testing.assert_array_equal(
        logits(lora.lora_merge(params, adapters), tokens, valid), logits(params, tokens, valid)
    )
    rng = np.random.default_rng(6)
    tree = jax.tree_util.tree_map_with_path(
        lambda p, x: jnp.asarray(rng.normal(0, 0.2, x.shape), jnp.float32) if "lora_b" in str(p) else x, adapters.tree
    )
    adapters = adapters.replace(tree=tree)
    merged_w = dict(w)
    for i in range(cfg["num_hidden_layers"]):
        for n in names:
            part = "mlp" if n in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            f = tree["params"][f"layers_{i}"][part][n]["kernel"]
            a, b = np.asarray(f["lora_a"], np.float64), np.asarray(f["lora_b"], np.float64)
            key = f"model.layers.{i}.{part}.{n}.weight"
            merged_w[key] = w[key].astype(np.float64) + 1.5 * (a @ b).T
    got = np.asarray(logits(lora.lora_merge(params, adapters), tokens, valid))
    for r, n in enumerate(lens):
        np.testing.assert_allclose(got[r, 9 - n :], np_llama(merged_w, cfg, tokens[r, 9 - n :])[0], atol=TOL, rtol=TOL)


# --- training runs the adapters unmerged: x W + (x (s A)) B inside each Dense -------------------------
def _nonzero_b(adapters, seed):
    rng = np.random.default_rng(seed)
    return adapters.replace(
        tree=jax.tree_util.tree_map_with_path(
            lambda p, x: jnp.asarray(rng.normal(0, 0.2, x.shape), jnp.float32) if "lora_b" in str(p) else x,
            adapters.tree,
        )
    )


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_unmerged_forward_and_gradient_equal_the_merged_ones(name, gpt2, tmp_path):
    """``lora_attach`` (no merged weight; the Dense layers add ``(x sA) B``) against
    ``lora_merge`` (``x (W + s A B)``) on random non-zero A and B: the logits, the values and the
    gradients with respect to the adapters. Two float32 programs that differ in summation order
    only: each output is a dot of at most 4 x 32 = 128 float32 terms per layer (round-off about
    ``sqrt(128) * 6e-8 ~ 7e-7`` relative per dot), a few layers deep, on logits of size ~1:
    ``2e-5`` bounds it with margin, while the adapters move the logits by far more (checked)."""
    if name == "gpt2":
        module, _, params = gpt2
        model, targets = FlaxLM(module), TARGETS
    else:
        from _llama_reference import CONFIGS, hf_weights, write_checkpoint

        from purejaxppo.lm.checkpoints.pretrained import load_pretrained

        model, params = load_pretrained(
            write_checkpoint(tmp_path / "m", CONFIGS["llama"], hf_weights(CONFIGS["llama"], seed=1))
        )
        targets = lora.DEFAULT_TARGETS
    adapters = _nonzero_b(lora.lora_init(jax.random.PRNGKey(5), params, 3, 6.0, targets), seed=7)
    tokens, valid = _batch([9, 3, 5, 1], seed=2)
    vocab = CFG["vocab_size"] if name == "gpt2" else CONFIGS["llama"]["vocab_size"]
    tokens = tokens % vocab
    fwd = jax.jit(model.forward)
    merged, attached = lora.lora_merge(params, adapters), lora.lora_attach(params, adapters)
    assert not any("lora" in str(p) for p, _ in jax.tree_util.tree_flatten_with_path(merged)[0])
    (lm, vm), (la, va), (lb, _) = fwd(merged, tokens, valid), fwd(attached, tokens, valid), fwd(params, tokens, valid)
    assert float(np.abs(np.asarray(lm) - np.asarray(lb))[np.asarray(valid)].max()) > 1e-2  # the adapters matter
    np.testing.assert_allclose(la, lm, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(va, vm, atol=2e-5, rtol=2e-5)

    probe = jnp.asarray(np.random.default_rng(3).normal(size=lm.shape), jnp.float32) * valid[..., None]

    def loss(transform, ad):
        logits, values = model.forward(transform(params, ad), tokens, valid)
        return jnp.sum(logits * probe) + jnp.sum(values * valid)

    gm = jax.jit(jax.grad(lambda ad: loss(lora.lora_merge, ad)))(adapters)
    ga = jax.jit(jax.grad(lambda ad: loss(lora.lora_attach, ad)))(adapters)
    scale = max(float(np.abs(x).max()) for x in jax.tree.leaves(gm))
    jax.tree.map(lambda a, m: np.testing.assert_allclose(a, m, atol=2e-5 * scale, rtol=2e-5), ga.tree, gm.tree)
