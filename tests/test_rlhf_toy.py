"""The toy RLHF experiment (experiments/rlhf_toy.py, over purejaxppo.lm): exact tabular check, CI-sized run.

The first-minibatch and frozen-reference invariants are tests/test_token_ppo.py's (the library's loop)."""

import importlib.util
import itertools
import os
import sys

import numpy as np
import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "experiments", "rlhf_toy.py")
_spec = importlib.util.spec_from_file_location("rlhf_toy", _PATH)
toy = importlib.util.module_from_spec(_spec)
sys.modules["rlhf_toy"] = toy  # dataclasses look their module up there
_spec.loader.exec_module(toy)


def _enumerate_sequences(cfg):
    """All complete token sequences of the tabular problem, with their score (independent of the DP)."""
    out = []
    for n in range(1, cfg.horizon + 1):
        for seq in itertools.product(range(cfg.n_content + 1), repeat=n):
            body = seq[:-1]
            if 0 in body:
                continue
            ends_eos = seq[-1] == 0
            if not ends_eos and n < cfg.horizon:
                continue
            score = sum(a == 1 for a in seq) - (0 if ends_eos else cfg.no_eos_penalty)
            out.append((seq, score))
    return out


def test_tabular_dp_optimum_matches_closed_form():
    cfg = toy.TabularConfig()
    ref_logits, _ = toy.tabular_problem(cfg)
    ref_logits = np.asarray(ref_logits, np.float64)
    logref = ref_logits - np.logaddexp.reduce(ref_logits, axis=1, keepdims=True)
    terms = []
    for seq, score in _enumerate_sequences(cfg):
        state, lp = 0, 0.0
        for a in seq:
            lp += logref[state, a]
            state = state * cfg.n_content + a
        terms.append(lp + score / cfg.beta)
    # max_pi E[score] - beta KL(pi||ref) = beta * log E_ref[exp(score / beta)]
    closed = cfg.beta * np.logaddexp.reduce(terms)
    assert len(terms) == 31
    np.testing.assert_allclose(toy.tabular_optimum(cfg, ref_logits), closed, rtol=1e-10)


def test_tabular_ppo_approaches_but_never_exceeds_the_optimum():
    res = toy.run_tabular(toy.TabularConfig(iters=60))
    assert res["max_excess"] <= 1e-5
    assert res["j_star"] - res["j_ref"] > 0.5  # a non-trivial gap to close
    assert res["gap_closed_final"] > 0.8


@pytest.mark.slow
def test_quick_toy_run_raises_the_score():
    cfg = toy.quick_config()
    sft_nll, tables, _ = toy.run_toy(cfg, [0.1], log=lambda *_: None)
    t = tables[0.1]
    assert t["task_grammatical"][0] > 0.9  # the SFT model learned the grammar
    assert t["eos_rate"][0] > 0.9
    assert t["score"][-3:].mean() > t["score"][0] + 1.0
    assert np.all(np.isfinite(t["kl"])) and t["kl"][-3:].mean() > 0.1
