"""The RLVR demonstration (experiments/rlvr/): its worked solutions and verifier by hand, the
data's held-out split, the recipes' commands, and the intervals of its tables (fast: no
training)."""

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments", "rlvr")
sys.path.insert(0, HERE)

import rlvr_plots as plots  # noqa: E402
import rlvr_verifier as verifier  # noqa: E402
import rlvr_world as world  # noqa: E402


def _run_module():
    spec = importlib.util.spec_from_file_location("rlvr_run", os.path.join(HERE, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(expression: str, answer: str) -> dict:
    return {"prompt": f"p: {expression} =", "answer": answer, "metadata": {"expression": expression}}


@pytest.mark.parametrize(
    "expression, answer, want",
    [
        ("4 - 6 - 0", "-2", " 4 - 6 = -2, -2 - 0 = -2 <answer>-2</answer>"),
        ("3 + 5", "8", " 3 + 5 = 8 <answer>8</answer>"),
        ("9 + 9 + 9 - 1", "26", " 9 + 9 = 18, 18 + 9 = 27, 27 - 1 = 26 <answer>26</answer>"),
    ],
)
def test_worked_solution_by_hand(expression, answer, want):
    assert world.worked_solution(_row(expression, answer)) == want


def test_worked_solution_refuses_a_wrong_answer():
    with pytest.raises(AssertionError):
        world.worked_solution(_row("1 + 1", "3"))


def test_verifier_by_hand():
    p = "State the final answer to the following arithmetic problem: 4 - 6 + 9 ="
    assert verifier.gold(p) == 7 and verifier.gold("no expression") is None
    got = verifier.chain_sum(
        [p] * 5,
        [
            " 4 - 6 = -2 <answer>7</answer>",
            " <answer>-7</answer>",
            " 4 - 6 = -2, -2 + 9 = 7",
            "",
            " <answer>7 </answer>",
        ],
    )
    assert got == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_held_out_rows_are_not_trained_on(tmp_path):
    out = str(tmp_path)
    rec = world.build_world(out, train=300, held_out=40, sft_pairs=200, vocab=512, width=16, layers=1, seed=3)
    rows = {
        n: [json.loads(x) for x in open(os.path.join(out, "data", f"{n}.jsonl"))] for n in ("train", "heldout", "sft")
    }
    assert (len(rows["train"]), len(rows["heldout"]), len(rows["sft"])) == (300, 40, 200)
    held = {r["prompt"] for r in rows["heldout"]}
    assert not held & {r["prompt"] for r in rows["train"]} and not held & {r["prompt"] for r in rows["sft"]}
    for r in rows["heldout"]:  # the columns the built-in rewards read, and the verifier agrees with them
        assert r["metadata"]["source_dataset"] == "chain_sum" and verifier.gold(r["prompt"]) == int(r["answer"])
    assert rec["response_tokens_max"] <= world.MAX_NEW
    assert all(
        os.path.isfile(os.path.join(out, "init_model", n))
        for n in ("config.json", "model.safetensors", "tokenizer.json")
    )


def test_every_recipe_samples_the_same_responses():
    run = _run_module()
    p = dict(run.FULL)
    for recipe in p["recipes"].split(","):
        cmd = run.rl_command("/o", recipe, p, 0, "/o/r")
        flag = lambda name: cmd[cmd.index(name) + 1]  # noqa: E731
        assert flag("--recipe") == recipe and flag("--reward") == "math"
        assert (flag("--batch"), flag("--iterations")) == (str(p["batch"]), str(p["iterations"]))
        assert flag("--group-size") == (str(p["group"]) if recipe in run.GROUPED else "1")


def test_intervals_by_hand():
    m, h = plots.t_interval([1.0, 2.0, 3.0, 4.0])
    assert m == pytest.approx(2.5) and h == pytest.approx(3.182446 * np.std([1, 2, 3, 4], ddof=1) / 2, rel=1e-5)
    d, h = plots.welch_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert d == 0.0 and h > 0


def test_recipes_are_compared_at_equal_samples():
    # recipe a: 0.1 -> 0.5 + seed/100 at 640 samples; b draws twice as many (dynamic sampling's
    # extra draws): 0.1 -> 0.7 at 1280, so at the common budget of 640 it is halfway, 0.4
    rows = [
        {"recipe": r, "seed": s, "update": u, "samples": n, "wall_s": u, "eval_pass@1": v, "eval_pass@8": v}
        for r, scale, end in (("a", 1, 0.5), ("b", 2, 0.7))
        for s in range(3)
        for u, n, v in ((-1, 0, 0.1), (9, 640 * scale, end + 0.01 * s))
    ]
    assert plots.common_budget(rows, ["a", "b"]) == 640
    assert plots.at_budget(rows, "b", "eval_pass@1", 640) == pytest.approx([0.4, 0.405, 0.41])
    table = plots.summary_table(rows, ["a", "b"])
    assert [t["pass@1_budget"] for t in table] == [pytest.approx(0.51), pytest.approx(0.405)]
    assert [t["pass@1_final"] for t in table] == [pytest.approx(0.51), pytest.approx(0.71)]
    assert [t["samples"] for t in table] == [640, 1280]
    comp = plots.comparison(rows, ["a", "b"])
    assert comp["best_by_pass@1"] == "a" and comp["differences"]["b"]["pass@1"][0] == pytest.approx(0.105)


def test_samples_count_dynamic_sampling_draws(tmp_path):
    run = _run_module()
    folder = tmp_path / "rl_dapo"
    folder.mkdir()
    lines = ["seed,update,score,extra_draws,eval_pass@1,eval_pass@8"]
    lines += [f"0,{u},0.5,{x},{'' if u < 1 else 0.4},{'' if u < 1 else 0.8}" for u, x in ((0, 1.0), (1, 0.0))]
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    p = {"iterations": 2, "batch": 8}
    evals, training = run.read_metrics(str(tmp_path), "dapo", {"run_s": 10.0}, p, {"eval_pass@1": 0.2})
    assert [(e["update"], e["samples"], e["wall_s"]) for e in evals] == [(-1, 0, 0.0), (1, 24, 10.0)]
    assert [t["samples"] for t in training] == [16, 24]  # 8 x (1 + 1 extra draw), then 8 more
