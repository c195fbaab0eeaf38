"""Sampling's decode layout (the Dense kernels transposed once per generation) and the sampler's
categorical draw: the tree rewrite against NumPy transposes, generation with the copy against
generation with the stored layout (GPT-2, a Llama with GQA, an untied head and LoRA factors),
a module that cannot read the copy refused, and the draw against ``jax.random.categorical``."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _llama_reference import CONFIGS
from purejaxppo.lm.models import lora
from purejaxppo.lm.models.decode_layout import transposed_kernels
from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.models.llama import Llama
from purejaxppo.lm.checkpoints.llama_hf import llama_config_from_hf
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.models.sampling import categorical, sample_response


def test_transposed_kernels_rewrites_dense_nodes_only():
    rng = np.random.default_rng(0)
    a = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    tree = {
        "params": {
            "dense": {"kernel": a(3, 5), "bias": a(5)},
            "adapted": {"kernel": a(4, 6), "lora_a": a(4, 2), "lora_b": a(2, 6)},
            "head": {"kernel": a(3, 7)},
            "embed": {"embedding": a(7, 3)},
            "norm": {"scale": a(3)},
            "other": {"kernel": a(3, 5), "gain": a(5)},  # not a Dense's leaves: left alone
            "conv": {"kernel": a(2, 3, 4)},  # not 2-D: left alone
        }
    }
    out = transposed_kernels(tree)["params"]
    src = tree["params"]
    for name in ("dense", "adapted", "head"):
        assert "kernel" not in out[name]
        np.testing.assert_array_equal(out[name]["kernel_t"], np.asarray(src[name]["kernel"]).T)
    np.testing.assert_array_equal(out["dense"]["bias"], src["dense"]["bias"])
    np.testing.assert_array_equal(out["adapted"]["lora_b"], src["adapted"]["lora_b"])
    for name in ("embed", "norm", "other", "conv"):
        assert set(out[name]) == set(src[name])
    np.testing.assert_array_equal(out["adapted"]["lora_a"], src["adapted"]["lora_a"])  # no compute dtype: apart


def test_lora_a_joins_the_copy_only_in_the_compute_dtype():
    """``kernel_t = [W^T; A^T]`` in the kernel's dtype when it is the compute dtype (``lora_a``
    then gone, ``lora_b`` kept); under another compute dtype the factors stay apart."""
    rng = np.random.default_rng(1)
    w, a, b = (rng.normal(size=s).astype(np.float32) for s in ((4, 6), (4, 2), (2, 6)))
    for kernel_dtype in (jnp.float32, jnp.bfloat16):
        node = {"kernel": jnp.asarray(w, kernel_dtype), "lora_a": jnp.asarray(a), "lora_b": jnp.asarray(b)}
        out = transposed_kernels({"p": node}, kernel_dtype)["p"]
        assert set(out) == {"kernel_t", "lora_b"}
        assert out["kernel_t"].dtype == kernel_dtype
        want = np.concatenate(
            [np.asarray(node["kernel"], np.float32).T, np.asarray(jnp.asarray(a, kernel_dtype), np.float32).T]
        )
        np.testing.assert_array_equal(np.asarray(out["kernel_t"], np.float32), want)
        other = jnp.bfloat16 if kernel_dtype == jnp.float32 else jnp.float32
        apart = transposed_kernels({"p": node}, other)["p"]
        assert set(apart) == {"kernel_t", "lora_a", "lora_b"} and apart["kernel_t"].shape == (6, 4)


def _with_biases(params):
    """Nonzero biases (they initialise to zero, so a product that dropped them would pass)."""

    def shift(path, x):
        return x + 0.1 if jax.tree_util.keystr(path).endswith("['bias']") else x

    return jax.tree_util.tree_map_with_path(shift, params)


def _llama():
    hf = dict(CONFIGS["llama"], attention_bias=True)  # GQA 4 over 2, an untied head, biases
    module = Llama(llama_config_from_hf(hf))
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    adapters = lora.lora_init(jax.random.PRNGKey(1), params, 4, 8.0)
    adapters = lora.Adapters(jax.tree.map(lambda x: x + 0.05, adapters.tree), adapters.scale)  # B != 0
    return module, lora.lora_attach(_with_biases(params), adapters)


def _gpt2():
    module = GPT2(97, 32, 32, 2, 4)
    return module, _with_biases(
        module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    )


@pytest.mark.parametrize("build", [_llama, _gpt2], ids=["llama_lora_untied", "gpt2"])
def test_sampling_with_the_transposed_copy_equals_the_stored_layout(build):
    """The same tokens and, float32, log-probs within 1e-5 (two programs: the products' sums
    may run in another order) on ragged left-padded prompts, over two decode rungs."""
    module, params = build()
    prompt = jax.random.randint(jax.random.PRNGKey(2), (3, 5), 3, CONFIGS["llama"]["vocab_size"])
    valid = jnp.ones((3, 5), bool).at[0, :2].set(False).at[2, :4].set(False)
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    runs = {}
    for laid_out in (False, True):
        lm = FlaxLM(module, transposed_decode=laid_out)

        def sample(p, k, lm=lm):
            return sample_response(lm, p, k, prompt, valid, 9, jnp.zeros((0,), jnp.int32), 0, per_row=True, rungs=4)

        runs[laid_out] = jax.jit(sample)(params, keys)
    assert "kernel_t" in jax.tree_util.keystr(
        jax.tree_util.tree_flatten_with_path(FlaxLM(module).decode_params(params))
    )
    np.testing.assert_array_equal(runs[True][0], runs[False][0])
    np.testing.assert_allclose(runs[True][1], runs[False][1], atol=1e-5, rtol=1e-5)
    assert float(jnp.abs(runs[True][1]).min()) > 0  # log-probs of real draws, not zeros


class _NotADense(nn.Module):
    """A module with a Dense's parameter names that is not an ``nn.Dense``."""

    @nn.compact
    def __call__(self, tokens, valid, cache=None, slot=0, heads="both"):
        w = self.param("kernel", nn.initializers.normal(1.0), (1, 11))
        b = self.param("bias", nn.initializers.zeros, (11,))
        logits = jnp.broadcast_to(w[0] + b, tokens.shape + (11,))
        return (logits, jnp.zeros(tokens.shape)) if cache is None else (logits, jnp.zeros(tokens.shape), cache)

    def empty_cache(self, batch, max_len):
        return jnp.zeros((batch, max_len))


def test_a_module_that_cannot_read_the_copy_is_refused_and_can_opt_out():
    module = _NotADense()
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.int32), jnp.ones((1, 2), bool))
    prompt, valid = jnp.ones((2, 3), jnp.int32), jnp.ones((2, 3), bool)
    stop = jnp.zeros((0,), jnp.int32)
    with pytest.raises(ValueError, match="transposed_decode=False"):
        sample_response(FlaxLM(module), params, jax.random.PRNGKey(1), prompt, valid, 2, stop, 0)
    tokens, _, _ = sample_response(
        FlaxLM(module, transposed_decode=False), params, jax.random.PRNGKey(1), prompt, valid, 2, stop, 0
    )
    assert tokens.shape == (2, 2)


def test_categorical_is_jax_random_categorical_bit_for_bit():
    """Ties (the first index wins), cut tokens (-inf), scales from flat to peaked, and a row with
    a NaN (``jnp.argmax`` returns the first NaN)."""
    for seed in range(12):
        key = jax.random.PRNGKey(seed)
        logits = jax.random.normal(jax.random.PRNGKey(100 + seed), (8, 301)) * (seed % 4) * 3.0
        logits = logits.at[:, ::5].set(-jnp.inf)
        np.testing.assert_array_equal(categorical(key, logits), jax.random.categorical(key, logits, axis=-1))
    tied = jnp.zeros((3, 6)).at[:, 1].set(jnp.inf).at[:, 4].set(jnp.inf)  # two +inf: index 1
    nan = jnp.zeros((3, 6)).at[1, 2].set(jnp.nan)
    for logits in (tied, nan):
        key = jax.random.PRNGKey(7)
        np.testing.assert_array_equal(categorical(key, logits), jax.random.categorical(key, logits, axis=-1))
