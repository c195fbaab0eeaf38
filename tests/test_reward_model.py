"""Reward models (purejaxppo/lm/rewards/reward_model.py) and their training loss (reward_loss.py).

Independent references: the Bradley-Terry loss and its gradient written out in NumPy
(float64); the last valid token found by a plain Python loop over ragged left-padded rows; a
NumPy GPT-2 (tests/test_lm_gpt2.py's) reading its final hidden state through the score head;
a reward model trained on preferences a hidden rule separates, judged on held-out pairs;
``transformers``' ``AutoModelForSequenceClassification`` on the saved folder (a Python with
torch and transformers: this one, or the one ``PUREJAXPPO_TORCH_PYTHON`` names; else skipped).
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_lm_gpt2 import CFG, TOL, hf_weights, np_gpt2

from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.checkpoints.gpt2_hf import gpt2_params_from_hf
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError
from purejaxppo.lm.rewards.bradley_terry import PairBatch, bradley_terry_loss, pair_loss, reward_optimizer, reward_step
from purejaxppo.lm.rewards.reward_model import last_valid, load_reward_model, make_reward_fn, save_reward_model

V, D = CFG["vocab_size"], CFG["n_embd"]


def test_bradley_terry_loss_and_gradient_against_numpy():
    rng = np.random.default_rng(0)
    rc, rr, m = rng.normal(size=7), rng.normal(size=7), rng.uniform(0, 1, 7)
    rr[2] = rc[2]  # a tie counts as ranked wrong
    for margin in (0.0, m):
        z = rc - rr - margin
        want = np.mean(np.log1p(np.exp(-z)))
        dz = -1 / (1 + np.exp(z)) / len(z)  # d/dz of mean(-log sigmoid(z))
        (loss, metrics), (gc, gr) = jax.value_and_grad(
            lambda a, b: bradley_terry_loss(a, b, jnp.asarray(margin, jnp.float32)), argnums=(0, 1), has_aux=True
        )(jnp.asarray(rc, jnp.float32), jnp.asarray(rr, jnp.float32))
        np.testing.assert_allclose(loss, want, rtol=1e-6)
        np.testing.assert_allclose(gc, dz, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gr, -dz, rtol=1e-5, atol=1e-7)
        assert float(metrics["accuracy"]) == np.float32(np.mean(rc > rr))


def _ragged(b, p, t, seed):
    rng = np.random.default_rng(seed)
    plen, rlen = rng.integers(1, p + 1, b), rng.integers(0, t + 1, b)
    plen[0], rlen[0] = p, t  # a full row; others ragged, some with an empty response
    rlen[1] = 0
    pv = np.arange(p)[None] >= (p - plen)[:, None]
    rm = np.arange(t)[None] < rlen[:, None]
    return (rng.integers(2, V, (b, p)), pv, rng.integers(2, V, (b, t)), rm)


def test_the_head_reads_the_last_valid_token_of_ragged_rows():
    prompt, pv, response, rm = _ragged(6, 5, 4, seed=1)
    # values that name their slot and token: the one picked tells where it was read
    lm = type(
        "Marker",
        (),
        {
            "values": staticmethod(
                lambda params, tokens, valid: (tokens * 100 + jnp.arange(tokens.shape[1])).astype(jnp.float32)
            )
        },
    )()
    got = np.asarray(
        make_reward_fn(lm)(None, jnp.asarray(prompt), jnp.asarray(pv), jnp.asarray(response), jnp.asarray(rm))
    )
    tokens, valid = np.concatenate([prompt, response], 1), np.concatenate([pv, rm], 1)
    for r in range(len(got)):
        last = max(i for i in range(valid.shape[1]) if valid[r, i])
        assert got[r] == tokens[r, last] * 100 + last, r
    np.testing.assert_array_equal(last_valid(valid), [max(np.flatnonzero(v)) for v in valid])


@pytest.fixture(scope="module")
def gpt2_rm():
    w = hf_weights()
    params = gpt2_params_from_hf(w, CFG)
    head = np.random.default_rng(9).normal(0, 0.5, (D, 1)).astype(np.float32)
    params = {"params": {**params["params"], "value_head": {"kernel": jnp.asarray(head), "bias": jnp.zeros(1)}}}
    return FlaxLM(GPT2(**CFG)), w, head, params


def test_gpt2_reward_is_the_score_head_on_the_final_hidden_state(gpt2_rm):
    lm, w, head, params = gpt2_rm
    prompt, pv, response, rm = _ragged(5, 4, 4, seed=2)
    got = np.asarray(jax.jit(make_reward_fn(lm))(params, prompt, pv, response, rm))
    for r in range(len(got)):
        row = np.concatenate([prompt[r][pv[r]], response[r][rm[r]]])
        _, h = np_gpt2(w, row)
        np.testing.assert_allclose(got[r], h[-1] @ head[:, 0], atol=TOL, rtol=TOL)


def test_save_then_load_reward_model_gives_equal_scores(gpt2_rm, tmp_path):
    lm, _, _, params = gpt2_rm
    save_reward_model(tmp_path / "rm", lm, params, {"eos_token_id": 1})
    config = json.loads((tmp_path / "rm" / "config.json").read_text())
    assert config["architectures"] == ["GPT2ForSequenceClassification"] and config["num_labels"] == 1
    assert config["eos_token_id"] == 1
    fn, loaded = load_reward_model(tmp_path / "rm")
    batch = [jnp.asarray(x) for x in _ragged(5, 4, 4, seed=3)]
    np.testing.assert_array_equal(jax.jit(fn)(loaded, *batch), jax.jit(make_reward_fn(lm))(params, *batch))
    with pytest.raises(CheckpointFolderError, match="no score head"):
        from purejaxppo.lm.checkpoints.gpt2_hf import save_gpt2

        save_gpt2(tmp_path / "causal", lm.model, params, value_head=False)
        load_reward_model(tmp_path / "causal")


def _pairs(key, n, p=3, t=4):
    """Pairs whose preference a hidden rule decides: the response with more 3s wins (no ties)."""
    k1, k2, k3 = jax.random.split(key, 3)
    prompt = jax.random.randint(k1, (n, p), 2, V)
    a = jnp.where(jax.random.bernoulli(k2, 0.35, (n, t)), 3, jax.random.randint(k2, (n, t), 4, V))
    b = jnp.where(jax.random.bernoulli(k3, 0.35, (n, t)), 3, jax.random.randint(k3, (n, t), 4, V))
    ca, cb = jnp.sum(a == 3, 1), jnp.sum(b == 3, 1)
    keep = np.asarray(ca != cb)
    chosen, rejected = jnp.where((ca > cb)[:, None], a, b), jnp.where((ca > cb)[:, None], b, a)
    ones_p, ones_t = jnp.ones((n, p), bool), jnp.ones((n, t), bool)
    batch = PairBatch(prompt, ones_p, chosen, ones_t, rejected, ones_t, jnp.zeros(n))
    return jax.tree.map(lambda x: x[keep], batch)


def test_a_reward_model_learns_separable_preferences():
    module = GPT2(V, 16, 32, 1, 2)
    lm = FlaxLM(module)
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    train, held = _pairs(jax.random.PRNGKey(1), 2048), _pairs(jax.random.PRNGKey(2), 512)
    fn, opt = make_reward_fn(lm), reward_optimizer(3e-3)
    step = reward_step(fn, opt)

    def epoch(carry, idx):
        params, opt_state = carry
        params, opt_state, m = step(params, opt_state, jax.tree.map(lambda x: x[idx], train))
        return (params, opt_state), m

    n = train.prompt.shape[0] // 32 * 32
    order = jax.random.permutation(jax.random.PRNGKey(3), jnp.arange(n)).reshape(-1, 32)
    (params, _), _ = jax.jit(lambda c: jax.lax.scan(epoch, c, jnp.concatenate([order] * 3)))((params, opt.init(params)))
    # judged apart from the loss's own metric: each side scored alone, the chosen one must score higher
    rc = np.asarray(fn(params, held.prompt, held.prompt_valid, held.chosen, held.chosen_mask))
    rr = np.asarray(fn(params, held.prompt, held.prompt_valid, held.rejected, held.rejected_mask))
    assert np.mean(rc > rr) > 0.9, np.mean(rc > rr)
    assert float(jax.jit(lambda p: pair_loss(fn, p, held))(params)[0]) < 0.3
    assert float(jnp.abs(params["params"]["value_head"]["bias"]).max()) == 0.0  # BT never moves it


def _torch_python():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        return sys.executable
    except ImportError:
        return os.environ.get("PUREJAXPPO_TORCH_PYTHON")


CROSS = """
import json, sys, numpy as np, torch, transformers
folder, rows = sys.argv[1], json.loads(sys.argv[2])
model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
with torch.no_grad():
    print(json.dumps([float(model(torch.tensor([r])).logits[0, 0]) for r in rows]))
"""


def test_transformers_gives_the_same_score(gpt2_rm, tmp_path):
    python = _torch_python()
    if not python:
        pytest.skip("no Python with torch and transformers (set PUREJAXPPO_TORCH_PYTHON)")
    lm, _, _, params = gpt2_rm
    save_reward_model(tmp_path / "rm", lm, params, {"pad_token_id": 0})
    prompt, pv, response, rm = _ragged(4, 4, 4, seed=4)
    rows = [np.concatenate([prompt[r][pv[r]], response[r][rm[r]]]).tolist() for r in range(4)]
    out = subprocess.run(
        [python, "-c", CROSS, str(tmp_path / "rm"), json.dumps(rows)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    ours = np.asarray(make_reward_fn(lm)(params, prompt, pv, response, rm))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_llama_family_reward_model_round_trip_and_transformers(name, tmp_path):
    """A causal Llama-family folder -> a reward trunk (head at zero) -> a head set by hand -> saved as
    *ForSequenceClassification -> loaded back with equal scores; transformers' classifier on the
    same folder gives the same scalar (when a Python with torch and transformers is at hand)."""
    from _llama_reference import CONFIGS, hf_weights, write_checkpoint

    from purejaxppo.lm.rewards.reward_model import load_reward_trunk

    cfg = CONFIGS[name]
    lm, params, has_head = load_reward_trunk(write_checkpoint(tmp_path / "causal", cfg, hf_weights(cfg, seed=2)))
    assert not has_head and float(np.abs(params["params"]["value_head"]["kernel"]).max()) == 0.0
    head = np.random.default_rng(3).normal(0, 0.5, (cfg["hidden_size"], 1)).astype(np.float32)
    params["params"]["value_head"] = {"kernel": jnp.asarray(head), "bias": jnp.zeros(1)}
    save_reward_model(tmp_path / "rm", lm, params, {"pad_token_id": 0})
    fn, loaded = load_reward_model(tmp_path / "rm")
    prompt, pv, response, rm = _ragged(4, 4, 4, seed=5)
    prompt, response = prompt % cfg["vocab_size"], response % cfg["vocab_size"]
    ours = np.asarray(jax.jit(make_reward_fn(lm))(params, prompt, pv, response, rm))
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(loaded, prompt, pv, response, rm)), ours)
    python = _torch_python()
    if not python:
        pytest.skip("no Python with torch and transformers (set PUREJAXPPO_TORCH_PYTHON)")
    rows = [np.concatenate([prompt[r][pv[r]], response[r][rm[r]]]).tolist() for r in range(4)]
    out = subprocess.run(
        [python, "-c", CROSS, str(tmp_path / "rm"), json.dumps(rows)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    np.testing.assert_allclose(ours, json.loads(out.stdout.strip().splitlines()[-1]), atol=1e-4, rtol=1e-4)
