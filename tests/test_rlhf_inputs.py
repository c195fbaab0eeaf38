"""What rlhf's inputs become: the flags generated from TokenPPOConfig, and the Python API's
refusals of a prompts function that does not fit (traced shapes only: nothing compiles)."""

import argparse
import dataclasses

import jax
import jax.numpy as jnp
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.sft.sft_training import init_tiny_lm
from purejaxppo.lm.tasks.builtin_tasks import make_task
from purejaxppo.lm.ppo.token_ppo import make_token_ppo


def parser():
    from purejaxppo.cli.rlhf_cmd import add_rlhf

    p = argparse.ArgumentParser(exit_on_error=False)
    add_rlhf(p)
    return p


def test_every_config_field_has_a_flag_whose_default_is_the_configs():
    from purejaxppo.cli.flags import show_default
    from purejaxppo.cli.rlhf_cmd import config_flag, token_config

    p = parser()
    actions = {a.option_strings[0]: a for a in p._actions if a.option_strings}
    fields = [f for f in dataclasses.fields(TokenPPOConfig) if f.metadata["cli"]]
    assert len(fields) > 25
    for f in fields:  # the flag's help is the field's declaration: its sentence and its default
        action = actions[config_flag(f.name)]
        assert action.dest == f"cfg_{f.name}" and action.help.startswith(f.metadata["help"].replace("%", "%%"))
        assert f"default: {show_default(f.default)}" in action.help, f.name
    # a text run takes the config's defaults, a built-in task its preset (written out here)
    args = p.parse_args([])
    assert token_config(args, text=True) == TokenPPOConfig()
    assert token_config(args, text=False) == TokenPPOConfig(num_iterations=80, actor_lr=1e-3, critic_lr=1e-3, beta=0.02)
    given = p.parse_args(
        [
            "--whiten-advantages",
            "false",
            "--kl-target",
            "3",
            "--clip-value",
            "no",
            "--lora-rank",
            "4",
            "--lora-targets",
            "c_attn,c_fc",
        ]
    )
    cfg = token_config(given, text=True)
    assert (cfg.whiten_advantages, cfg.clip_value, cfg.adaptive_kl, cfg.kl_target) == (False, False, True, 3.0)
    assert (cfg.lora_rank, cfg.lora_targets) == (4, ("c_attn", "c_fc"))


@pytest.mark.parametrize(
    "flags",
    [
        ["--batch", "5e5"],
        ["--iterations", "1.0"],
        ["--beta", "0,1"],
        ["--whiten-advantages", "maybe"],
        ["--seeds", "2.5"],
        ["--max-new-tokens", "x"],
        ["--lora-targets", "c_attn,,c_fc"],
    ],
)
def test_the_strict_parsers_refuse_loose_spellings(flags):
    with pytest.raises(argparse.ArgumentError):
        parser().parse_args(flags)


def _ppo(prompts):
    task = make_task("reverse", max_len=4, max_new=6)
    lm, params = init_tiny_lm(task, jax.random.PRNGKey(0), d_model=16, n_layers=1)
    cfg = TokenPPOConfig(batch_size=8, num_minibatches=2, max_new_tokens=task.max_new, stop_ids=task.stop_ids)
    ppo = make_token_ppo(cfg, lm, lambda _, *b: task.score(*b), prompts=prompts)
    state = jax.eval_shape(lambda k: ppo.init(k, params, params), jax.random.PRNGKey(1))
    return task, ppo, state


def test_python_api_refuses_a_prompt_function_of_the_wrong_batch_or_past_the_positions():
    task = make_task("reverse", max_len=4, max_new=6)
    half = lambda key, batch: task.prompts(key, batch // 2)  # noqa: E731
    _, ppo, state = _ppo(half)
    with pytest.raises(
        ConfigError,
        match=r"prompts\(key, 8\) returned prompt \(4, 5\) and prompt_valid \(4, 5\); "
        r"both must be \[batch_size=8, P\]",
    ):
        jax.eval_shape(ppo.iteration, state)

    def wide(key, batch):  # 20 more left-padding slots: 25 + 6 > the TinyLM's 11 positions
        p, v = task.prompts(key, batch)
        return jnp.pad(p, ((0, 0), (20, 0))), jnp.pad(v, ((0, 0), (20, 0)))

    _, ppo, state = _ppo(wide)
    with pytest.raises(ConfigError, match=r"prompts of 25 slots \+ max_new_tokens=6 exceed the model's 11 positions"):
        jax.eval_shape(ppo.iteration, state)
    _, ppo, state = _ppo(task.prompts)  # the task's own prompts fit
    jax.eval_shape(ppo.iteration, state)


def test_chunk_defaults_to_the_run_records_and_a_resume_takes_it(tmp_path, monkeypatch):
    """No ``--chunk``: the command leaves the chunk to ``train_rlhf``'s default, which is the run
    record's (``CHUNK_UPDATES``, 25, written out here); ``--resume --chunk 3`` passes 3 on, a
    resume without it keeps the folder's own. The training calls are replaced by recorders."""
    import inspect
    import json

    import purejaxppo.programs.rlhf_run as rlhf_run
    from purejaxppo.cli import main
    from purejaxppo.programs.rlhf_settings import RLHFSettings
    from purejaxppo.run.record import CHUNK_UPDATES, RunRecord

    # the Python API's default is the record's
    assert inspect.signature(rlhf_run.train_rlhf).parameters["chunk_updates"].default == CHUNK_UPDATES == 25
    calls = []
    monkeypatch.setattr(rlhf_run, "sft_model", lambda settings, seed, start=None: (None, None, {}))
    monkeypatch.setattr(rlhf_run, "train_rlhf", lambda *a, **kw: calls.append(("train", kw)))
    monkeypatch.setattr(rlhf_run, "resume_rlhf", lambda *a, **kw: calls.append(("resume", kw)))
    monkeypatch.chdir(tmp_path)
    assert main(["rlhf", "--quiet", "--run-dir", str(tmp_path / "new")]) == 0
    ((kind, kw),) = calls
    assert kind == "train" and kw.get("chunk_updates", CHUNK_UPDATES) == 25, kw
    folder = tmp_path / "old"
    folder.mkdir()
    record = RunRecord("rlhf", TokenPPOConfig(batch_size=8), RLHFSettings(), chunk_updates=7)
    (folder / "config.json").write_text(json.dumps(record.to_json()))
    calls.clear()
    assert main(["rlhf", "--quiet", "--resume", str(folder)]) == 0
    assert main(["rlhf", "--quiet", "--resume", str(folder), "--chunk", "3"]) == 0
    assert [kw.get("chunk_updates") for _, kw in calls] == [None, 3] and calls[0][0] == "resume"


@pytest.mark.slow
def test_a_run_with_a_reward_model_beside_a_python_reward_logs_each_and_scores_their_weighted_sum(tmp_path):
    """``rlhf --reward FILE.py:score --reward-model DIR --reward-weights 0.5,2`` trains (the reward
    model's score in the compiled iteration, the function's through its callback); metrics.csv
    has each part's column, and each iteration's score (the batch mean) is 0.5 * the function's
    mean + 2 * the reward model's (every response scored by both: the means are the batch's)."""
    import json
    import os
    import subprocess
    import sys

    import numpy as np
    from _lm_fixtures import tiny_gpt2_folder
    from test_rlvr_rewards import _reward_model_folder

    from purejaxppo.run.metrics_file import load_rows

    model = tiny_gpt2_folder(tmp_path / "model")
    rm = _reward_model_folder(tmp_path, model)
    rows = [{"prompt": f"what is {i} plus one", "answer": str((3 * i) % 7)} for i in range(6)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(
        "def score(prompts, completions, answer):\n    return [float(a) for a in answer]\n"
    )
    args = ["--model", model, "--prompts", str(tmp_path / "data.jsonl"), "--reward", f"{tmp_path}/reward.py:score"]
    args += ["--reward-model", rm, "--reward-weights", "0.5,2", "--batch", "4", "--iterations", "2", "--chunk", "1"]
    args += ["--minibatches", "2", "--epochs", "1", "--max-new-tokens", "4", "--eval-every", "0", "--quiet"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-m", "purejaxppo", "rlhf", *args, "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, got, _ = load_rows(str(tmp_path / "run" / "metrics.csv"))
    table = np.array([[float(x) for x in r] for r in got])
    col = {name: table[:, header.index(name)] for name in header}
    assert len(table) == 2 and np.all(col["reward_model_scored"] == 1) and np.all(col["reward_score_scored"] == 1)
    assert np.all(np.abs(col["reward_model_mean"]) > 1e-3)  # the model's part is not nothing
    np.testing.assert_allclose(col["score"], 0.5 * col["reward_score_mean"] + 2 * col["reward_model_mean"], rtol=1e-5)
