"""Every command on every kind of run folder (purejaxppo/run/kinds.py, purejaxppo/programs/*_kind.py).

The matrix: ``train --resume``, ``rlhf --resume``, ``eval``, ``plot``, ``train --init-from``
and a new run into a used folder, on folders of each kind (run, sweep, pbt, rlhf). Each cell
either does the right thing or refuses in ONE ``error:`` line naming the command that fits,
exit 2, the folder unchanged. The refusals need only the folder's JSON, so their folders are
written by hand here (the current record layout, fast); the cells that work need trained
folders (``slow``). Old layouts: a folder rewritten to the layout written before the run
record was versioned (no ``kind``, no ``version``, settings under the kind's name) resumes
to exactly the numbers of an uninterrupted run.
"""

import hashlib
import json
import os

import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.cli.main import main
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.programs.pbt_program import PBTSettings
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.run.record import RunRecord
from purejaxppo.algorithms.pbt import parse_search, search_space

CFG = PPOConfig(
    env_name="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 4, update_epochs=1, num_minibatches=2
)
SPACE = search_space(CFG, parse_search(["lr=loguniform:1e-4:1e-3"]))
SETTINGS = RLHFSettings(
    task="reverse",
    task_options=(("max_len", 4), ("max_new", 6)),
    d_model=16,
    n_layers=1,
    sft_steps=2,
    eval_every=0,
    eval_batch=8,
)
TOKEN = TokenPPOConfig(batch_size=8, num_iterations=4, update_epochs=1, num_minibatches=2)
RECORDS = {
    "run": RunRecord("run", CFG),
    "sweep": RunRecord("sweep", CFG, members=[{"lr": 1e-3}, {"lr": 3e-4}]),
    "pbt": RunRecord("pbt", CFG, PBTSettings(SPACE, 2), members=[{"lr": 1e-3}, {"lr": 3e-4}]),
    "rlhf": RunRecord("rlhf", TOKEN, SETTINGS),
}
TRAIN = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "256", "--quiet"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``{kind: folder}``: config.json, a metrics.csv header and one checkpoint's meta.json."""
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for name, record in RECORDS.items():
        d = root / name
        (d / "checkpoints" / "update_00000002").mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(record.to_json()))
        (d / "metrics.csv").write_text(("member," if record.members else "") + "seed,update,score\n")
        (d / "checkpoints" / "update_00000002" / "meta.json").write_text(json.dumps({**record.to_json(), "update": 2}))
        out[name] = str(d)
    return out


def _digest(folder: str) -> str:
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            h.update(os.path.join(dirpath, f).encode() + open(os.path.join(dirpath, f), "rb").read())
    return h.hexdigest()


def _refused(capsys, argv, touched, *needles):
    """``main(argv)`` exits 2 with one ``error:`` line holding every needle; ``touched`` unchanged."""
    before = {d: _digest(d) for d in touched}
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    assert {d: _digest(d) for d in touched} == before


@pytest.mark.parametrize("kind", ["run", "sweep", "pbt"])
def test_rlhf_resume_of_a_control_folder_names_train_resume(folders, kind, capsys):
    _refused(
        capsys,
        ["rlhf", "--resume", folders[kind]],
        [folders[kind]],
        f"python -m purejaxppo train --resume {folders[kind]}",
    )


def test_train_resume_of_an_rlhf_folder_names_rlhf_resume(folders, capsys):
    _refused(
        capsys,
        ["train", "--resume", folders["rlhf"]],
        [folders["rlhf"]],
        f"python -m purejaxppo rlhf --resume {folders['rlhf']}",
    )


def test_init_from_an_rlhf_folder_is_refused_naming_its_command(folders, tmp_path, capsys):
    new = str(tmp_path / "new")
    _refused(
        capsys,
        ["train", *TRAIN, "--init-from", folders["rlhf"], "--run-dir", new],
        [folders["rlhf"]],
        "token-level PPO",
        f"rlhf --resume {folders['rlhf']}",
    )
    assert not os.path.exists(new)


@pytest.mark.parametrize("kind", ["sweep", "pbt"])
def test_init_from_a_folder_with_members_needs_member(folders, kind, tmp_path, capsys):
    _refused(
        capsys,
        ["train", *TRAIN, "--init-from", folders[kind], "--run-dir", str(tmp_path / "n")],
        [folders[kind]],
        "--member K (0..1)",
    )


@pytest.mark.parametrize("kind, command", [("run", "train"), ("sweep", "train"), ("pbt", "train"), ("rlhf", "rlhf")])
def test_a_new_train_run_into_a_used_folder_names_the_folders_own_command(folders, kind, command, capsys):
    _refused(
        capsys,
        ["train", *TRAIN, "--run-dir", folders[kind]],
        [folders[kind]],
        f"python -m purejaxppo {command} --resume {folders[kind]}",
    )


def test_a_new_rlhf_run_into_a_used_folder_is_refused_before_its_sft(folders, capsys):
    _refused(
        capsys,
        ["rlhf", "--run-dir", folders["run"], "--sft-steps", "100000", "--quiet"],
        [folders["run"]],
        f"python -m purejaxppo train --resume {folders['run']}",
    )


@pytest.mark.parametrize(
    "flag",
    [["--episodes", "3"], ["--stochastic"], ["--member", "0"], ["--gif", "x.gif"], ["--protocol", "gymnax-blines"]],
)
def test_eval_of_an_rlhf_folder_refuses_the_episode_flags(folders, flag, capsys):
    _refused(capsys, ["eval", folders["rlhf"], *flag], [folders["rlhf"]], "does not apply", "token-level PPO")


def test_eval_member_of_a_folder_without_members(folders, capsys):
    _refused(capsys, ["eval", folders["run"], "--member", "0"], [folders["run"]], "--member 0", "has no members")


def test_an_unknown_kind_is_refused_by_every_command(tmp_path, capsys):
    d = tmp_path / "future"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**RECORDS["run"].to_json(), "kind": "newkind"}))
    for argv in (["train", "--resume", str(d)], ["rlhf", "--resume", str(d)], ["eval", str(d)]):
        _refused(capsys, argv, [str(d)], "'newkind'", "does not know")


def test_reward_folders_route_to_the_reward_command_and_back(folders, tmp_path, capsys):
    """The reward-model kind registered beside the others: train/rlhf --resume and eval of its
    folder name what fits; reward --resume of another kind's folder names that kind's command."""
    from purejaxppo.programs.reward_program import RewardConfig, RewardSettings

    d = tmp_path / "reward"
    d.mkdir()
    record = RunRecord(
        "reward-model", RewardConfig(), RewardSettings(model="m", pairs="p.jsonl", pairs_sha256="0" * 64)
    )
    (d / "config.json").write_text(json.dumps(record.to_json()))
    for command in ("train", "rlhf"):
        _refused(capsys, [command, "--resume", str(d)], [str(d)], f"python -m purejaxppo reward --resume {d}")
    _refused(capsys, ["eval", str(d)], [str(d)], "eval_accuracy")
    for kind, command in (("run", "train"), ("rlhf", "rlhf")):
        _refused(
            capsys,
            ["reward", "--resume", folders[kind]],
            [folders[kind]],
            f"python -m purejaxppo {command} --resume {folders[kind]}",
        )


def _old_layout(folder: str) -> None:
    """Rewrite config.json and every checkpoint's meta.json to the layout written before the
    record was versioned: no ``version``, settings under the kind's own name, and (for plain
    runs and sweeps, as the first folders) no ``kind`` at all."""
    paths = [os.path.join(folder, "config.json")]
    paths += [
        os.path.join(folder, "checkpoints", c, "meta.json")
        for c in os.listdir(os.path.join(folder, "checkpoints"))
        if os.path.isfile(os.path.join(folder, "checkpoints", c, "meta.json"))
    ]
    for path in paths:
        raw = json.load(open(path))
        raw.pop("version")
        settings = raw.pop("settings")
        if raw["kind"] in ("run", "sweep"):
            raw.pop("kind")
        else:
            raw[raw["kind"]] = settings
        json.dump(raw, open(path, "w"))


def test_an_old_layout_folder_resumes_exactly(tmp_path):
    """A plain-run folder of the old layout, stopped at update 2 of 4: its resume equals the
    uninterrupted run through the same compiled chunks, to the last bit (metrics.csv and the
    final state); config.json keeps its layout."""
    import jax

    from purejaxppo.programs.program import Program
    from purejaxppo.programs.runs import resume_run, train_chunked
    from purejaxppo.run.run_folder import load_run

    prog = Program(CFG)
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    train_chunked(CFG, num_seeds=2, run_dir=whole, chunk_updates=2, program=prog)
    train_chunked(CFG, num_seeds=2, run_dir=part, chunk_updates=2, program=prog, stop_after=2)
    _old_layout(part)
    assert "kind" not in json.load(open(os.path.join(part, "config.json")))
    res = resume_run(part, program=prog)
    assert res.finished and res.updates_done == 4
    assert open(os.path.join(part, "metrics.csv")).read() == open(os.path.join(whole, "metrics.csv")).read()
    for a, b in zip(jax.tree.leaves(load_run(whole)[2]), jax.tree.leaves(load_run(part)[2])):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    saved = json.load(open(os.path.join(part, "config.json")))
    assert "version" not in saved and len(saved["resumes"]) == 1


# --- the cells that work: trained folders ----------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``{kind: folder}`` stopped half-way (update 2 of 4), one of each kind, trained for real."""
    from purejaxppo.programs.pbt_run import train_pbt
    from purejaxppo.programs.rlhf_run import train_rlhf
    from purejaxppo.programs.runs import train_chunked

    root = tmp_path_factory.mktemp("trained")
    out = {k: str(root / k) for k in RECORDS}
    train_chunked(CFG, run_dir=out["run"], chunk_updates=2, stop_after=2)
    train_chunked(CFG, run_dir=out["sweep"], members=RECORDS["sweep"].members, chunk_updates=2, stop_after=2)
    train_pbt(CFG, PBTSettings(SPACE, 2), 2, run_dir=out["pbt"], chunk_updates=2, stop_after=2)
    train_rlhf(TOKEN, SETTINGS, run_dir=out["rlhf"], chunk_updates=2, stop_after=2)
    _old_layout(out["pbt"])  # PBT's settings read from under its name
    return out


@pytest.mark.slow
def test_every_command_does_the_right_thing_on_every_kind(trained, tmp_path, capsys):
    for kind, folder in trained.items():
        command = "rlhf" if kind == "rlhf" else "train"
        assert main([command, "--resume", folder, "--quiet"]) == 0, capsys.readouterr().err
        summary = json.load(open(os.path.join(folder, "summary.json")))
        assert ("final_score_mean" if kind == "rlhf" else "final_return_mean") in summary
        capsys.readouterr()
        assert main(["eval", folder] + ([] if kind == "rlhf" else ["--episodes", "2"])) == 0
        out = capsys.readouterr().out
        assert ("score:" in out and "answers of seed 0:" in out) if kind == "rlhf" else "return: mean" in out, out
        png = str(tmp_path / f"{kind}.png")
        assert main(["plot", folder, "-o", png]) == 0 and os.path.getsize(png) > 0
        if kind != "rlhf":
            member = [] if kind == "run" else ["--member", "1"]
            assert (
                main(["train", *TRAIN, "--init-from", folder, *member, "--run-dir", str(tmp_path / f"w-{kind}")]) == 0
            )
    capsys.readouterr()
    assert main(["eval", trained["rlhf"], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["update"] == 4 and len(report["per_seed"]["score"]) == 1 and 0 <= report["mean"]["score"] <= 1
