"""The RLHF pipeline experiment (experiments/rlhf_pipeline/): its true objective by hand, and a
quick run of every stage (slow: about two minutes on 2 CPU cores)."""

import csv
import json
import os
import sys

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments", "rlhf_pipeline")
sys.path.insert(0, HERE)

import objective as obj  # noqa: E402


@pytest.mark.parametrize(
    "text, want",
    [
        (" the cat is happy and kind .", 2.0),  # two distinct positives
        (" the cat is happy , happy and happy .", -1.0),  # one positive, two repeats
        (" it is sad , dark and warm .", -1.0),  # one positive, two negatives
        (" a big red dog .", 0.0),  # neutral only
        (" happy happy sad sad", -3.0),  # positives {happy} 1, negatives 2, repeats 4 - 2 = 2
        ("", 0.0),
    ],
)
def test_true_score_by_hand(text, want):
    assert obj.true_score(text) == want
    assert obj.true_reward(["p"], [text]) == [want]


def test_corpus_is_seeded_and_mentions_the_prompt_noun():
    a, b = obj.corpus(50, 3), obj.corpus(50, 3)
    assert a == b and a != obj.corpus(50, 4)
    for prompt, response in a:
        noun = next(n for n in obj.NOUNS if f"the {n}" in prompt)
        assert noun in response or response.startswith(" it is")
        assert 1 <= sum(w in obj.ADJECTIVES for w in obj.words(response)) <= 4


@pytest.mark.slow
def test_quick_pipeline_runs_every_stage(tmp_path):
    import run

    out = str(tmp_path / "p")
    assert run.main(["--out", out, "--quick"]) == 0
    with open(os.path.join(out, "eval.csv")) as f:
        rows = list(csv.DictReader(f))
    q = run.QUICK
    points = q["iterations"] // q["chunk"] + 1  # the SFT model, then a snapshot per chunk
    assert len(rows) == 2 * len(q["betas"]) * points * q["seeds"]
    start = [r for r in rows if r["iteration"] == "0"]
    assert start and all(float(r["kl"]) == 0.0 for r in start)  # the SFT policy against itself
    assert {r["iteration"] for r in rows} == {str(i * q["chunk"]) for i in range(points)}
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    assert len(summary["rm"]["rm_eval_accuracy"]) == q["rm_epochs"]
    assert all(os.path.isfile(os.path.join(out, n)) for n in ("proxy_true_vs_kl.png", "proxy_true_vs_iteration.png"))
    assert os.path.isfile(os.path.join(out, "rm", "model", "config.json"))
