"""``rlhf --env``: token-level PPO on a multi-turn JAX environment from the command line
(purejaxppo/cli/rlhf_env_cmd.py, purejaxppo/programs/rlhf_env.py).

* Refusals, before any work, one ``error:`` line each: a flag that makes no sense with an
  environment (a reward, a reward model, prompts, an SFT stage, dynamic sampling, several
  devices, ...), a Python environment (the calculator, a factory returning one: the Python API),
  a tokenizer that merges digits (the guessing game reads one digit per token), a bad spec.
* A run of 2 iterations on the guessing game: metrics.csv holds one row per iteration and seed,
  equal to the same iterations built here through the Python API (``make_episode_ppo`` with the
  run's own keys and model), and ``score`` equals ``terminated`` (the game pays 1 exactly on the
  guess that ends it).
* Stopped after chunk 1 and resumed: metrics.csv and every checkpoint leaf equal the
  uninterrupted run's, bit for bit.
* ``--model DIR --export OUT``: OUT's logits are the run's final policy's.
"""

import csv
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.cli.main import main
from purejaxppo.config import ConfigError
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves

GAME = ["--env", "guess-number", "--env-option", "hi=9", "--max-turns", "3", "--turn-tokens", "2"]
TINY = ["--d-model", "16", "--layers", "1", "--iterations", "2", "--batch", "8", "--minibatches", "2", "--epochs", "1"]


def _refused(argv, tmp_path, capsys) -> str:
    """The one ``error:`` line of a command refused before any work (nothing created)."""
    before = sorted(os.listdir(tmp_path))
    assert main(["rlhf", *argv, "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert sorted(os.listdir(tmp_path)) == before
    return err[0]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--reward", "math"], "--reward"),
        (["--reward-model", "rm"], "--reward-model"),
        (["--prompts", "p.jsonl"], "--prompts"),
        (["--sft-data", "d.jsonl"], "--sft-data"),
        (["--sft-steps", "5"], "--sft-steps"),
        (["--eval-every", "2"], "--eval-every"),
        (["--task", "reverse"], "--task"),
        (["--init", "gpt2"], "--init"),
        (["--dynamic-sampling", "true", "--advantage", "grpo", "--group-size", "2"], "--dynamic-sampling"),
        (["--devices", "2"], "--devices"),
        (["--init-from", "somewhere"], "--init-from"),
    ],
)
def test_a_flag_that_makes_no_sense_with_env_is_refused(flags, named, tmp_path, capsys):
    line = _refused([*GAME, *flags], tmp_path, capsys)
    assert named in line and "--env" in line, line


def test_python_environments_and_bad_specs_are_refused_naming_the_fix(tmp_path, capsys):
    line = _refused(["--env", "calculator"], tmp_path, capsys)
    assert "Python environment" in line and "make_episode_ppo(...).learn" in line and "docs/multiturn.md" in line
    (tmp_path / "envs.py").write_text(
        "class Tool:\n"
        "    def reset(self, rows):\n        return ['']\n"
        "    def step(self, actions, active):\n        return []\n"
        "def python_env(tokenizer):\n    return Tool()\n"
        "def broken(tokenizer, size=1):\n    raise RuntimeError('no such board')\n"
        "def nothing(tokenizer):\n    return 3\n"
    )
    cases = [
        ("python_env", [], "Python environment"),
        ("broken", [], "the factory failed: RuntimeError: no such board"),
        ("broken", ["--env-option", "colour=red"], "unexpected keyword argument 'colour'"),
        ("nothing", [], "returned int, not a JaxTextEnv"),
        ("missing", [], "has no function 'missing'"),
    ]
    for name, extra, message in cases:
        line = _refused(["--env", f"{tmp_path / 'envs.py'}:{name}", *extra], tmp_path, capsys)
        assert message in line, line
    assert "FILE.py:FACTORY" in _refused(["--env", "chess"], tmp_path, capsys)
    assert "lo, hi and intro" in _refused([*GAME, "--env-option", "secret=3"], tmp_path, capsys)
    # a budget too small for the reset observation and one turn
    assert "--max-new-tokens 10" in _refused([*GAME, "--max-new-tokens", "10"], tmp_path, capsys)


def test_the_guessing_game_refuses_a_tokenizer_that_merges_digits():
    from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
    from purejaxppo.programs.rlhf_env import ALPHABET, make_env

    class Merging(CharTokenizer):  # the char tokenizer with one more token: "42"
        @property
        def vocab_size(self):
            return super().vocab_size + 1

        def decode(self, ids):
            plain = CharTokenizer(self.alphabet)
            return "".join("42" if int(i) == plain.vocab_size else plain.decode([i]) for i in ids)

    env = make_env("guess-number", CharTokenizer(ALPHABET), {"hi": 20}, 3)
    assert env.hi == 20 and env.max_turns == 3 and env.digit_ids == tuple(range(2, 12))
    merging = Merging(ALPHABET)
    with pytest.raises(ConfigError, match=rf"holds '42' \(id {merging.vocab_size - 1}\), several digits in one token"):
        make_env("guess-number", merging, {}, 3)


def test_the_settings_keep_the_environment_through_config_json():
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    st = RLHFSettings(
        task="env", env="guess-number", env_options=(("hi", 9),), max_turns=3, turn_tokens=2, max_new_tokens=0
    )
    back = RLHFSettings.from_dict(json.loads(json.dumps(st.to_dict())))
    assert back == st and hash(back) == hash(st)
    task = back.make_task()
    # the budget by default: the intro (28 characters: "Guess a number from 1 to 9.\n") and 3 turns of 2 + 28
    assert task.env.obs_width == 28 and task.max_new == 28 + 3 * (2 + 28) and task.prompt_len == 1


def test_a_users_factory_gets_the_tokenizer_and_its_options(tmp_path):
    from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    (tmp_path / "mine.py").write_text(
        "from purejaxppo.lm import GuessNumber\n"
        "def make(tokenizer, top=5):\n"
        "    return GuessNumber.from_tokenizer(tokenizer, 0, top, 2, intro='Pick ' + str(top) + '.')\n"
    )
    st = RLHFSettings(task="env", env=f"{tmp_path / 'mine.py'}:make", env_options=(("top", 7),), max_new_tokens=0)
    task = st.make_task()
    assert isinstance(task.tokenizer, CharTokenizer) and task.tokenizer.decode(task.env.intro) == "Pick 7."
    assert (task.env.lo, task.env.hi, task.env.max_turns) == (0, 7, 2)
    # the longest observation is " no number\n" (11): 11 + 4 turns of 4 + 11
    assert task.env.obs_width == 11 and task.max_new == 11 + 4 * (4 + 11)


def _rows(run):
    with open(os.path.join(run, "metrics.csv")) as f:
        return list(csv.reader(f))


@pytest.mark.slow
def test_a_run_on_the_guessing_game_is_the_python_apis_iterations(tmp_path):
    from types import SimpleNamespace

    from purejaxppo.lm.envs.char_tokenizer import EOS_ID, PAD_ID, CharTokenizer
    from purejaxppo.lm.envs.episode_ppo import make_episode_ppo
    from purejaxppo.lm.envs.guess_number import GuessNumber
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig
    from purejaxppo.lm.sft.sft_training import init_tiny_lm
    from purejaxppo.programs.rlhf_env import ALPHABET
    from purejaxppo.programs.rlhf_run import run_keys
    from purejaxppo.run.run_folder import load_record

    run = str(tmp_path / "run")
    assert main(["rlhf", *GAME, *TINY, "--seeds", "2", "--seed", "3", "--run-dir", run, "--quiet"]) == 0
    rows = _rows(run)
    header, body = rows[0], rows[1:]
    assert [r[:2] for r in body] == [["0", "0"], ["0", "1"], ["1", "0"], ["1", "1"]]
    got = {name: np.array([float(r[header.index(name)]) for r in body]) for name in header[2:]}
    np.testing.assert_array_equal(got["score"], got["terminated"])  # reward 1 exactly on the winning guess
    assert np.all((got["turns"] >= 1) & (got["turns"] <= 3))
    # the same two iterations through the Python API, from the run's keys and TinyLM, the game and
    # its prompts built here as the command's contract says (one EOS token; a row id in [0, 2**20))
    st = load_record(run).settings
    assert (st.env, st.env_options, st.max_turns, st.turn_tokens) == ("guess-number", (("hi", 9),), 3, 2)
    tok = CharTokenizer(ALPHABET)
    game = GuessNumber.from_tokenizer(tok, hi=9, max_turns=3)
    budget = 28 + 3 * (2 + 28)  # "Guess a number from 1 to 9.\n" and three turns of 2 + 28

    def prompts(key, n):
        return jnp.full((n, 1), EOS_ID, jnp.int32), jnp.ones((n, 1), bool), jax.random.randint(key, (n,), 0, 2**20)

    shape = SimpleNamespace(vocab_size=tok.vocab_size, prompt_len=1, max_new=budget)
    lm, params = init_tiny_lm(shape, jax.random.fold_in(jax.random.PRNGKey(3), 1), 16, 1, 2)
    cfg = TokenPPOConfig(batch_size=8, num_iterations=2, update_epochs=1, num_minibatches=2)
    cfg = cfg.replace(max_new_tokens=budget, stop_ids=(EOS_ID,), pad_id=PAD_ID)
    ep = make_episode_ppo(cfg, lm, game, max_turns=3, turn_tokens=2, prompts=prompts)
    step = jax.jit(ep.iteration)
    for seed, key in enumerate(run_keys(3, 2)[0]):
        state = ep.init(key, params, params)
        for it in range(2):
            state, metrics = step(state)
            for name, value in metrics.items():
                np.testing.assert_allclose(got[name][2 * seed + it], float(value), rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_stopped_after_chunk_one_and_resumed_equals_the_whole_run_bit_for_bit(tmp_path, capsys):
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    argv = ["rlhf", *GAME, *TINY, "--seeds", "2", "--chunk", "1", "--quiet"]
    assert main([*argv, "--run-dir", whole]) == 0
    assert main([*argv, "--run-dir", part, "--stop-after", "1"]) == 0
    assert latest_checkpoint(os.path.join(part, "checkpoints")).endswith("update_00000001")
    assert len(_rows(part)) == 1 + 2  # the header and chunk 1's rows (two seeds)
    assert main(["rlhf", "--resume", part, "--quiet"]) == 0
    assert _rows(part) == _rows(whole)
    capsys.readouterr()
    assert main(["eval", whole]) == 2  # no fixed prompts to answer: one line naming metrics.csv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no fixed evaluation prompts" in err[0] and "metrics.csv" in err[0], err
    (la, ma), (lb, mb) = (read_leaves(latest_checkpoint(os.path.join(r, "checkpoints"))) for r in (whole, part))
    assert ma["update"] == mb["update"] == 2 and la.keys() == lb.keys()
    for k in la:
        np.testing.assert_array_equal(np.asarray(la[k]), np.asarray(lb[k]), err_msg=k)


@pytest.mark.slow
def test_sigint_after_chunk_one_exits_130_and_resumes_to_the_uninterrupted_run(tmp_path):
    import signal

    from test_lm_interrupts import _cli, _promised, _same_run, _stopped

    argv = ["rlhf", *GAME, *TINY[:4], *TINY[6:], "--iterations", "3", "--chunk", "1", "--quiet"]
    whole, run = str(tmp_path / "whole"), str(tmp_path / "run")
    assert _cli([*argv, "--run-dir", whole]).returncode == 0
    line = _stopped(_cli([*argv, "--run-dir", run], "chunk", 1, signal.SIGINT))  # exit 130, one line
    assert not _promised(line, run).endswith("update_00000003")  # stopped before the end
    p = _cli(["rlhf", "--resume", run, "--quiet"])
    assert p.returncode == 0, p.stderr[-3000:]
    _same_run(run, whole)  # metrics.csv and every checkpoint leaf, exactly


@pytest.mark.slow
def test_a_model_folder_run_exports_its_policy(tmp_path, capsys):
    from _lm_fixtures import tiny_gpt2_folder, train_bpe, write_tokenizer

    from purejaxppo.lm.checkpoints.pretrained import load_pretrained
    from purejaxppo.programs.rlhf_export import final_policy

    model = tiny_gpt2_folder(tmp_path / "model", n_positions=128)  # byte-level BPE: digits are single bytes
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    argv = [*GAME, "--model", model, "--iterations", "1", "--batch", "4", "--minibatches", "1", "--epochs", "1"]
    assert main(["rlhf", *argv, "--run-dir", run, "--export", out, "--quiet"]) == 0
    exported_lm, exported = load_pretrained(out)
    _, lm, policy, update = final_policy(run)
    assert update == 1
    tokens = jnp.array([[5, 6, 7, 8], [9, 10, 11, 12]])
    valid = jnp.ones((2, 4), bool)
    np.testing.assert_array_equal(exported_lm.logits(exported, tokens, valid), lm.logits(policy, tokens, valid))
    # a tokenizer trained on numbers merges digits: refused before any work
    merged = tiny_gpt2_folder(tmp_path / "merged", n_positions=128)
    write_tokenizer(merged, train_bpe(lines=[" ".join(str(n) for n in range(i, i + 40)) for i in range(0, 400, 7)]))
    (tmp_path / "refused").mkdir()
    line = _refused([*GAME, "--model", merged], tmp_path / "refused", capsys)
    assert "several digits in one token" in line, line
