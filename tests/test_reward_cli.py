"""``python -m purejaxppo reward`` (cli/reward_cmd.py, programs/reward_program.py, reward_run.py).

A local GPT-2 folder with random weights and a BPE ``tokenizer.json`` trained here with
``tokenizers``; text pairs a hidden rule decides (the chosen answer is the polite one). Checks:
the run folder (metrics per epoch, the exported HF-layout reward model loading back with the
run's own final parameters); an interrupted run resumed equals the uninterrupted one bit for
bit; bad inputs exit 2 with one ``error:`` line and create nothing.
"""

import csv
import json
import os

import jax
import numpy as np
import pytest

from purejaxppo.cli.main import main
from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.checkpoints.gpt2_hf import save_gpt2
from purejaxppo.lm.rewards.reward_model import load_reward_model, make_reward_fn
from purejaxppo.programs.reward_program import RewardConfig, RewardSettings
from purejaxppo.programs.reward_run import prepare, resume_reward, train_reward
from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint

GOOD, BAD = ["please", "thanks", "kindly", "welcome"], ["no", "go away", "whatever", "stop"]
TOPICS = ["the weather", "a cat", "my code", "the train", "lunch", "a song", "the sea", "a book"]


def _pairs(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            t = TOPICS[rng.integers(len(TOPICS))]
            good, bad = f"{t} {GOOD[rng.integers(4)]}", f"{t} {BAD[rng.integers(4)]}"
            f.write(json.dumps({"prompt": f"tell me about {t}", "chosen": good, "rejected": bad}) + "\n")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("reward")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [f"tell me about {t} {w}" for t in TOPICS for w in GOOD + BAD]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=80, special_tokens=["<pad>", "<eos>", "<unk>"]))
    model = root / "gpt2"
    module = GPT2(tok.get_vocab_size(), 32, 32, 1, 2)
    import jax.numpy as jnp

    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    save_gpt2(model, module, params, value_head=False)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "eos_token_id": 1, "pad_token_id": 0}))
    tok.save(str(model / "tokenizer.json"))
    _pairs(root / "pairs.jsonl", 96, seed=0)
    return root, model, root / "pairs.jsonl"


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def test_reward_command_trains_and_exports_an_hf_reward_model(folders, capsys):
    root, model, pairs = folders
    run = root / "run"
    code = main(
        [
            "reward",
            "--model",
            str(model),
            "--pairs",
            str(pairs),
            "--run-dir",
            str(run),
            "--epochs",
            "3",
            "--lr",
            "3e-3",
            "--minibatch",
            "8",
            "--held-out",
            "0.25",
            "--quiet",
        ]
    )
    assert code == 0
    rows = _rows(run)
    assert [int(r["update"]) for r in rows] == [0, 1, 2]
    assert {"train_loss", "train_accuracy", "eval_loss", "eval_accuracy"} <= set(rows[0])
    assert float(rows[-1]["eval_accuracy"]) >= 0.9, rows  # the rule is a word: easy to learn
    assert float(rows[-1]["eval_loss"]) < float(rows[0]["eval_loss"])
    info = json.loads((run / "config.json").read_text())
    assert info["kind"] == "reward-model" and len(info["settings"]["pairs_sha256"]) == 64
    # the exported model scores like the run's final checkpoint
    fn, loaded = load_reward_model(run / "model")
    assert os.path.isfile(run / "model" / "tokenizer.json")
    settings = RewardSettings.from_dict(info["settings"])
    lm, params, train, held, _ = prepare(settings, RewardConfig(**info["config"]), info["seed"])
    ckpt = latest_checkpoint(str(run / "checkpoints"))
    state, _ = restore_checkpoint(ckpt, _state_template(run, info, lm, params, train, held))
    final = jax.tree.map(lambda x: np.asarray(x[0]), state.params)
    batch = (held.prompt, held.prompt_valid, held.chosen, held.chosen_mask)
    np.testing.assert_array_equal(fn(loaded, *batch), make_reward_fn(lm)(final, *batch))


def _state_template(run, info, lm, params, train, held):
    from purejaxppo.programs.reward_program import RewardProgram

    prog = RewardProgram(
        info["config"] if not isinstance(info["config"], dict) else RewardConfig(**info["config"]),
        info["settings"],
        lm,
        params,
        train,
        held,
    )
    return prog.init(jax.random.split(jax.random.PRNGKey(0), info["num_seeds"]))


def test_an_interrupted_run_resumes_exactly(folders):
    root, model, pairs = folders
    cfg = RewardConfig(epochs=3, minibatch=8, learning_rate=3e-3, held_out=0.25)
    whole = train_reward(cfg, str(model), str(pairs), run_dir=str(root / "whole"), seed=1)
    part = train_reward(cfg, str(model), str(pairs), run_dir=str(root / "part"), seed=1, stop_after=1)
    assert not part.finished and not os.path.exists(root / "part" / "model")
    done = resume_reward(str(root / "part"))
    assert done.finished
    jax.tree.map(np.testing.assert_array_equal, done.runner_state, whole.runner_state)
    for k in whole.metrics:
        np.testing.assert_array_equal(done.metrics[k], whole.metrics[k])


@pytest.mark.parametrize("case", ["no-pairs-file", "bad-line", "no-tokenizer", "no-model"])
def test_bad_inputs_exit_2_with_one_error_line(folders, tmp_path, capsys, case):
    root, model, pairs = folders
    args = {"--model": str(model), "--pairs": str(pairs)}
    if case == "no-pairs-file":
        args["--pairs"] = str(tmp_path / "missing.jsonl")
    elif case == "bad-line":
        bad = tmp_path / "bad.jsonl"
        bad.write_text(pairs.read_text() + '{"prompt": "x", "chosen": 3}\n')
        args["--pairs"] = str(bad)
    elif case == "no-tokenizer":
        bare = tmp_path / "bare"
        bare.mkdir()
        for name in ("config.json", "model.safetensors"):
            (bare / name).write_bytes((model / name).read_bytes())
        args["--model"] = str(bare)
    else:
        args["--model"] = str(tmp_path / "nowhere")
    run = tmp_path / "run"
    code = main(["reward", *[x for kv in args.items() for x in kv], "--run-dir", str(run), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert not run.exists()
    want = {
        "no-pairs-file": "missing.jsonl",
        "bad-line": "line 97",
        "no-tokenizer": "tokenizer.json",
        "no-model": "nowhere",
    }[case]
    assert want in err[0]
