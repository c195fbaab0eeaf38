"""The RLHF pipeline experiment (experiments/rlhf_pipeline/): its true objective by hand, and a
quick run of every stage (slow: about two minutes on 2 CPU cores)."""

import csv
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments", "rlhf_pipeline")
sys.path.insert(0, HERE)

import objective as obj  # noqa: E402


def _pipeline(name: str):
    """This experiment's module ``name``, loaded from its file and registered under that name.

    Other experiments have a ``run.py`` too (experiments/rlvr/), and their folders may sit ahead
    of this one on ``sys.path`` in the same worker: a plain ``import run`` found rlvr's. The
    scripts import their siblings by plain name, so the right file is pinned in ``sys.modules``.
    """
    mod = sys.modules.get(name)
    path = os.path.realpath(os.path.join(HERE, f"{name}.py"))
    if mod is not None and os.path.realpath(getattr(mod, "__file__", "") or "") == path:
        return mod
    for sibling in ("run", "world", "ppo", "plots", "advantages", name):  # imported by plain name
        other = sys.modules.get(sibling)
        if other is not None and os.path.dirname(os.path.realpath(other.__file__ or "")) != os.path.realpath(HERE):
            del sys.modules[sibling]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


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


@pytest.fixture(scope="module")
def quick_pipeline(tmp_path_factory):
    """A ``run.py --quick`` folder, shared by the pipeline's check and the advantages script's."""
    run = _pipeline("run")

    out = str(tmp_path_factory.mktemp("pipeline") / "p")
    assert run.main(["--out", out, "--quick"]) == 0
    return out


@pytest.mark.slow
def test_quick_pipeline_runs_every_stage(quick_pipeline):
    run = _pipeline("run")

    out = quick_pipeline
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


def test_at_kl_reads_the_first_crossing_by_hand():
    adv = _pipeline("advantages")

    kl = [0.0, 1.0, 3.0, 2.0, 5.0]
    true = [0.0, 1.0, 2.0, 9.0, 4.0]
    assert adv.at_kl(kl, true, 2.0) == pytest.approx(1.5)  # between 1 (KL 1) and 2 (KL 3): halfway
    assert adv.at_kl(kl, true, 3.0) == pytest.approx(2.0)  # the first checkpoint at 3, not the later dip
    assert adv.at_kl(kl, true, 4.0) == pytest.approx(9 + 2 / 3 * (4 - 9))  # from the checkpoint before (KL 2) to KL 5
    assert np.isnan(adv.at_kl(kl, true, 6.0))  # never reached


@pytest.mark.slow
def test_advantages_script_runs_every_arm(quick_pipeline, tmp_path):
    adv = _pipeline("advantages")

    out = str(tmp_path / "adv")
    assert adv.main(["--out", out, "--from", quick_pipeline, "--quick", "--arms", "gae,grpo,rloo"]) == 0
    with open(os.path.join(out, "eval.csv")) as f:
        rows = list(csv.DictReader(f))
    q = adv.QUICK
    points = q["iterations"] // q["chunk"] + 1
    assert len(rows) == 3 * points * q["seeds"]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    assert [t["arm"] for t in summary["table"]] == ["gae", "grpo", "rloo"]
    for arm in ("gae", "grpo", "rloo"):  # each arm ran its own estimator on the same grouped batch
        with open(os.path.join(out, f"ppo_{arm}", "config.json")) as f:
            cfg = json.load(f)["config"]
        assert (cfg["advantage"], cfg["group_size"], cfg["batch_size"]) == (arm, q["group"], q["batch"])
    assert os.path.isfile(os.path.join(out, "advantages_vs_kl.png"))
