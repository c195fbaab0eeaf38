"""Built-in verifiable rewards (purejaxppo/lm/rewards/: math_answers, check_pool, rule_rewards,
reward_mix, reward_columns) against scores written out by hand.

The ``math`` table covers the answer forms (``####``, ``\\boxed{}`` with nested braces, an
``<answer>`` tag, the last number), equality through math-verify (``1,000 == 1000``, ``0.5 ==
1/2``, LaTeX) and the rows it cannot score (no gold: None). A check that hangs is run from a
thread that is not the main one (as a reward callback is): it scores 0 and is counted.
"""

import threading

import pytest

import purejaxppo.lm.rewards as rewards
from purejaxppo.lm.rewards import reward_columns as rc
from purejaxppo.lm.rewards.math_answers import final_answer
from purejaxppo.lm.rewards.python_reward import RewardSpecError

# (completion, gold answer, expected score)
MATH = [
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72", 1.0),  # GSM8K's form, right
    ("so the total is 71.\n#### 71", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 0.0),  # wrong; gold solution
    ("I am not sure.", "5", 0.0),  # badly formatted: no answer at all
    ("First 3 apples, then 5 more, so 8 in all", "8", 1.0),  # several numbers: the last
    ("First 8 apples, then 5 more, so 13 in all", "8", 0.0),
    ("The answer is \\boxed{\\frac{\\sqrt{3}}{2}}.", "\\frac{\\sqrt 3}{2}", 1.0),  # LaTeX, nested braces
    ("\\boxed{\\frac{1}{\\sqrt{2}}} and that is it", "\\frac{\\sqrt{2}}{2}", 1.0),  # equal, not the same string
    ("\\boxed{\\frac{1}{3}}", "0.5", 0.0),
    ("The total is \\boxed{1,000} dollars", "1000", 1.0),  # thousands separator
    ("#### 1000", "1,000", 1.0),
    ("<think>half of it</think><answer>0.5</answer>", "1/2", 1.0),  # a tag; 0.5 == 1/2
    ("<answer>\\boxed{2}</answer> but maybe \\boxed{3}", "2", 1.0),  # the tag wins
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("anything 7", None, None),  # no gold answer: not applicable
]


@pytest.fixture(scope="module")
def math_reward():
    pytest.importorskip("math_verify")
    return rewards.get("math", workers=2, timeout=20.0)


def test_final_answer_forms():
    assert final_answer("x \\boxed{\\frac{a}{b^{2}}} y") == "\\frac{a}{b^{2}}"  # nested braces
    assert final_answer("\\boxed{1} then \\boxed{2}") == "2"
    assert final_answer("<answer> 4 </answer>") == "4" and final_answer("#### 1,234\nbye") == "1,234"
    assert final_answer("we get -3.5 or maybe 12/5") == "12/5" and final_answer("no digits") is None
    assert final_answer("the sum is \\frac{3}{4}") == "\\frac{3}{4}"
    assert final_answer("plain gold", whole=True) == "plain gold"


def test_math_reward_on_a_table_of_completions_and_answers(math_reward):
    completions, golds, want = zip(*MATH)
    got = math_reward(["q"] * len(MATH), list(completions), answer=list(golds))
    assert got == list(want), [(c, g, w, x) for (c, g, w), x in zip(MATH, got) if w != x]
    assert math_reward.take_counts() == {"timeouts": 0.0, "failed": 0.0}


def test_a_check_that_hangs_off_the_main_thread_scores_0_and_is_counted(tmp_path, monkeypatch):
    """The check runs in a worker process bounded by the reward's limit (no SIGALRM, which
    only the main thread may use); one that hangs is killed, scores 0 and is counted; the
    others still score, and the next call gets a fresh worker."""
    (tmp_path / "hanging_check.py").write_text(
        "import time\ndef check(gold, answer):\n    if answer == '13':\n        time.sleep(60)\n    return int(gold) == int(answer)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = rewards.get("math", check="hanging_check:check", timeout=1.0, workers=2)
    out = {}

    def score():
        out["first"] = reward(["q"] * 3, ["#### 13", "#### 4", "#### 5"], answer=["12", "04", "6"])
        out["counts"] = reward.take_counts()
        out["again"] = reward(["q"], ["#### 4"], answer=["04"])

    worker = threading.Thread(target=score)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and out["first"] == [0.0, 1.0, 0.0] and out["again"] == [1.0], out
    assert out["counts"] == {"timeouts": 1.0, "failed": 0.0}


def test_reasoning_gym_scores_a_generated_row_with_its_own_scorer():
    pytest.importorskip("reasoning_gym")
    from purejaxppo.lm.data.row_sources import read_rows

    rows = read_rows("reasoning-gym:basic_arithmetic", size=3, seed=5)
    assert rows[0].prompt == rows[0].columns["entry"]["question"] and "answer" in rows[0].columns
    entries = [r.columns["entry"] for r in rows]
    gold = [e["answer"] for e in entries]
    reward = rewards.get("reasoning-gym")
    completions = [f"<think>easy</think><answer>{gold[0]}</answer>", f"<answer>{int(gold[1]) + 1}</answer>", gold[2]]
    got = reward(["q"] * 4, completions + ["x"], entry=entries + [None])
    assert got == [1.0, 0.0, 1.0, None]
    # a saved copy of such rows (no entry column): rebuilt from question, answer and metadata
    cols = {k: [r.columns[k] for r in rows] for k in ("answer", "metadata")}
    assert reward(["q"] * 3, completions, question=[r.prompt for r in rows], **cols) == [1.0, 0.0, 1.0]


def test_format_and_length():
    fmt = rewards.get("format")  # think, then answer
    assert fmt(
        ["q"] * 4,
        ["<think>a</think>\n<answer>1</answer>", "<answer>1</answer>", "x", " <think>\n</think><answer></answer> "],
    ) == [1.0, 0.0, 0.0, 1.0]
    assert rewards.get("format", pattern=r"\d+")(["q"] * 2, ["123", "12a"]) == [1.0, 0.0]
    length = rewards.get("length", limit=10, buffer=4)  # 0 up to 6 tokens, -1 at 10, capped past it
    ids = [[0] * n for n in (3, 6, 8, 10, 30)]
    assert length(["q"] * 5, ["c"] * 5, completion_ids=ids) == [0.0, 0.0, -0.5, -1.0, -1.0]
    uncapped = rewards.get("length", limit=10, buffer=4, cap=False, unit="chars")
    assert uncapped(["q"] * 2, ["x" * 8, "x" * 14]) == [-0.5, -2.0]
    with pytest.raises(RewardSpecError, match="no built-in reward 'nope'; the built-in rewards are math"):
        rewards.get("nope")
    with pytest.raises(RewardSpecError, match="reward 'length' with options"):
        rewards.get("length", limit=4, colour="red")


def test_combine_weights_and_its_statistics_with_the_none_convention():
    """None contributes 0 to the weighted sum (None when no reward scores the completion) and
    is left out of the reward's mean; the fraction scored counts it."""

    def gold(prompts, completions, answer):  # None where the row has no answer
        return [None if a is None else float(c == a) for c, a in zip(completions, answer)]

    def legacy(prompts, completions):  # the two-argument form: gets no columns
        return [0.5] * len(completions)

    mix = rewards.combine([(gold, 2.0, "gold"), (legacy, 1.0), ("format", 0.5)])
    got = mix(["q"] * 3, ["a", "b", "<think></think><answer>c</answer>"], answer=["a", "x", None], other=[1, 2, 3])
    assert got == [2.0 + 0.5, 0.0 + 0.5, 0.5 + 0.5]
    stats = mix.take_stats()
    assert stats == {
        "reward_gold_mean": 0.5,
        "reward_gold_scored": 2 / 3,
        "reward_legacy_mean": 0.5,
        "reward_legacy_scored": 1.0,
        "reward_format_mean": 1 / 3,
        "reward_format_scored": 1.0,
    }
    assert mix.take_stats() == {}  # taken: nothing since
    only = rewards.combine([(gold, 1.0)])
    assert only(["q"], ["a"], answer=[None]) == [None]  # nothing scored it
    with pytest.raises(RewardSpecError, match="distinct names"):
        rewards.combine([(gold, 1.0), (gold, 2.0)])


def test_columns_go_only_to_functions_that_take_them():
    seen = {}

    def named(prompts, completions, answer, level=0):
        seen["named"] = (answer, level)
        return [0.0]

    def kwargs(prompts, completions, **columns):
        seen["kwargs"] = sorted(columns)
        return [0.0]

    columns = {"answer": ["1"], "level": [2], "other": ["x"]}
    for fn in (named, kwargs, lambda p, c: [0.0]):
        assert rc.call_reward(fn, "fn", ["p"], ["c"], columns) == [0.0]
    assert seen == {"named": (["1"], [2]), "kwargs": ["answer", "level", "other"]}
    with pytest.raises(ValueError, match="returned inf for row 0"):
        rc.call_reward(lambda p, c: [float("inf")], "fn", ["p"], ["c"], {})
    with pytest.raises(rc.MissingExtraError, match=r'pip install "purejaxppo\[rlvr\]"'):
        rc.optional_import("no_such_package_xyz", "this reward")


def _reward_model_folder(root, model: str) -> str:
    """A reward model of the tiny policy's tokenizer: its trunk with a random score head."""
    import shutil

    import jax

    from purejaxppo.lm.rewards.reward_model import load_reward_trunk, save_reward_model

    lm, params, _ = load_reward_trunk(model)
    head = params["params"]["value_head"]
    kernel = jax.random.normal(jax.random.PRNGKey(5), head["kernel"].shape)
    params = {**params, "params": {**params["params"], "value_head": {"kernel": kernel, "bias": head["bias"]}}}
    save_reward_model(str(root / "rm"), lm, params)
    shutil.copy(f"{model}/tokenizer.json", root / "rm" / "tokenizer.json")
    return str(root / "rm")


def test_a_reward_model_beside_python_rewards_scores_their_weighted_sum_in_the_program(tmp_path):
    """``--reward FILE.py:score --reward-model DIR --reward-weights 0.5,2``: the score the compiled
    reward gives (jit, vmapped over 2 runs as the program does) is 0.5 * the function's value of
    each row's answer + 2 * the reward model's score, the model called here by hand (its values
    on prompt + response, read at the last valid token found by a loop); each is logged on its
    own (reward_score_mean, reward_model_mean)."""
    import json

    import jax
    import jax.numpy as jnp
    import numpy as np
    from _lm_fixtures import tiny_gpt2_folder

    from purejaxppo.lm.rewards.reward_model import load_reward_trunk
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    model = tiny_gpt2_folder(tmp_path / "model")
    rm = _reward_model_folder(tmp_path, model)
    rows = [{"prompt": f"what is {i} plus one", "answer": str((3 * i) % 7)} for i in range(6)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(
        "def score(prompts, completions, answer):\n    return [float(a) for a in answer]\n"
    )
    settings = RLHFSettings(
        task="text",
        model_dir=model,
        prompts=str(tmp_path / "data.jsonl"),
        reward=(f"{tmp_path}/reward.py:score",),
        reward_model=rm,
        reward_weights=(0.5, 2.0),
        max_new_tokens=4,
        sft_steps=0,
    )
    task = settings.make_task()
    ids = np.array([3, 0, 5, 1, 3])
    prompt, valid = np.asarray(task.table.tokens)[ids], np.asarray(task.table.valid)[ids]
    response = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (5, 4), 3, task.vocab_size), np.int32)
    mask = np.arange(4)[None, :] < np.array([4, 2, 0, 3, 1])[:, None]
    stack = [jnp.stack([x, x]) for x in (prompt, valid, response, mask, ids.astype(np.int32))]
    program = jax.jit(jax.vmap(task.reward.fn, in_axes=(None, 0, 0, 0, 0, 0)))
    got = np.asarray(program(task.reward.params, *stack[:4], stack[4]))
    lm, params, _ = load_reward_trunk(rm)  # by hand
    tokens, ok = np.concatenate([prompt, response], 1), np.concatenate([valid, mask], 1).astype(bool)
    values = np.asarray(lm.values(params, jnp.asarray(tokens), jnp.asarray(ok)))
    by_model = np.array([values[i, max(j for j in range(ok.shape[1]) if ok[i, j])] for i in range(5)])
    python = np.array([float(rows[i]["answer"]) for i in ids])
    assert np.abs(by_model).min() > 1e-3 and len(set(python)) > 2  # both parts matter
    np.testing.assert_allclose(got, np.stack([0.5 * python + 2.0 * by_model] * 2), rtol=1e-5, atol=1e-5)
    stats = task.reward.text.take_stats()
    assert stats["reward_score_mean"] == pytest.approx(python.mean())
    assert stats["reward_model_mean"] == pytest.approx(by_model.mean(), rel=1e-5)
    assert stats["reward_model_scored"] == stats["reward_score_scored"] == 1.0
    # bound (the evaluations' call): the same scores
    np.testing.assert_allclose(np.asarray(task.score(prompt, valid, response, mask, rows=ids)), got[0], rtol=1e-6)


def test_reward_weights_beside_a_reward_model_count_it_last(tmp_path):
    """One weight per --reward then the reward model's; a wrong count, or weights for the
    reward model alone, are refused naming the fix; both flags together are no longer refused."""
    from _lm_fixtures import tiny_gpt2_folder

    from purejaxppo.cli.parser import build_parser
    from purejaxppo.cli.rlhf_cmd import rlhf_request
    from purejaxppo.programs.rlhf_settings import RLHFSettings, reward_model_weight, text_reward

    model = tiny_gpt2_folder(tmp_path / "model")
    rm = _reward_model_folder(tmp_path, model)
    (tmp_path / "p.txt").write_text("hello\n")
    flags = ["rlhf", "--model", model, "--prompts", str(tmp_path / "p.txt"), "--reward", "format"]
    request = rlhf_request(build_parser().parse_args([*flags, "--reward-model", rm, "--reward-weights", "1,3"]))
    assert request.settings.reward_model == rm and request.settings.reward == ("format",)
    assert reward_model_weight(request.settings) == 3.0
    mix = text_reward(request.settings)  # the Python part: each reward its own column
    assert [(w, n) for _, w, n in mix.parts] == [(1.0, "format")]
    base = dict(task="text", model_dir=model, prompts=str(tmp_path / "p.txt"), reward_model=rm, sft_steps=0)
    with pytest.raises(
        RewardSpecError, match="3 weights for 2 rewards; give one per --reward, in the order given, then"
    ):
        text_reward(RLHFSettings(**base, reward=("format",), reward_weights=(1.0, 2.0, 3.0)))
    with pytest.raises(RewardSpecError, match="--reward-model alone is one: drop the weights"):
        RLHFSettings(**base, reward_weights=(2.0,), max_new_tokens=3).make_task()
