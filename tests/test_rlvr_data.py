"""Datasets with columns for RL from verifiable rewards (purejaxppo/lm/data/row_sources.py,
prompts.py) and the row ids that carry each row's columns to the reward
(token_phases.prompt_phase / sample_phase, token_iteration, TextReward, TextTask).

References by hand: rows written out and read back column by column; the reward records what
it was given and every completion's prompt text is compared with the row its columns came
from (the prompt names its row), through the group repeat, random draws and a device split.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import _lm_fixtures as fx
from purejaxppo.lm.checkpoints.tokenizer import load_tokenizer
from purejaxppo.lm.data import prompts as pd
from purejaxppo.lm.data import row_sources as rs
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_phases as ph
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_update import Devices
from purejaxppo.lm.rewards.python_reward import RewardSpecError, TextReward

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 12  # rows: row i's prompt is "row i please", its answer column str(7 * i)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    fx.write_tokenizer(path)
    return load_tokenizer(str(path))


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def question_rows():
    return [{"question": f"row {i} please", "answer": str(7 * i), "idx": i, "meta": {"level": i % 3}} for i in range(N)]


def test_jsonl_and_parquet_rows_keep_every_column_and_the_column_map_picks_the_prompt(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = write_jsonl(tmp_path / "d.jsonl", question_rows())
    records = rs.read_rows(path)
    assert [r.prompt for r in records] == [f"row {i} please" for i in range(N)]  # "question" is the prompt
    assert records[3].columns == {"answer": "21", "idx": 3, "meta": {"level": 0}} and records[3].where == f"{path}:4"
    pq.write_table(pa.Table.from_pylist(question_rows()), str(tmp_path / "d.parquet"))
    from_parquet = rs.read_rows(str(tmp_path / "d.parquet"))
    assert [(r.prompt, r.columns) for r in from_parquet] == [(r.prompt, r.columns) for r in records]
    # a map: the prompt from another column, a column renamed (the old name gone)
    mapped = rs.read_rows(path, columns={"prompt": "answer", "gold": "idx"})
    assert mapped[2].prompt == "14" and mapped[2].columns == {
        "question": "row 2 please",
        "gold": 2,
        "meta": {"level": 2},
    }
    chat = write_jsonl(tmp_path / "c.jsonl", [{"prompt": [{"role": "user", "content": "hi"}], "answer": "1"}])
    assert rs.read_rows(chat)[0].messages == ((("content", "hi"), ("role", "user")),)  # a chat under "prompt"
    with pytest.raises(pd.PromptFileError, match="d.jsonl:1 has no column 'nope'"):
        rs.read_rows(path, columns={"prompt": "nope"})
    assert rs.parse_column_map("prompt=problem, answer=solution") == {"prompt": "problem", "answer": "solution"}


@pytest.mark.slow  # importing datasets takes a few seconds
def test_a_saved_datasets_folder_and_its_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(question_rows())
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(2))}).save_to_disk(str(tmp_path / "two"))
    one = rs.read_rows(str(tmp_path / "one"))
    assert [r.prompt for r in one] == [f"row {i} please" for i in range(N)] and one[5].columns["answer"] == "35"
    assert len(rs.read_rows(str(tmp_path / "two"))) == N  # "train" by default
    assert len(rs.read_rows(str(tmp_path / "two"), split="test")) == 2
    with pytest.raises(pd.PromptFileError, match="holds the splits train, test"):
        rs.read_rows(str(tmp_path / "two"), split="dev")


def test_held_out_split_is_seeded_disjoint_and_sized():
    records = [pd.Record(f"f:{i}", f"p{i}", columns={"i": i}) for i in range(20)]
    train, held = rs.split_rows(records, 0.25, seed=3)
    assert len(held) == 5 and len(train) == 15
    assert sorted(r.columns["i"] for r in train + held) == list(range(20))
    assert [r.where for r in held] == [r.where for r in rs.split_rows(records, 5, seed=3)[1]]  # a count, same seed
    assert [r.where for r in held] != [r.where for r in rs.split_rows(records, 5, seed=4)[1]]
    assert rs.split_rows(records, 0) == (records, [])
    with pytest.raises(pd.PromptFileError, match="leaves none to train on"):
        rs.split_rows(records, 20)


def test_an_unknown_source_or_a_missing_extra_is_named(tmp_path, monkeypatch):
    with pytest.raises(pd.PromptFileError, match=r"expected a \.jsonl, \.txt or \.parquet file"):
        rs.read_rows(str(tmp_path / "x.csv"))
    with pytest.raises(pd.PromptFileError, match="size, seed and config are options of reasoning-gym"):
        rs.read_rows(write_jsonl(tmp_path / "d.jsonl", question_rows()), size=3)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    with pytest.raises(ImportError, match=r'reading a \.parquet file needs .*pip install "purejaxppo\[rlvr\]"'):
        rs.read_rows(str(tmp_path / "d.parquet"))


# --- row ids from the prompt source to the reward ---------------------------------------------
def tiny_policy(vocab: int, width: int):
    """A bigram policy (logits = a table row per token, no cache): cheap to compile."""
    from purejaxppo.lm.models.adapters import FullRecompute

    table = jax.random.normal(jax.random.PRNGKey(0), (vocab, vocab))
    return FullRecompute(lambda params, tokens, valid: params[tokens]), table


def reading_reward(tok, table, seen):
    """A TextReward whose function takes the columns ``answer`` and ``idx`` by name and records
    (prompt, answer, idx) of every completion; it scores 1 where they belong to one row."""

    def fn(prompts, completions, answer, idx=None):
        seen.extend(zip(prompts, answer, idx))
        return [float(p == f"row {i} please" and a == str(7 * i)) for p, a, i in zip(prompts, answer, idx)]

    reward = TextReward(fn, "fn", tok)
    reward.bind_rows(table.columns)
    return reward


def test_each_completion_gets_its_own_rows_columns_through_draws_and_groups(tmp_path, tok):
    """Rows drawn at random with replacement, each repeated G = 2 times: every completion's
    reward call gets the columns of the row its prompt came from, and Sampled.row says which."""
    records = rs.read_rows(write_jsonl(tmp_path / "d.jsonl", question_rows()))
    train, _ = rs.split_rows(records, 2, seed=1)  # shuffled rows: the ids index the table built from them
    table = pd.encode_prompts(train, tok, 16, False, False)
    seen = []
    reward = reading_reward(tok, table, seen)
    cfg = TokenPPOConfig(batch_size=8, group_size=2, max_new_tokens=2, stop_ids=tok.stop_ids, pad_id=tok.pad_id)
    lm, params = tiny_policy(tok.vocab_size, table.prompt_len + 2)
    models = experience.Models(lm, lm, None, lambda _, *batch, rows=None: reward(*batch, rows=rows), values=False)
    source = pd.table_prompts(table, rows=True)

    @jax.jit
    def run(key):
        prompt, valid, rows = ph.prompt_phase(source, key, None, cfg, lm)
        p = {"policy": params, "critic": params}
        return ph.sample_phase(models, p, None, jax.random.fold_in(key, 1), prompt, valid, cfg, Devices(), rows)

    s = run(jax.random.PRNGKey(4))
    rows = np.asarray(s.row)
    assert np.all(rows[::2] == rows[1::2]) and len(set(rows.tolist())) > 1  # groups of 2, several rows
    texts = [tok.decode(np.asarray(p)[np.asarray(v)].tolist()) for p, v in zip(s.prompt, s.prompt_valid)]
    assert texts == [table.texts[r] for r in rows]
    assert [p for p, _, _ in seen] == texts and np.all(np.asarray(s.scores) == 1.0), seen
    assert reward.take_stats() == {"reward_scored": 1.0}


def test_a_source_without_rows_and_a_two_argument_reward_still_work(tok):
    """Today's prompt sources (no row ids) give -1: the reward gets None columns; today's
    two-argument functions get none at all."""
    records = [pd.Record(f"f:{i}", f"row {i} please", columns={"answer": str(7 * i)}) for i in range(4)]
    table = pd.encode_prompts(records, tok, 16, False, False)
    cfg = TokenPPOConfig(batch_size=4, max_new_tokens=2, stop_ids=tok.stop_ids, pad_id=tok.pad_id)
    prompt, valid, rows = ph.prompt_phase(pd.table_prompts(table), jax.random.PRNGKey(0), None, cfg, None)
    assert np.all(np.asarray(rows) == -1) and prompt.shape == (4, table.prompt_len)
    legacy = TextReward(lambda ps, rs_: [float(len(p)) for p in ps], "legacy", tok)
    legacy.bind_rows(table.columns)
    response, mask = jnp.zeros((4, 2), jnp.int32) + tok.stop_ids[0], jnp.ones((4, 2), bool)
    out = jax.jit(legacy)(prompt, valid, response, mask, jnp.arange(4, dtype=jnp.int32))
    assert legacy.error is None and np.all(np.asarray(out) == len("row 0 please"))
    got = []
    optional = TextReward(lambda ps, cs, answer=None: got.append(answer) or [None] * len(ps), "opt", tok)
    optional.bind_rows(table.columns)
    assert np.all(np.asarray(optional(prompt, valid, response, mask)) == 0.0)  # None scores 0 ...
    assert got == [[None] * 4] and optional.take_stats() == {"reward_scored": 0.0}  # ... and is counted
    optional(prompt, valid, response, mask, jnp.asarray([2, 0, -1, 3], jnp.int32))
    assert got[-1] == ["14", "0", None, "21"]
    with pytest.raises(RewardSpecError, match="takes the column 'gold', which the data lacks"):
        TextReward(lambda ps, cs, gold: [0.0] * len(ps), "needs", tok).bind_rows(table.columns)


def test_a_text_task_held_out_split_scores_evaluation_rows_with_their_columns(tmp_path, tok):
    folder = tmp_path / "model"
    fx.write_tokenizer(folder)
    (folder / "config.json").write_text(json.dumps({"vocab_size": tok.vocab_size, "n_positions": 64}))
    from purejaxppo.lm.tasks.text_task import make_text_task

    seen = []

    def fn(prompts, completions, answer):
        seen.append(list(zip(prompts, answer)))
        return [1.0] * len(prompts)

    source = write_jsonl(tmp_path / "d.jsonl", question_rows())
    task, data = make_text_task(
        str(folder), source, lambda t: TextReward(fn, "fn", t), max_new=4, held_out=3, split_seed=2
    )
    assert len(task.table.texts) == 9 and len(task.eval_table.texts) == 3 and len(task.rows) == 12
    prompt, valid = task.evaluation_prompts(5)
    task.score(prompt, valid, jnp.zeros((5, 4), jnp.int32), jnp.ones((5, 4), bool), rows=task.evaluation_rows(5))
    assert all(a == str(7 * int(p.split()[1])) for p, a in seen[-1]) and len(seen[-1]) == 5
    assert data.hashes["prompts"] == rs.source_hash(source) and data.cut["held_out"] == 0


WORKER = r"""
import functools, json, sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
import jax, numpy as np
from test_rlvr_data import question_rows, reading_reward, tiny_policy
import _lm_fixtures as fx
from purejaxppo.lm.checkpoints.tokenizer import load_tokenizer
from purejaxppo.lm.data import prompts as pd
from purejaxppo.lm.data.row_sources import row_record
from purejaxppo.lm.ppo.data_parallel import data_parallel
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
fx.write_tokenizer({folder!r})
tok = load_tokenizer({folder!r})
table = pd.encode_prompts([row_record(r, str(i)) for i, r in enumerate(question_rows())], tok, 16, False, False)
lm, params = tiny_policy(tok.vocab_size, table.prompt_len + 3)
cfg = TokenPPOConfig(batch_size=8, group_size=2, advantage="grpo", max_new_tokens=3, num_iterations=2,
                     num_minibatches=2, stop_ids=tok.stop_ids, pad_id=tok.pad_id)
out = {{}}
for n in (1, 2):
    seen = []
    reward = reading_reward(tok, table, seen)
    fn = lambda _, *batch, rows=None: reward(*batch, rows=rows)
    tp = data_parallel(functools.partial(make_token_ppo, cfg, lm, fn, prompts=pd.table_prompts(table, rows=True)), n)
    state, m = jax.jit(tp.train)(jax.random.PRNGKey(1), params, params)
    out[n] = dict(score=np.asarray(m["score"]).tolist(), calls=len(seen), error=reward.error,
                  mismatched=[s for s in seen if s[0] != f"row {{s[2]}} please" or s[1] != str(7 * s[2])])
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_two_devices_give_each_completion_its_own_rows_columns(tmp_path):
    """The same through make_token_ppo's iteration, on one device and split over two (each
    device scores its half of the batch with its half of the row ids)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    tests = os.path.dirname(os.path.abspath(__file__))
    code = WORKER.format(root=ROOT, tests=tests, folder=str(tmp_path / "tok"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][7:])
    for n, r in out.items():
        assert r["error"] is None and r["calls"] == 16 and r["mismatched"] == [], (n, r)
        assert r["score"] == [1.0, 1.0], (n, r)  # every completion scored with its own row's answer
