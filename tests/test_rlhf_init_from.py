"""``rlhf --init-from RUN_DIR`` (purejaxppo/programs/rlhf_init_from.py, cli/rlhf_cmd.py).

* Refusals, one ``error:`` line before any work, nothing created: a folder of a kind that cannot
  start a token-level run (run, sweep, PBT, reward model: hand-written records, routed through
  the kinds' registry; the line names the kinds that can), a missing folder, another model
  (the settings that differ named), ``--init-from`` with ``--resume``; a folder of several runs
  (seeds) without ``--init-from-run K``, a K out of its range, ``--init-from-run`` alone.
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
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves
from purejaxppo.run.record import RunRecord

SETTINGS = RLHFSettings(
    task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=20, eval_every=0
)
TOY = ["--task-option", "max_len=4", "--task-option", "max_new=6", "--d-model", "16", "--layers", "1", "--quiet"]
SMALL = ["--iterations", "1", "--batch", "8", "--minibatches", "2", "--epochs", "1", "--eval-every", "0"]


def _one_error(capsys, argv, *needles):
    try:
        code = main(argv)
    except SystemExit as e:  # refused as parsed (a flag's own range)
        code = e.code
    assert code == 2
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
    records["rlhf-seeds"] = RunRecord("rlhf", TokenPPOConfig(batch_size=8), SETTINGS, num_seeds=3)
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


def test_a_folder_of_several_runs_needs_the_run_chosen(folders, tmp_path, monkeypatch, capsys):
    """Three seeds: no run is taken by default; K is checked against the folder; the flag needs
    --init-from and is run-defining (a resume refuses it). All before any work, nothing created."""
    monkeypatch.chdir(tmp_path)
    seeds = folders["rlhf-seeds"]
    _one_error(
        capsys,
        ["rlhf", *TOY, "--init-from", seeds, "--run-dir", "new"],
        f"--init-from {seeds}: that folder holds 3 runs (seeds); choose the one to start from with --init-from-run K (0..2)",
    )
    _one_error(
        capsys,
        ["rlhf", *TOY, "--init-from", seeds, "--init-from-run", "3", "--run-dir", "new"],
        f"--init-from-run 3: {seeds} holds 3 run(s); give K in 0..2",
    )
    # a folder of one run: K must be 0 there
    _one_error(capsys, ["rlhf", *TOY, "--init-from", folders["rlhf"], "--init-from-run", "1"], "give K in 0..0")
    _one_error(
        capsys, ["rlhf", *TOY, "--init-from", seeds, "--init-from-run", "-1"], "--init-from-run must be >= 0, got -1"
    )
    _one_error(capsys, ["rlhf", *TOY, "--init-from-run", "1"], "--init-from-run K", "add --init-from or drop it")
    _one_error(capsys, ["rlhf", "--resume", folders["rlhf"], "--init-from-run", "0"], "--init-from-run")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_run_started_from_another_runs_policy(tmp_path, monkeypatch, capsys):
    from purejaxppo.programs.rlhf_run import train_rlhf

    source = str(tmp_path / "a")
    cfg = TokenPPOConfig(batch_size=8, num_iterations=2, num_minibatches=2, update_epochs=1, actor_lr=1e-2)
    train_rlhf(cfg, SETTINGS, run_dir=source, chunk_updates=1, num_seeds=2)
    a, _ = read_leaves(latest_checkpoint(os.path.join(source, "checkpoints")))
    new = str(tmp_path / "b")
    assert main(["rlhf", *TOY, *SMALL, "--init-from", source, "--init-from-run", "1", "--run-dir", new]) == 0
    b, _ = read_leaves(latest_checkpoint(os.path.join(new, "checkpoints")))
    policy = ".train.params['policy']"
    starts = {k[len(".reference") :] for k in b if k.startswith(".reference")}
    assert len(starts) > 4
    moved = seeds_differ = 0
    for at in starts:  # leaves [R, ...]: the new run's one seed is the source's run 1
        np.testing.assert_array_equal(b[".reference" + at][0], a[policy + at][1], err_msg=at)
        moved += not np.array_equal(a[policy + at][1], a[".reference" + at][1])
        seeds_differ += not np.array_equal(a[policy + at][0], a[policy + at][1])
    assert moved > 0  # A's training moved its policy away from its own start
    assert seeds_differ > 0  # run 0 would not have passed: the choice is seen
    info = json.load(open(os.path.join(new, "config.json")))
    assert info["init_from"]["run_dir"] == source and info["init_from"]["update"] == 2
    assert info["init_from"]["source_run"] == 1 and info["init_from"]["source_seeds"] == 2
    assert info["settings"]["sft_steps"] == 0 and info["sft"]["steps"] == 0
    # a task with longer strings: another position table
    monkeypatch.chdir(tmp_path)
    _one_error(
        capsys,
        [
            "rlhf",
            *TOY,
            "--task-option",
            "max_len=5",
            *SMALL,
            "--init-from",
            source,
            "--init-from-run",
            "1",
            "--run-dir",
            "c",
        ],
        f"--init-from {source}: ",
        "there and",
    )
    assert not os.path.exists(tmp_path / "c")
