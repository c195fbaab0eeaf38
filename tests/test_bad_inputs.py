"""A tour of bad inputs: each is refused before any work with exit 2, one ``error:`` message
that names the problem and the fix, and no traceback. All in-process (``cli.main``); no
case compiles a training step. Run folders are small hand-made ones."""

import importlib.util
import json
import os

import pytest

from purejaxppo.cli import main
from purejaxppo.config import PPOConfig

CFG = PPOConfig(env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=256, update_epochs=1,
                num_minibatches=1)
HEADER = "seed,update,actor_loss,episode_return\r\n"
ROWS = "0,0,0.5,10\r\n1,0,0.4,12\r\n0,1,0.3,11\r\n1,1,0.2,13\r\n"


def _folder(root, name, config=True, metrics=HEADER + ROWS, kind="run", ckpt=False):
    d = root / name
    d.mkdir()
    if config:
        info = {"kind": kind, "config": CFG.to_dict(), "seed": 0, "num_seeds": 2, "members": None,
                "chunk_updates": 4, "num_devices": 1, "split": "seeds", "checkpoint_every": 1}
        (d / "config.json").write_text(json.dumps(info) if config is True else config)
    if metrics is not None:
        (d / "metrics.csv").write_text(metrics)
    if ckpt:
        (d / "checkpoints" / "update_00000004").mkdir(parents=True)
        (d / "checkpoints" / "update_00000004" / "meta.json").write_text("{}")
    return str(d)


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Placeholders of the table -> paths; RO/* is made read-only (os.access says so, which
    also holds when the tests run as root)."""
    (tmp_path / "file.txt").write_text("not a folder")
    (tmp_path / "empty").mkdir()
    (tmp_path / "ro").mkdir()
    ro = str(tmp_path / "ro")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.path.abspath(p).startswith(ro)
                        else real_access(p, mode, **kw))
    nocfg = tmp_path / "nocfg"
    nocfg.mkdir()
    (nocfg / "notes.txt").write_text("x")
    return {
        "RUN": _folder(tmp_path, "run"),
        "RO_RUN": _folder(tmp_path / "ro", "run"),
        "NEWKIND": _folder(tmp_path, "newkind", kind="newkind"),
        "PBT": _folder(tmp_path, "pbt", kind="pbt"),
        "BADJSON": _folder(tmp_path, "badjson", config="{not json"),
        "NOMETRICS": _folder(tmp_path, "nometrics", metrics=None, ckpt=True),
        "DAMAGED": _folder(tmp_path, "damaged", metrics=HEADER + "0,0,0.5,10\r\n1,0\r\n0,1,0.3,11\r\n"),
        "MIXED": _folder(tmp_path, "mixed", metrics="member," + HEADER),
        "EMPTYCSV": _folder(tmp_path, "emptycsv", metrics=""),
        "HDRCSV": _folder(tmp_path, "hdrcsv", metrics=HEADER),
        "BADHDR": _folder(tmp_path, "badhdr", metrics="a,b,c\r\n1,2,3\r\n"),
        "FILE": str(tmp_path / "file.txt"),
        "EMPTY": str(tmp_path / "empty"),
        "NOCFG": str(nocfg),
        "RO": ro,
        "MISSING": str(tmp_path / "no" / "such"),
        "TMP": str(tmp_path),
    }


def _fill(argv, places):
    out = []
    for a in argv:
        for k in sorted(places, key=len, reverse=True):
            a = a.replace(k, places[k]) if a.startswith(k) or f"={k}" in a else a
        out.append(a)
    return out


T = ["train", "--devices", "1", "--quiet"]
CASES = [
    # train: output paths and counts, before any compile
    (T + ["--run-dir", "FILE"], "is a file, not a folder"),
    (T + ["--run-dir", "FILE/sub"], "is a file"),
    (T + ["--run-dir", "RO"], "not writable"),
    (T + ["--run-dir", "RO/new"], "not writable"),
    (T + ["--run-dir", "RUN"], "already holds a run; continue it with"),
    (T + ["--stop-after", "-5"], "--stop-after=-5 must be >= 1"),
    (T + ["--stop-after", "0"], "--stop-after=0 must be >= 1"),
    (T + ["--seeds", "0"], "--seeds=0 must be >= 1"),
    (T + ["--seeds", "-3"], "--seeds=-3 must be >= 1"),
    (T + ["--chunk", "0"], "--chunk=0 must be >= 1"),
    (T + ["--checkpoint-every", "0"], "--checkpoint-every=0 must be >= 1"),
    (T + ["--sweep", "lr=1e-3", "--sweep", "lr=1e-4"], "--sweep lr=1e-3,1e-4"),
    (T + ["--sweep", "lr"], "must look like name=v1,v2"),
    (T + ["--sweep", "lr=a,b"], "values must be numbers"),
    (T + ["--sweep", "hidden_sizes=1,2"], "cannot sweep 'hidden_sizes'"),
    (T + ["--sweep", "lr="], "lists no values"),
    (T + ["--seeds", "2", "--devices", "3"], "--devices"),
    (T + ["--env", "LunarLander-v3", "--run-dir", "TMP/ll"], "gymnasium_bridge.gymnasium_vec_env('LunarLander-v3'"),
    (T + ["--lr", "-1"], "lr"),
    (T + ["--lr", "nan"], "finite"),
    (T + ["--gamma", "2"], "gamma"),
    (T + ["--num-envs", "0"], "num_envs"),
    (T + ["--num-steps", "0"], "num_steps"),
    (T + ["--clip-eps", "-0.1"], "clip_eps"),
    (T + ["--update-epochs", "0"], "update_epochs"),
    (T + ["--num-minibatches", "0"], "num_minibatches"),
    (T + ["--activation", "foo"], "activation"),
    (T + ["--network", "foo"], "network"),
    (T + ["--hidden-sizes", "0"], "hidden_sizes"),
    (T + ["--tensorboard", "--run-dir", "TMP/tb-run"], "pip install 'purejaxppo[tensorboard]'"),
    (T + ["--wandb", "--run-dir", "TMP/wandb-run"], "pip install 'purejaxppo[wandb]'"),
    # train --resume
    (["train", "--resume", "MISSING"], "does not exist"),
    (["train", "--resume", "FILE"], "is a file, not a run folder"),
    (["train", "--resume", "EMPTY"], "holds no run yet"),
    (["train", "--resume", "NOCFG"], "not a purejaxppo run folder"),
    (["train", "--resume", "RUN", "--lr", "0.1"], "--lr cannot be changed"),
    (["train", "--resume", "RUN", "--seeds", "2"], "--seeds"),
    (["train", "--resume", "RUN", "--seed", "1"], "--seed"),
    (["train", "--resume", "RUN", "--sweep", "lr=1"], "--sweep"),
    (["train", "--resume", "RUN", "--run-dir", "x"], "--run-dir"),
    (["train", "--resume", "RUN", "--split", "envs"], "--split"),
    (["train", "--resume", "RUN", "--stop-after", "0"], "--stop-after=0 must be >= 1"),
    (["train", "--resume", "RUN", "--chunk", "0"], "--chunk=0 must be >= 1"),
    (["train", "--resume", "NEWKIND"], "holds a 'newkind' folder"),
    (["train", "--resume", "PBT"], "a PBT folder without its 'pbt' settings"),
    (["train", "--resume", "BADJSON"], "is damaged"),
    (["train", "--resume", "NOMETRICS"], "metrics.csv is missing"),
    (["train", "--resume", "DAMAGED"], "line 3 is damaged"),
    (["train", "--resume", "MIXED"], "has the columns of a sweep"),
    (["train", "--resume", "RO_RUN"], "not writable"),
    # eval
    (["eval", "RUN", "--episodes", "0"], "--episodes=0 must be between 1 and"),
    (["eval", "RUN", "--episodes", "-1"], "--episodes=-1 must be between"),
    (["eval", "RUN", "--episodes", "100000000"], "must be between 1 and 100,000"),
    (["eval", "RUN", "--gif", "TMP/no/such/x.gif"], "does not exist; create it first"),
    (["eval", "RUN", "--gif", "TMP/out.png"], "must end in .gif"),
    (["eval", "RUN", "--gif", "EMPTY"], "is a folder; give a file name"),
    (["eval", "RUN", "--gif", "RO/x.gif"], "not writable"),
    (["eval", "MISSING"], "does not exist"),
    (["eval", "EMPTY"], "holds no run yet"),
    (["eval", "FILE"], "is a file, not a run folder"),
    (["eval", "RUN"], "no complete checkpoint yet"),
    (["eval", "RUN", "--checkpoint", "MISSING"], "is not a checkpoint"),
    # plot
    (["plot", "RUN", "-o", "TMP/out.xyz"], "must end in .png"),
    (["plot", "RUN", "-o", "EMPTY"], "is a folder; give a file name"),
    (["plot", "RUN", "-o", "TMP/no/such/x.png"], "does not exist; create it first"),
    (["plot", "RUN", "-o", "RO/x.png"], "not writable"),
    (["plot", "EMPTYCSV", "-o", "TMP/x.png"], "holds no rows yet"),
    (["plot", "HDRCSV", "-o", "TMP/x.png"], "holds no rows yet"),
    (["plot", "BADHDR", "-o", "TMP/x.png"], "no seed/update columns"),
    (["plot", "MISSING", "-o", "TMP/x.png"], "no metrics.csv"),
    (["plot", "RUN", "--metric", "nope", "-o", "TMP/x.png"], "no metric 'nope'; available"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:4]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_exits_2_with_one_message_and_no_traceback(argv, needle, places, capsys, monkeypatch):
    if "--tensorboard" in argv or "--wandb" in argv:  # as if the optional package were not installed
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name in ("tensorboardX", "torch", "wandb") else real(name, *a))
    argv = _fill(argv, places)
    before = sorted(os.listdir(places["TMP"]))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and needle in err and "Traceback" not in err, err
    assert sorted(os.listdir(places["TMP"])) == before  # nothing was created (no half-made run folder)


@pytest.mark.parametrize("argv", [["train", "--seeds", "abc"], ["train", "--split", "foo"], ["eval"],
                                  ["train", "--hidden-sizes", "a,b"], ["plot"], ["train", "--normalize-obs", "maybe"]])
def test_malformed_flags_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error:" in err and "Traceback" not in err


def test_plot_without_extension_reports_the_file_it_wrote(places, capsys):
    out = os.path.join(places["TMP"], "curves")
    assert main(["plot", places["RUN"], "-o", out]) == 0
    assert os.path.exists(out + ".png") and f"written to {out}.png" in capsys.readouterr().out
