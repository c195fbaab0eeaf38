"""``rlhf --init-from RUN_DIR`` (purejaxppo/programs/rlhf_init_from.py, cli/rlhf_cmd.py).

* Refusals, one ``error:`` line before any work, nothing created: a folder of a kind that cannot
  start a token-level run (run, sweep, PBT, reward model: hand-written records, routed through
  the kinds' registry; the line names the kinds that can), a missing folder, another model
  (the settings that differ named), ``--init-from`` with ``--resume``.
* A working start (slow): a short toy run A, then ``rlhf --init-from A``; the new run's frozen
  reference (its starting policy) equals A's final policy (LoRA-free here: the policy leaves of
  A's newest checkpoint, read straight from the file) bit for bit, differs from A's own start,
  and config.json records where it came from; a task whose lengths give another position table
  is refused naming the parameter.
"""

import json
import os

import numpy as np
import pytest

from purejaxppo.cli.main import main
from purejaxppo.lm.config import TokenPPOConfig
from purejaxppo.programs.rlhf_program import RLHFSettings
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves
from purejaxppo.run.record import RunRecord

SETTINGS = RLHFSettings(
    task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=20, eval_every=0
)
TOY = ["--task-option", "max_len=4", "--task-option", "max_new=6", "--d-model", "16", "--layers", "1", "--quiet"]
SMALL = ["--iterations", "1", "--batch", "8", "--minibatches", "2", "--epochs", "1", "--eval-every", "0"]


def _one_error(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Hand-written folders of every other kind (their config.json only) and an rlhf one."""
    from test_run_kinds import RECORDS

    from purejaxppo.programs.reward_program import RewardConfig, RewardSettings

    root = tmp_path_factory.mktemp("sources")
    records = {k: v for k, v in RECORDS.items() if k != "rlhf"}
    records["reward-model"] = RunRecord("reward-model", RewardConfig(), RewardSettings())
    records["rlhf"] = RunRecord("rlhf", TokenPPOConfig(batch_size=8), SETTINGS)
    out = {}
    for name, record in records.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(record.to_json()))
        out[name] = str(root / name)
    return out


@pytest.mark.parametrize("kind", ["run", "sweep", "pbt", "reward-model"])
def test_a_folder_of_another_kind_is_refused_naming_what_can_start_a_run(folders, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _one_error(
        capsys,
        ["rlhf", *TOY, "--init-from", folders[kind], "--run-dir", "new"],
        f"--init-from {folders[kind]}: that folder holds a",
        "cannot start a token-level run; pass a folder of: token-level PPO (rlhf)",
    )
    assert os.listdir(tmp_path) == []


def test_missing_folder_other_model_and_resume_are_refused(folders, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "nowhere")
    _one_error(capsys, ["rlhf", *TOY, "--init-from", missing], f"--init-from {missing}: run folder", "does not exist")
    _one_error(
        capsys,
        ["rlhf", *TOY[:-3], "--layers", "2", "--quiet", "--init-from", folders["rlhf"]],
        f"--init-from {folders['rlhf']}: that run has another model (n_layers: 1 there, 2 here)",
    )
    _one_error(capsys, ["rlhf", "--resume", folders["rlhf"], "--init-from", folders["rlhf"]], "drop --init-from")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_run_started_from_another_runs_policy(tmp_path, monkeypatch, capsys):
    from purejaxppo.programs.rlhf_run import train_rlhf

    source = str(tmp_path / "a")
    cfg = TokenPPOConfig(batch_size=8, num_iterations=2, num_minibatches=2, update_epochs=1, actor_lr=1e-2)
    train_rlhf(cfg, SETTINGS, run_dir=source, chunk_updates=1)
    a, _ = read_leaves(latest_checkpoint(os.path.join(source, "checkpoints")))
    new = str(tmp_path / "b")
    assert main(["rlhf", *TOY, *SMALL, "--init-from", source, "--run-dir", new]) == 0
    b, _ = read_leaves(latest_checkpoint(os.path.join(new, "checkpoints")))
    policy = ".train.params['policy']"
    starts = {k[len(".reference") :] for k in b if k.startswith(".reference")}
    assert len(starts) > 4
    moved = 0
    for at in starts:
        np.testing.assert_array_equal(b[".reference" + at], a[policy + at], err_msg=at)
        moved += not np.array_equal(a[policy + at], a[".reference" + at])
    assert moved > 0  # A's training moved its policy away from its own start
    info = json.load(open(os.path.join(new, "config.json")))
    assert info["init_from"]["run_dir"] == source and info["init_from"]["update"] == 2
    assert info["settings"]["sft_steps"] == 0 and info["sft"]["steps"] == 0
    # a task with longer strings: another position table
    monkeypatch.chdir(tmp_path)
    _one_error(
        capsys,
        ["rlhf", *TOY, "--task-option", "max_len=5", *SMALL, "--init-from", source, "--run-dir", "c"],
        f"--init-from {source}: ",
        "there and",
    )
    assert not os.path.exists(tmp_path / "c")
