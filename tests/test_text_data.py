"""The user's own data for token-level PPO: tokenizer, prompt files, the text reward.

References are built by hand: strings written out, chat templates rendered by string
concatenation, left-padded tables laid out index by index.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import _lm_fixtures as fx
from purejaxppo.lm.data import prompts as pd
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError
from purejaxppo.lm.rewards.python_reward import RewardSpecError, TextReward, load_reward_function
from purejaxppo.lm.checkpoints.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    fx.write_tokenizer(path)
    return str(path)


@pytest.fixture(scope="module")
def tok(folder):
    return load_tokenizer(folder)


def write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return str(path)


def test_special_ids_take_generation_config_then_config_then_tokenizer_config(tmp_path, folder):
    backend = load_tokenizer(folder).backend
    eos, pad = backend.token_to_id(fx.EOS), backend.token_to_id(fx.PAD)
    t = load_tokenizer(folder)
    assert t.stop_ids == (eos,) and t.pad_id == pad  # tokenizer_config.json alone
    d = tmp_path / "m"
    fx.write_tokenizer(d)
    (d / "config.json").write_text(json.dumps({"eos_token_id": 7, "pad_token_id": 9}))
    assert (load_tokenizer(d).stop_ids, load_tokenizer(d).pad_id) == ((7,), 9)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 6], "pad_token_id": 8}))
    assert (load_tokenizer(d).stop_ids, load_tokenizer(d).pad_id) == ((5, 6), 8)
    # pad == EOS (the HF habit) or no pad at all: the highest model id that is not a stop
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 5, "pad_token_id": 5}))
    assert load_tokenizer(d, model_vocab=400).pad_id == 399
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 399}))
    (d / "config.json").write_text("{}")
    fx.write_tokenizer(d, pad=False)
    assert load_tokenizer(d, model_vocab=400).pad_id == 398


def test_missing_or_broken_tokenizer_files_are_named(tmp_path):
    with pytest.raises(CheckpointFolderError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointFolderError, match="cannot be read by the tokenizers package"):
        load_tokenizer(tmp_path)


def test_prompt_files_plain_chat_and_text_against_hand_rendered_strings(tmp_path, tok):
    path = write(
        tmp_path / "p.jsonl",
        [
            {"prompt": "what is one plus two"},
            "",
            {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "reverse cat dog"}]},
        ],
    )
    records = pd.read_records(path)
    assert [r.where for r in records] == [f"{path}:1", f"{path}:3"]
    plain = [pd.render(r, tok, chat=False) for r in records]
    chat = [pd.render(r, tok, chat=True) for r in records]
    e = fx.EOS
    assert plain == ["what is one plus two", f"<system>be brief{e}<user>reverse cat dog{e}<assistant>"]
    assert chat == [f"<user>what is one plus two{e}<assistant>", plain[1]]
    txt = tmp_path / "p.txt"
    txt.write_text("hello world\n\nyes no\n")
    assert [pd.render(r, tok, False) for r in pd.read_records(str(txt))] == ["hello world", "yes no"]


def test_prompt_table_is_left_padded_and_cut_from_the_left_only_when_asked(tmp_path, tok):
    texts = ["hello world", "what is the answer to one plus two"]
    path = write(tmp_path / "p.jsonl", [{"prompt": t} for t in texts])
    ids = [tok.encode(t) for t in texts]
    width = max(map(len, ids))
    table = pd.encode_prompts(pd.read_records(path), tok, budget=64, truncate=False, chat=False)
    expect = np.full((2, width), tok.pad_id)
    for i, x in enumerate(ids):
        for j, t in enumerate(x):
            expect[i, width - len(x) + j] = t
    np.testing.assert_array_equal(table.tokens, expect)
    np.testing.assert_array_equal(table.valid, expect != tok.pad_id)
    assert table.cut == 0 and table.texts == tuple(texts)
    budget = len(ids[0])  # the second prompt is longer
    with pytest.raises(
        pd.PromptFileError,
        match=f"{path}:2: the prompt has {len(ids[1])} tokens, over the budget of {budget} \\(1 of 2 prompts are\\)",
    ):
        pd.encode_prompts(pd.read_records(path), tok, budget=budget, truncate=False, chat=False)
    cut = pd.encode_prompts(pd.read_records(path), tok, budget=budget, truncate=True, chat=False)
    assert cut.cut == 1 and cut.tokens[1].tolist() == ids[1][-budget:]


@pytest.mark.parametrize(
    "line,message",
    [
        ("{not json", ":1 is not JSON"),
        ("[1, 2]", ":1 holds list"),
        ('{"text": "x"}', 'needs exactly one of "prompt"'),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', 'needs exactly one of "prompt"'),
        ('{"prompt": 3}', '"prompt" must be a string'),
        ('{"messages": [{"role": "user"}]}', '"messages" must be a non-empty list'),
    ],
)
def test_a_bad_line_is_named_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line.replace(":1", "") + "\n")
    with pytest.raises(pd.PromptFileError, match="p.jsonl:2"):
        pd.read_records(str(path))
    with pytest.raises(pd.PromptFileError) as e:
        pd.read_records(str(path))
    assert message.replace(":1", "") in str(e.value)


def test_text_reward_sees_exactly_the_decoded_strings_with_eos_and_padding_stripped(tok):
    """Rows built by hand: left-padded prompts, responses ending in EOS then padding (and one
    with no EOS); the function must get the strings they came from, under jit and vmap."""
    prompts = ["hello world", "what is the answer"]
    responses = ["yes no", "cat dog bird"]
    pad, eos = tok.pad_id, tok.stop_ids[0]
    p_ids, r_ids = [tok.encode(p) for p in prompts], [tok.encode(r) for r in responses]
    P, T = max(map(len, p_ids)) + 2, max(map(len, r_ids)) + 3
    prompt = np.full((2, P), pad, np.int32)
    response = np.full((2, T), pad, np.int32)
    for i, x in enumerate(p_ids):
        prompt[i, P - len(x) :] = x
    response[0, : len(r_ids[0])], response[0, len(r_ids[0])] = r_ids[0], eos  # EOS, then padding
    response[1, : len(r_ids[1])] = r_ids[1]  # no EOS: cut by the budget
    mask = np.zeros((2, T), bool)
    mask[0, : len(r_ids[0]) + 1] = True
    mask[1, : len(r_ids[1])] = True
    seen = []

    def fn(ps, rs):
        seen.append((list(ps), list(rs)))
        return [float(len(r)) for r in rs]

    reward = TextReward(fn, "fn", tok)
    out = jax.jit(reward)(jnp.asarray(prompt), jnp.asarray(prompt != pad), jnp.asarray(response), jnp.asarray(mask))
    assert seen == [(prompts, responses)]
    np.testing.assert_array_equal(np.asarray(out), [len(r) for r in responses])
    stacked = [jnp.stack([jnp.asarray(x)] * 3) for x in (prompt, prompt != pad, response, mask)]
    out3 = jax.jit(jax.vmap(reward))(*stacked)  # three seeds: one host call with every row
    assert out3.shape == (3, 2) and seen[-1] == (prompts * 3, responses * 3) and len(seen) == 2
    assert reward.error is None and reward.seconds > 0


@pytest.mark.parametrize(
    "body,message",
    [
        ("return [1.0] * len(r)", None),
        (
            "if 'dog' in r[0] and len(r) == 1: raise KeyError('no dogs')\n    if any('dog' in x for x in r): raise KeyError('x')"
            "\n    return [0.0] * len(r)",
            "raised KeyError: 'no dogs' on row 1 (prompt 'what is the answer', response 'cat dog bird')",
        ),
        ("return [0.0]", "returned 1 values for 2 rows"),
        ("return [0.0, float('nan')]", "returned nan for row 1 (prompt 'what is the answer', response 'cat dog bird')"),
        ("return None", "must return a list of numbers"),
    ],
)
def test_a_failing_reward_function_is_named_with_its_row_and_gives_nan(tok, body, message):
    scope = {}
    exec(f"def score(p, r):\n    {body}\n", scope)
    reward = TextReward(scope["score"], "reward.py:score", tok)
    prompts, responses = ["hello world", "what is the answer"], ["yes no", "cat dog bird"]
    rows = [tok.encode(x) for x in prompts], [tok.encode(x) for x in responses]
    width = [max(map(len, x)) for x in rows]
    arrays = []
    for ids, w in zip(rows, width):
        a = np.full((2, w), tok.pad_id, np.int32)
        for i, x in enumerate(ids):
            a[i, w - len(x) :] = x
        arrays += [a, a != tok.pad_id]
    out = np.asarray(reward(*map(jnp.asarray, arrays)))
    if message is None:
        assert reward.error is None and np.all(out == 1.0)
        return
    assert np.all(np.isnan(out)) and message in reward.error and "reward.py:score" in reward.error, reward.error


def test_reward_specs(tmp_path):
    (tmp_path / "r.py").write_text(
        "def score(prompts, responses):\n    return [0.0] * len(prompts)\ndef one(x):\n    return x\nvalue = 3\n"
    )
    assert load_reward_function(f"{tmp_path}/r.py:score")(["a"], ["b"]) == [0.0]
    assert load_reward_function("os.path:join") is os.path.join
    for spec, message in [
        ("r.py", "must be FILE.py:FUNCTION"),
        (f"{tmp_path}/nope.py:f", "does not exist"),
        (f"{tmp_path}/r.py:missing", "has no function 'missing'"),
        (f"{tmp_path}/r.py:value", "has no function 'value'"),
        (f"{tmp_path}/r.py:one", "must take (prompts, responses)"),
        ("no_such_module_xyz:f", "failed to import"),
    ]:
        with pytest.raises(RewardSpecError, match=__import__("re").escape(message)):
            load_reward_function(spec)
