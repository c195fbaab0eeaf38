"""A tour of bad inputs: each is refused before any work with exit 2, one ``error:`` message
that names the problem and the fix, and no traceback. All in-process (``cli.main``); no
case compiles a training step. Run folders are small hand-made ones."""

import importlib.util
import json
import os

import pytest

from purejaxppo.cli import main
from purejaxppo.config import PPOConfig

CFG = PPOConfig(
    env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=256, update_epochs=1, num_minibatches=1
)
HEADER = "seed,update,actor_loss,episode_return\r\n"
ROWS = "0,0,0.5,10\r\n1,0,0.4,12\r\n0,1,0.3,11\r\n1,1,0.2,13\r\n"


def _folder(root, name, config=True, metrics=HEADER + ROWS, kind="run", ckpt=False):
    d = root / name
    d.mkdir()
    if config:
        info = {
            "kind": kind,
            "config": CFG.to_dict(),
            "seed": 0,
            "num_seeds": 2,
            "members": None,
            "chunk_updates": 4,
            "num_devices": 1,
            "split": "seeds",
            "checkpoint_every": 1,
        }
        if isinstance(config, bytes):
            (d / "config.json").write_bytes(config)
        else:
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
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: False if os.path.abspath(p).startswith(ro) else real_access(p, mode, **kw)
    )
    nocfg = tmp_path / "nocfg"
    nocfg.mkdir()
    (nocfg / "notes.txt").write_text("x")
    out = {
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
        # edited by hand: bytes of another encoding; a column named in the header only; text in a
        # note column; an index cell that is not a number; config.json with bytes that are not UTF-8
        "LATIN": _folder(tmp_path, "latin", metrics=None),
        "HDRONLY": _folder(tmp_path, "hdronly", metrics="seed,update,actor_loss,episode_return,note\r\n" + ROWS),
        "NOTE": _folder(
            tmp_path,
            "note",
            metrics=HEADER.replace("\r\n", ",note\r\n")
            + "0,0,0.5,10,first try\r\n1,0,0.4,12,\r\n0,1,0.3,11,\r\n1,1,0.2,13,\r\n",
        ),
        "BADIDX": _folder(tmp_path, "badidx", metrics=HEADER + "0,0,0.5,10\r\nx,0,0.4,12\r\n"),
        "BADCFG": _folder(tmp_path, "badcfg", config=b'{"kind": "run", "config": {"env_name": "Cart\xffPole"}}'),
        "FILE": str(tmp_path / "file.txt"),
        "EMPTY": str(tmp_path / "empty"),
        "NOCFG": str(nocfg),
        "RO": ro,
        "MISSING": str(tmp_path / "no" / "such"),
        "TMP": str(tmp_path),
    }
    (tmp_path / "latin" / "metrics.csv").write_bytes(
        (HEADER + "0,0,0.5,10\r\n1,0,0.4,12 caf\xe9\r\n").encode("latin-1")
    )
    return out


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
    (["train", "--resume", "NEWKIND"], "holds a 'newkind' run, which this purejaxppo does not know"),
    (["train", "--resume", "PBT"], "a 'pbt' record without its settings"),
    (["train", "--resume", "BADJSON"], "is damaged"),
    (["train", "--resume", "NOMETRICS"], "metrics.csv is missing"),
    (["train", "--resume", "DAMAGED"], "line 3 is damaged"),
    (["train", "--resume", "MIXED"], "has the columns of a run with members"),
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
    # env names, checked before the compile cache or an env is built from them (issue 26, item 6)
    (T + ["--env", ":CartPole-v1"], "has an empty suite before ':'; gymnax envs need no prefix (--env CartPole-v1)"),
    (T + ["--env", ":CartPole-v1", "--no-compile-cache"], "has an empty suite before ':'"),
    (T + ["--env", "CartPole-v1 "], "has spaces around it; pass --env CartPole-v1"),
    (T + ["--env", "gymnax:"], "names no environment after 'gymnax:'"),
    # a single-valued flag given twice would silently keep the last one; empty values
    (T + ["--env", "CartPole-v1", "--env", "Acrobot-v1"], "--env is given twice ('CartPole-v1' and 'Acrobot-v1')"),
    (T + ["--lr", "1e-3", "--lr", "1e-4"], "--lr is given twice (0.001 and 0.0001); pass it once"),
    (["train", "--quiet", "--seeds", "2", "--devices", "3"], "--devices=3 must be >= 1 and divide --seeds=2"),
    (["eval", "RUN", "--episodes", "5", "--episodes", "6"], "--episodes is given twice"),
    (T + ["--run-dir", ""], "--run-dir is empty"),
    (["train", "--resume", ""], "--resume is empty"),
    (["eval", ""], "RUN_DIR is empty"),
    (["plot", "RUN", "-o", ""], "-o/--out is empty"),
    (["envs", "--suite", ""], "--suite is empty"),
    # list-valued flags: empty items, repeated values, a flag that a sweep or search overrides
    (
        T + ["--sweep", "lr=1e-3,,1e-4"],
        "has an empty value (two commas in a row, or one at an end); list each value once: lr=1e-3,1e-4",
    ),
    (T + ["--sweep", "lr=1e-3,0.001"], "lists 0.001 more than once"),
    (T + ["--sweep", "lr=1e-3,1e-4", "--lr", "1e-2"], "--lr is given and --sweep 'lr=1e-3,1e-4' sets the same"),
    (
        T + ["--pbt", "4", "--search", "lr=loguniform:1e-5:1e-2", "--search", "lr=uniform:1e-5:1e-2"],
        "--search lr is given twice",
    ),
    (T + ["--pbt", "4", "--search", "lr=loguniform:1e-5:1e-2", "--lr", "1e-3"], "--lr is given and --search"),
    # counters and seeds that would wrap in 32 bits (issue 26, item 4), checked before any folder exists
    (
        T + ["--total-timesteps", "100000000000000", "--run-dir", "TMP/huge"],
        "gives num_updates=195,312,500,000, past 2**31-1=2,147,483,647",
    ),
    (
        T
        + [
            "--total-timesteps",
            "1099511627776",
            "--lr-end",
            "1e-5",
            "--anneal-lr",
            "false",
            "--lr-ramp-steps",
            "100",
            "--run-dir",
            "TMP/ramp",
        ],
        "optimizer steps (the lr_end ramp counts them)",
    ),
    (T + ["--seeds", "99999999999"], "--seeds=99,999,999,999 must be at most 2,147,483,647"),
    (T + ["--seed", "-1"], "--seed=-1 must be between 0 and 4,294,967,295"),
    (T + ["--seed", "4294967296"], "--seed=4294967296 must be between 0 and 4,294,967,295"),
    (["eval", "RUN", "--seed", "-3"], "--seed=-3 must be between 0 and"),
    # run folders edited by hand (issue 26, item 3): one message with the line and the repair
    (["train", "--resume", "LATIN"], "line 3 holds bytes that are not UTF-8 text"),
    (["plot", "LATIN", "-o", "TMP/x.png"], "line 3 holds bytes that are not UTF-8 text"),
    (["train", "--resume", "HDRONLY"], "every row has 4 fields; edit line 1"),
    (["plot", "BADIDX", "-o", "TMP/x.png"], "line 3 is damaged (its seed, update cells are not whole numbers"),
    (
        ["plot", "NOTE", "--metric", "note", "-o", "TMP/x.png"],
        "column 'note' holds text, not numbers (line 2: 'first try'); plot one of: actor_loss, episode_return",
    ),
    (["train", "--resume", "BADCFG"], "config.json is damaged"),
    (["eval", "BADCFG"], "config.json is damaged"),
    (["bench", "--num-envs", "0"], "num_envs=0 must be >= 1"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:4]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_exits_2_with_one_message_and_no_traceback(argv, needle, places, capsys, monkeypatch):
    if "--tensorboard" in argv or "--wandb" in argv:  # as if the optional package were not installed
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name in ("tensorboardX", "torch", "wandb") else real(name, *a),
        )
    argv = _fill(argv, places)
    before = sorted(os.listdir(places["TMP"]))
    files = _digest(places["TMP"])
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and needle in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err  # one line, the problem and the fix
    assert sorted(os.listdir(places["TMP"])) == before  # nothing was created (no half-made run folder)
    assert _digest(places["TMP"]) == files  # nothing in the existing run folders changed


def _digest(folder) -> dict:
    """``{path: bytes}`` of every file under ``folder``."""
    return {os.path.join(d, f): open(os.path.join(d, f), "rb").read() for d, _, fs in os.walk(folder) for f in fs}


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--seeds", "abc"],
        ["train", "--split", "foo"],
        ["eval"],
        ["train", "--hidden-sizes", "a,b"],
        ["plot"],
        ["train", "--normalize-obs", "maybe"],
    ],
)
def test_malformed_flags_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error:" in err and "Traceback" not in err


TINY = [
    "--num-envs",
    "2",
    "--num-steps",
    "8",
    "--total-timesteps",
    "16",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "1",
    "--devices",
    "1",
    "--quiet",
]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--hidden-sizes", "64,,64"], "no empty items"),
        (["--hidden-sizes", "64,64,"], "no empty items"),
        (["--hidden-sizes", "64 64"], "comma-separated integers"),  # was joined into (6464,)
        (["--obs-keep", "0,0"], "index 0 is listed twice"),
        (["--lr", "\u0661"], "expected a number written in ASCII"),  # ARABIC-INDIC DIGIT ONE: float() reads 1.0
        (["--num-steps", "\uff18"], "expected a whole number written in ASCII digits"),  # FULLWIDTH 8: int() reads 8
        (["--total-timesteps", "5e5"], "got '5e5'; write it as 500000"),
        (["--chunk", "2.0"], "write it as 2"),
    ],
)
def test_numbers_and_lists_are_parsed_strictly(argv, needle, tmp_path, capsys):
    """Spellings Python's int/float/split accept but mean something else (or nothing): argparse
    errors naming the spelling to use, before anything is built (each would have trained)."""
    with pytest.raises(SystemExit) as e:
        main(["train", *TINY, "--run-dir", str(tmp_path / "run"), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "run")


def test_plot_without_extension_reports_the_file_it_wrote(places, capsys):
    out = os.path.join(places["TMP"], "curves")
    assert main(["plot", places["RUN"], "-o", out]) == 0
    assert os.path.exists(out + ".png") and f"written to {out}.png" in capsys.readouterr().out
