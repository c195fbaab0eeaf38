"""The multi-turn experiment's own pieces (experiments/multiturn/), against hand computation:
the bisection and consistent-guess transcript writers, the transcript's tokens and action mask,
the 95% t-interval, the summary table; and (slow) ``run.py --quick`` end to end.

The experiment's modules are loaded by file path under unique names (other experiments also
have a ``run.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, "experiments", "multiturn")


def load(name: str, unique: str):
    if FOLDER not in sys.path:
        sys.path.insert(0, FOLDER)  # run.py and multiturn_report.py import multiturn_world by name
    spec = importlib.util.spec_from_file_location(unique, os.path.join(FOLDER, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


world = load("multiturn_world", "multiturn_experiment_world")
report = load("multiturn_report", "multiturn_experiment_report")
H, L, C = world.HIGHER, world.LOWER, world.CORRECT


def test_bisection_guesses_by_hand():
    # 1..15: 8 (secret above) -> 9..15: 12 (below) -> 9..11: 10 (above) -> 11..11: 11
    assert world.bisection_guesses(11, 1, 15) == [(8, H), (12, L), (10, H), (11, C)]
    assert world.bisection_guesses(8, 1, 15) == [(8, C)]
    assert world.bisection_guesses(1, 1, 15) == [(8, L), (4, L), (2, L), (1, C)]
    # 1..16 needs 5 guesses for 16 (8, 12, 14, 15, 16): why the experiment's range is 1..15
    assert [g for g, _ in world.bisection_guesses(16, 1, 16)] == [8, 12, 14, 15, 16]
    # every secret of 1..15 within 4 guesses, 49 guesses over the 15 (1 + 2*2 + 4*3 + 8*4)
    assert sum(len(world.bisection_guesses(s, 1, 15)) for s in range(1, 16)) == 49


def test_consistent_guesses_stay_in_the_interval_left():
    rng = np.random.default_rng(0)
    for secret in range(1, 16):
        for _ in range(20):
            lo, hi = 1, 15
            gs = world.consistent_guesses(secret, 1, 15, rng, max_turns=4)
            assert 1 <= len(gs) <= 4
            for i, (g, k) in enumerate(gs):
                assert lo <= g <= hi, (secret, gs)
                assert k == (H if g < secret else L if g > secret else C)
                assert (k == C) == (i == len(gs) - 1 and g == secret)
                lo, hi = (g + 1, hi) if k == H else (lo, g - 1)


def test_transcript_tokens_and_action_mask_by_hand():
    tok = world.TOK
    ids, action = world.transcript_ids([(8, H), (11, C)], 15)
    text = "Guess 1 to 15.\n" + "8" + "\x00" + " higher\n" + "11" + "\x00" + " correct\n"
    eos = tok.stop_ids[0]
    expected = [eos if ch == "\x00" else tok.encode(ch)[0] for ch in text]
    assert ids == expected
    n_intro, n_h = len("Guess 1 to 15.\n"), len(" higher\n")
    want = [False] * n_intro + [True, True] + [False] * n_h + [True] * 3 + [False] * len(" correct\n")
    assert action == want


def test_sft_batch_rows_are_padded_transcripts():
    toks, valid, action = world.sft_batch(6, 15, 4, 90, seed=3, bisect_share=1.0)
    for i in range(6):
        n = int(valid[i].sum())
        assert valid[i, :n].all() and not valid[i, n:].any() and (toks[i, n:] == world.TOK.pad_id).all()
        text = world.TOK.decode(toks[i, :n].tolist())
        secret = int(text.split("<eos>")[-2].rsplit("\n", 1)[-1])  # the last guess: the secret (bisection)
        ids, act = world.transcript_ids(world.bisection_guesses(secret, 1, 15), 15)
        assert toks[i, :n].tolist() == ids and action[i, :n].tolist() == act


def test_t_interval_by_hand():
    # [1, 2, 3, 4]: mean 2.5, sample sd sqrt(5/3) = 1.29099, t(0.975, 3) = 3.182 -> 3.182 * 1.29099 / 2
    m, h = world.t_interval([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and math.isclose(h, 3.182 * math.sqrt(5 / 3) / 2, rel_tol=1e-9)
    m, h = world.t_interval([0.5, 0.7])  # sd 0.141421, t(0.975, 1) = 12.706 -> 12.706 * 0.1 = 1.2706
    assert math.isclose(m, 0.6) and math.isclose(h, 1.2706, rel_tol=1e-6)
    assert world.t_interval([3.0]) == (3.0, 0.0)
    with pytest.raises(ValueError, match="no values"):
        world.t_interval([])


def test_summary_table_and_comparison_by_hand():
    def row(method, seed, it, solve, turns):
        return {"method": method, "seed": seed, "iteration": it, "episodes": it * 8, "solve_rate": solve,
                "turns_to_solve": turns, "invalid_rate": 0.0}  # fmt: skip

    evals = [row("a", s, 0, 0.2, 3.0) for s in range(2)] + [row("a", 0, 5, 0.6, 2.0), row("a", 1, 5, 0.8, 3.0)]
    evals += [row("b", s, 0, 0.2, 3.0) for s in range(2)] + [
        row("b", 0, 5, 0.1, float("nan")),
        row("b", 1, 5, 0.3, 4.0),
    ]
    table = report.summary_table(evals, ["a", "b"])
    a, b = table
    assert a["start_solve_rate"] == 0.2 and a["final_solve_rate"] == 0.7
    assert math.isclose(a["final_solve_rate_ci95"], round(12.706 * 0.1, 4))  # sd of (0.6, 0.8) / sqrt 2 = 0.1
    assert b["final_turns_to_solve"] == 4.0 and b["final_seeds_solving"] == 1  # the nan seed left out
    comp = report.comparison(table)
    assert math.isclose(comp["solve_rate_gap"], 0.5) and comp["solve_rate_intervals_overlap"]


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path):
    run = load("run", "multiturn_experiment_run")
    assert run.main(["--quick", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert [r["method"] for r in summary["table"]] == ["ppo", "grpo"]
    for r in summary["table"]:
        assert r["seeds"] == run.QUICK["seeds"] and 0.0 <= r["final_solve_rate"] <= 1.0
    # the SFT taught the format: fewer turns without a number than the random model
    assert summary["sft"]["after_sft"]["invalid_rate"] < summary["sft"]["random_init"]["invalid_rate"]
    lines = (tmp_path / "eval.csv").read_text().splitlines()
    evals_per_method = run.QUICK["seeds"] * (1 + run.QUICK["iterations"] // run.QUICK["eval_every"])
    assert len(lines) == 1 + 2 * evals_per_method
    assert (tmp_path / "data" / "sft.jsonl").exists()
