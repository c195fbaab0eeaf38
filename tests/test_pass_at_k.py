"""pass@k evaluation (purejaxppo/lm/ppo/pass_at_k.py, pass_at_k_eval.py; the hook in
purejaxppo/programs/rlhf_eval.py).

* The estimator against the closed formula (``math.comb``) on hand-made counts (``c = 0``,
  ``c = n``, ``n - c < k``), against a brute-force count of every k-subset for small ``n``, and
  its jnp version against the NumPy one; mean@k and the threshold on hand values.
* The evaluation on a tiny model with an exact-match task: each sample's score agrees with
  a check of its decoded text, and the counts, pass@1 and pass@n with the scores.
* The rlhf evaluator: off, its columns and numbers are today's; on, it adds eval_pass@K and
  eval_mean@N and writes eval_samples.jsonl, whose lines an evaluation redone after a resume
  replaces. The settings' flags are generated from their declarations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo.lm as lm
from purejaxppo.cli.flags import add_field_flags, one_line_errors
from purejaxppo.config import ConfigError
from purejaxppo.programs import rlhf_eval
from purejaxppo.programs.rlhf_eval import PassAtKSettings, RLHFEvaluator, write_eval_samples


def comb_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)  # comb(m, k) = 0 for m < k


# --- the estimators ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, counts, k",
    [
        (10, [0, 1, 2, 5, 9, 10], 1),
        (10, [0, 1, 2, 5, 9, 10], 3),
        (10, [0, 3, 7, 8, 10], 4),  # n - c < k from c = 7 on
        (5, [0, 1, 4, 5], 5),  # k = n: any correct sample passes
        (200, [0, 1, 13, 150, 199, 200], 100),  # binomials of 10^59: the product stays exact-ish
    ],
)
def test_pass_at_k_matches_the_closed_formula(n, counts, k):
    got = lm.pass_at_k(n, np.array(counts), k)
    want = [comb_pass_at_k(n, c, k) for c in counts]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got[0] == 0.0 and got[-1] == 1.0  # c = 0 and c = n exactly


def test_pass_at_k_per_problem_sample_counts():
    n, c = np.array([4, 8, 3]), np.array([1, 2, 3])
    np.testing.assert_allclose(lm.pass_at_k(n, c, 2), [comb_pass_at_k(4, 1, 2), comb_pass_at_k(8, 2, 2), 1.0])


def test_pass_at_k_matches_every_k_subset():
    """Brute force: pass@k is the share of the k-subsets of the n samples that hold a correct one."""
    for n in range(1, 8):
        for c in range(n + 1):
            correct = set(range(c))
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                want = sum(bool(correct & set(s)) for s in subsets) / len(subsets)
                assert lm.pass_at_k(n, [c], k)[0] == pytest.approx(want, abs=1e-12), (n, c, k)


def test_pass_at_k_jnp_equals_numpy_under_jit():
    c = np.array([0, 1, 4, 9, 16])
    got = jax.jit(lambda c: lm.pass_at_k(16, c, 4))(jnp.asarray(c))
    assert isinstance(got, jax.Array)
    np.testing.assert_allclose(np.asarray(got), lm.pass_at_k(16, c, 4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n, c, k", [(4, [1], 5), (4, [5], 2), (4, [-1], 1), (4, [1.5], 1), (4, [1], 0)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        lm.pass_at_k(n, c, k)


def test_mean_at_k_and_threshold_by_hand():
    scores = np.array([[1.0, 0.0, 0.5, 0.5], [0.2, 0.4, 1.0, np.nan]])
    np.testing.assert_allclose(lm.mean_at_k(scores[:1]), [0.5])
    np.testing.assert_allclose(lm.mean_at_k(scores, 2), [0.5, 0.3])
    np.testing.assert_allclose(lm.mean_at_k(scores, 1), [1.0, 0.2])
    with pytest.raises(ValueError):
        lm.mean_at_k(scores, 5)
    # graded scores: correct where >= the threshold (the default 1.0: full marks); NaN never
    np.testing.assert_array_equal(lm.correct_counts(scores), [1, 1])
    np.testing.assert_array_equal(lm.correct_counts(scores, 0.5), [3, 1])
    np.testing.assert_array_equal(lm.correct_counts(scores, 0.4), [3, 2])
    np.testing.assert_array_equal(lm.correct_counts(jnp.asarray(scores), 0.5), [3, 1])
    record = lm.PassAtK.from_scores(scores, (1, 2), threshold=0.5)
    np.testing.assert_array_equal(record.counts, [3, 1])
    assert record.pass_at == pytest.approx({1: (3 / 4 + 1 / 4) / 2, 2: (1.0 + comb_pass_at_k(4, 1, 2)) / 2})
    assert np.isnan(record.mean)  # a failed score shows (a text reward's failure is raised besides)
    assert list(record.metrics("eval_")) == ["eval_pass@1", "eval_pass@2", "eval_mean@4"]
    assert lm.PassAtK.from_scores(np.ones((1, 8))).ks == (1, 8)  # no ks: 1 and n


# --- the evaluation on a tiny model ------------------------------------------------------
# reverse one binary digit: the answer is the digit, then EOS; a fresh model samples it
# about once in 16 (4 tokens may be drawn, pad is never), so a batch holds both outcomes
TASK = lm.make_task("reverse", n_digits=2, min_len=1, max_len=2, max_new=3)


@pytest.fixture(scope="module")
def tiny():
    return lm.init_tiny_lm(TASK, jax.random.PRNGKey(0), d_model=8, n_layers=1, n_heads=1)


def right_answer(prompt: str) -> str:
    digits = [t for t in prompt.split() if t != "|"]
    return " ".join(digits[::-1] + ["<eos>"])


def test_evaluation_counts_agree_with_the_samples(tiny):
    policy, params = tiny
    prompt, valid = TASK.prompts(jax.random.PRNGKey(1), 6)
    n = 12
    got = lm.evaluate_pass_at_k(
        policy, params, TASK, prompt, valid, jax.random.PRNGKey(2), n=n, ks=(1, 4, n), temperature=2.0
    )
    assert got.scores.shape == (6, n) and len(got.samples) == 6 and all(len(s) == n for s in got.samples)
    by_text = np.array([[s == right_answer(p) for s in row] for p, row in zip(got.prompts, got.samples)])
    np.testing.assert_array_equal(got.scores >= 1.0, by_text)  # each score is its own sample's
    assert 0 < by_text.sum() < by_text.size, "want both outcomes; change the keys"
    np.testing.assert_array_equal(got.counts, by_text.sum(axis=1))
    assert got.pass_at[1] == pytest.approx(by_text.mean())
    assert got.pass_at[n] == pytest.approx(np.mean(by_text.any(axis=1)))
    assert got.pass_at[1] <= got.pass_at[4] <= got.pass_at[n]
    assert got.mean == pytest.approx(by_text.mean())  # an exact-match score is 0 or 1
    assert got.rows()[0]["completions"] == list(got.samples[0]) and got.rows()[0]["correct"] == got.counts[0]
    with pytest.raises(ValueError):
        lm.evaluate_pass_at_k(policy, params, TASK, prompt, valid, jax.random.PRNGKey(2), n=4, ks=(5,))


# --- the rlhf evaluator's hook -----------------------------------------------------------
@pytest.fixture
def runs(tiny, monkeypatch):
    """Two runs' policies as the evaluator takes them (``policy_params`` of a state: here the
    stacked params themselves)."""
    monkeypatch.setattr(rlhf_eval, "policy_params", lambda runner: runner)
    _, params = tiny
    other = jax.tree.map(lambda x: x * 1.5, params)
    return jax.tree.map(lambda a, b: jnp.stack([a, b]), params, other)


def test_evaluator_off_is_todays_and_on_adds_the_columns(tiny, runs, tmp_path):
    """Off (the default settings, as without any: no pass@k program), the evaluator's columns,
    numbers and files are the greedy evaluation's alone; on, the greedy numbers stay as they were."""
    policy, _ = tiny
    assert RLHFEvaluator(TASK, policy, 2, 8, None, None).pass_at_k is None
    off_dir, on_dir = tmp_path / "off", tmp_path / "on"
    off_dir.mkdir(), on_dir.mkdir()
    off = RLHFEvaluator(TASK, policy, 2, 8, str(off_dir / "samples.txt"), PassAtKSettings())
    cfg = PassAtKSettings(pass_samples=6, pass_k=(1, 3), pass_prompts=5, pass_temperature=2.0)
    on = RLHFEvaluator(TASK, policy, 2, 8, str(on_dir / "samples.txt"), cfg)
    for ev in (off, on):
        ev.compile(None, runs)
    assert off.pass_at_k is None and off.names == tuple(sorted(jax.eval_shape(off._fn, runs)[0]))
    assert set(on.names) - set(off.names) == {"eval_pass@1", "eval_pass@3", "eval_mean@6"}
    base, with_pass = off(None, 2, runs), on(None, 2, runs)
    assert set(base) == set(off.names)
    for k, v in base.items():
        np.testing.assert_array_equal(with_pass[k], v)  # the greedy numbers untouched
    assert sorted(p.name for p in off_dir.iterdir()) == ["samples.txt"]
    assert (off_dir / "samples.txt").read_text() == (on_dir / "samples.txt").read_text()
    assert with_pass["eval_pass@1"].shape == (2,)
    assert (with_pass["eval_pass@1"] <= with_pass["eval_pass@3"]).all()
    lines = [json.loads(x) for x in (on_dir / rlhf_eval.EVAL_SAMPLES).read_text().splitlines()]
    assert [x["index"] for x in lines] == list(range(5)) and {x["iteration"] for x in lines} == {2}
    correct = sum(x["correct"] for x in lines)
    assert correct == sum(s >= 1.0 for x in lines for s in x["scores"])
    assert with_pass["eval_pass@1"][0] == pytest.approx(correct / 30)  # run 0's samples are the ones written
    assert all(x["correct"] == sum(c == right_answer(x["prompt"]) for c in x["completions"]) for x in lines)


def test_eval_samples_redone_after_a_resume_replace_their_iterations(tmp_path):
    path = str(tmp_path / rlhf_eval.EVAL_SAMPLES)
    record = lambda x: lm.PassAtK.from_scores(np.full((2, 2), x), prompts=("a", "b"), samples=(("1", "2"),) * 2)  # noqa: E731
    assert write_eval_samples(path, 2, record(0.0))
    write_eval_samples(path, 4, record(1.0), append=True)
    with open(path, "a") as f:
        f.write('{"iteration": 6, "ind')  # a torn line (a crash while appending)
    write_eval_samples(path, 4, record(0.5))  # a resumed session redoes iteration 4
    rows = [json.loads(x) for x in open(path).read().splitlines()]
    assert [(r["iteration"], r["index"], r["scores"][0]) for r in rows] == [
        (2, 0, 0.0),
        (2, 1, 0.0),
        (4, 0, 0.5),
        (4, 1, 0.5),
    ]


def test_settings_flags_and_checks():
    p = one_line_errors(argparse.ArgumentParser())
    add_field_flags(p, PassAtKSettings)
    args = p.parse_args(["--pass-samples", "8", "--pass-k", "1,4", "--pass-temperature", "0.7"])
    assert (args.pass_samples, args.pass_k, args.pass_temperature, args.pass_threshold) == (8, (1, 4), 0.7, None)
    with pytest.raises(SystemExit):
        p.parse_args(["--pass-temperature", "0"])
    assert PassAtKSettings.of(PassAtKSettings()) is None  # off by default
    on = PassAtKSettings.of(PassAtKSettings(pass_samples=8, pass_k=[8, 1]))  # a list: as config.json reads back
    assert on.pass_k == (8, 1) and on.ks() == (1, 8) and PassAtKSettings(pass_samples=8).ks() == (1, 8)
    with pytest.raises(ConfigError, match="--pass-k"):
        PassAtKSettings(pass_samples=4, pass_k=(8,)).check(lambda f: "--" + f.replace("_", "-"))
    with pytest.raises(ConfigError):
        PassAtKSettings(pass_threshold=float("nan")).check()
    assert PassAtKSettings(pass_samples=4, pass_k=(2, 4)).check()


def test_a_record_holding_the_fields_gets_the_same_declarations():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Holder:  # as RLHFSettings holds them
        eval_every: int = 10
        pass_samples: int = PassAtKSettings.declared("pass_samples")
        pass_k: tuple = PassAtKSettings.declared("pass_k")

    mine = {f.name: f for f in dataclasses.fields(PassAtKSettings)}
    for f in dataclasses.fields(Holder)[1:]:
        assert (f.default, f.metadata) == (mine[f.name].default, mine[f.name].metadata)
    on = PassAtKSettings.of(Holder(pass_samples=4, pass_k=[2]))
    assert on == PassAtKSettings(pass_samples=4, pass_k=(2,))  # the fields it lacks: their defaults
