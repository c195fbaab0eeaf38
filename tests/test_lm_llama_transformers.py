"""``transformers`` on the same files as the Llama family (skipped when torch or transformers
is absent, as the GPT-2 one is): per family, the checkpoint as written by hand and the same
model exported by ``save_pretrained`` both load in ``AutoModelForCausalLM`` with our logits on
ragged left-padded rows (padding told to transformers by its attention mask and position ids);
a reward model written by ``save_sequence_classifier`` loads in
``AutoModelForSequenceClassification`` with our values as its per-position scores."""

import numpy as np
import pytest

from _llama_reference import CONFIGS, LLAMA_BIAS, hf_weights, write_checkpoint
from purejaxppo.lm.checkpoints.pretrained import (
    load_pretrained,
    load_sequence_classifier,
    save_pretrained,
    save_sequence_classifier,
)

torch = pytest.importorskip("torch", reason="torch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

LENS, L = [9, 5, 1, 7], 9
# two programs in float32 (torch and XLA): as the GPT-2 cross-check, 1e-4
TOL = 1e-4


def _batch(vocab):
    rng = np.random.default_rng(3)
    valid = np.arange(L)[None] >= (L - np.asarray(LENS))[:, None]
    return rng.integers(0, vocab, (len(LENS), L)), valid, np.maximum(np.cumsum(valid, axis=1) - 1, 0)


def _hf_logits(folder, tokens, valid, positions, save_to=None):
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), local_files_only=True, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    if save_to is not None:  # transformers' own folder: its config style (5.x: rope_parameters), its names
        hf.save_pretrained(str(save_to))
    with torch.no_grad():
        return hf(
            torch.tensor(tokens),
            attention_mask=torch.tensor(valid.astype(np.int64)),
            position_ids=torch.tensor(positions),
        ).logits.numpy()


@pytest.mark.parametrize("name", [*sorted(CONFIGS), "llama_bias"])
def test_transformers_gives_our_logits_on_the_checkpoint_and_on_the_export(tmp_path, name):
    cfg = LLAMA_BIAS if name == "llama_bias" else CONFIGS[name]
    source = write_checkpoint(tmp_path / "src", cfg, hf_weights(cfg, seed=1))
    model, params = load_pretrained(source)
    tokens, valid, positions = _batch(cfg["vocab_size"])
    ours = np.asarray(model.logits(params, tokens, valid))
    save_pretrained(tmp_path / "out", model, params)
    for folder in (source, tmp_path / "out"):
        ref = _hf_logits(folder, tokens, valid, positions, save_to=tmp_path / "hf" if folder == source else None)
        print(f"{name} {folder.name}: max |ours - transformers| = {np.abs(ours[valid] - ref[valid]).max():.2e}")
        np.testing.assert_allclose(ours[valid], ref[valid], atol=TOL, rtol=TOL, err_msg=f"{name} {folder.name}")
    # what transformers itself saved loads here to the same model (exactly: float32 all the way)
    hf_model, hf_params = load_pretrained(tmp_path / "hf")
    assert hf_model.model.config == model.model.config
    np.testing.assert_array_equal(np.asarray(hf_model.logits(hf_params, tokens, valid)), ours)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_reads_our_reward_model(tmp_path, name):
    import jax.numpy as jnp

    cfg = CONFIGS[name]
    model, params = load_pretrained(write_checkpoint(tmp_path / "src", cfg, hf_weights(cfg, seed=2)))
    kernel = np.random.default_rng(4).normal(0, 0.5, (cfg["hidden_size"], 1)).astype(np.float32)
    params["params"]["value_head"] = {"kernel": jnp.asarray(kernel), "bias": jnp.zeros((1,))}
    save_sequence_classifier(tmp_path / "rm", model, params)
    rm, rm_params = load_sequence_classifier(tmp_path / "rm")
    tokens, valid, positions = _batch(cfg["vocab_size"])
    ours = np.asarray(rm.values(rm_params, tokens, valid))
    np.testing.assert_array_equal(ours, np.asarray(model.values(params, tokens, valid)))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(tmp_path / "rm"), local_files_only=True, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert hf.config.num_labels == 1
    with torch.no_grad():
        hidden = hf.model(
            torch.tensor(tokens),
            attention_mask=torch.tensor(valid.astype(np.int64)),
            position_ids=torch.tensor(positions),
        ).last_hidden_state
        ref = hf.score(hidden)[..., 0].numpy()
    print(f"{name} reward: max |ours - transformers| = {np.abs(ours[valid] - ref[valid]).max():.2e}")
    np.testing.assert_allclose(ours[valid], ref[valid], atol=TOL, rtol=TOL)


def test_transformers_reads_our_gpt2_reward_model(tmp_path):
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm.models.gpt2 import GPT2
    from purejaxppo.lm.models.adapters import FlaxLM

    module = GPT2(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    tokens, valid, positions = _batch(50)
    params = module.init(jax.random.PRNGKey(0), jnp.asarray(tokens), jnp.asarray(valid))
    kernel = np.random.default_rng(4).normal(0, 0.5, (32, 1)).astype(np.float32)
    params["params"]["value_head"] = {"kernel": jnp.asarray(kernel), "bias": jnp.zeros((1,))}
    save_sequence_classifier(tmp_path / "rm", FlaxLM(module), params)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(tmp_path / "rm"), local_files_only=True, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        hidden = hf.transformer(
            torch.tensor(tokens),
            attention_mask=torch.tensor(valid.astype(np.int64)),
            position_ids=torch.tensor(positions),
        ).last_hidden_state
        ref = hf.score(hidden)[..., 0].numpy()
    rm, rm_params = load_sequence_classifier(tmp_path / "rm")
    ours = np.asarray(rm.values(rm_params, tokens, valid))
    print(f"gpt2 reward: max |ours - transformers| = {np.abs(ours[valid] - ref[valid]).max():.2e}")
    np.testing.assert_allclose(ours[valid], ref[valid], atol=TOL, rtol=TOL)
