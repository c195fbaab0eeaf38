"""`plot`: smoothing and the IQM with its bootstrap interval against NumPy hand loops; panels,
labels from config.json, x axes and default metrics on hand-written run folders (no training)."""

import json
import os

import numpy as np
import pytest

from purejaxppo.cli.curve_stats import bootstrap_iqm, ema, iqm, smooth, window_mean
from purejaxppo.cli.main import main

pytest.importorskip("matplotlib")


def _hand_ema(xs, n):
    alpha, avg, out = 2 / (n + 1), None, []
    for x in xs:
        if np.isnan(x):
            out.append(np.nan)
            continue
        avg = x if avg is None else avg + alpha * (x - avg)
        out.append(avg)
    return out


def _hand_window(xs, n):
    out = []
    for u, x in enumerate(xs):
        win = [v for v in xs[max(0, u - n + 1) : u + 1] if not np.isnan(v)]
        out.append(np.nan if np.isnan(x) else sum(win) / len(win))
    return out


def _hand_iqm(col):
    v = sorted(x for x in col if not np.isnan(x))
    k = len(v) // 4
    mid = v[k : len(v) - k]
    return sum(mid) / len(mid) if mid else np.nan


def _curves(seed=0, s=7, u=40):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(s, u)).cumsum(1)
    a[rng.random((s, u)) < 0.2] = np.nan  # updates without a finished episode
    a[:, 0] = np.nan
    return a


def test_smoothing_matches_hand_loops():
    a = _curves()
    for n in (1, 2, 5, 40):
        np.testing.assert_allclose(ema(a, n), [_hand_ema(list(r), n) for r in a], rtol=1e-12)
        np.testing.assert_allclose(window_mean(a, n), [_hand_window(list(r), n) for r in a], rtol=1e-12)
    np.testing.assert_array_equal(smooth(a, 1, "ema"), a)  # 1 update: no smoothing
    np.testing.assert_array_equal(np.isnan(smooth(a, 5, "window")), np.isnan(a))  # drawn at the same points


def test_iqm_matches_hand_loop_and_scipy():
    a = _curves(1, s=9)
    a[:, 3] = np.nan  # no seed has a value here
    want = [_hand_iqm(a[:, u]) for u in range(a.shape[1])]
    np.testing.assert_allclose(iqm(a), want, rtol=1e-12)
    stats = pytest.importorskip("scipy.stats")
    full = np.random.default_rng(2).normal(size=(10, 6))
    np.testing.assert_allclose(iqm(full), stats.trim_mean(full, 0.25, axis=0), rtol=1e-12)
    np.testing.assert_allclose(iqm(full[:3]), full[:3].mean(0), rtol=1e-12)  # n < 4: nothing to trim


def test_bootstrap_interval_matches_hand_loop():
    a = _curves(3, s=6, u=12)
    b = 300
    lo, hi = bootstrap_iqm(a, resamples=b, level=0.9, seed=5, block=b)
    draws = np.random.default_rng(5).integers(0, 6, size=(b, 6))  # the same draws: whole seeds resampled
    for u in range(a.shape[1]):
        boot = [_hand_iqm(a[d, u]) for d in draws]
        boot = [x for x in boot if not np.isnan(x)]
        if boot:
            np.testing.assert_allclose([lo[u], hi[u]], np.percentile(boot, [5, 95]), rtol=1e-12)
        else:
            assert np.isnan(lo[u]) and np.isnan(hi[u])
    lo2, hi2 = bootstrap_iqm(a, resamples=b, level=0.9, seed=5, block=7)  # blocks only bound the memory
    finite = np.isfinite(lo)
    assert np.all(lo2[finite] <= hi2[finite]) and np.all(np.isfinite(lo2) == finite)


def _run(root, name, columns, rows, config=None, summary=None):
    """A run folder by hand: ``rows`` of ``columns`` (after ``seed,update``), config.json, summary.json."""
    d = root / name
    d.mkdir()
    lines = [",".join(columns)] + [",".join(str(x) for x in r) for r in rows]
    (d / "metrics.csv").write_text("\n".join(lines) + "\n")
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    return str(d)


def _control(root, name, lr, members=None, seeds=3, updates=20):
    rng = np.random.default_rng(len(name))
    rows, lead = [], ["member"] if members else []
    for m in range(len(members) if members else 1):
        for s in range(seeds):
            for u in range(updates):
                rows.append(
                    ([m] if members else [])
                    + [s, u, (u + 1) * 64, round(float(rng.normal() + u), 4), round(float(rng.random()), 4)]
                )
    cfg = {
        "kind": "sweep" if members else "run",
        "config": {"env_name": "CartPole-v1", "lr": lr, "gamma": 0.99},
        "members": members,
    }
    return _run(
        root,
        name,
        lead + ["seed", "update", "env_steps", "episode_return", "entropy"],
        rows,
        cfg,
        {"run_s": 2.0, "steps_per_s": seeds * (len(members) if members else 1) * updates * 64 / 2.0},
    )


@pytest.fixture
def capture(monkeypatch):
    """The figures plot_runs saves: ``[(figure, path)]`` (then saved as usual, Agg)."""
    from matplotlib.figure import Figure

    saved, real = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **k: saved.append((fig, path)) or real(fig, path, **k))
    return saved


def test_panels_labels_and_smoothed_line(tmp_path, capture):
    a = _control(tmp_path, "a", 2.5e-4)
    b = _control(tmp_path, "b", 1e-3)
    sw = _control(tmp_path, "sw", 2.5e-4, members=[{"lr": 0.003}, {"lr": 0.01}], seeds=2)
    out = str(tmp_path / "p.png")
    assert (
        main(
            ["plot", a, b, sw, "--metric", "episode_return,entropy", "--smooth", "4", "--smoother", "window", "-o", out]
        )
        == 0
    )
    ((fig, path),) = capture
    import matplotlib.image

    h, w = matplotlib.image.imread(out).shape[:2]
    assert path == out and (w, h) == tuple(round(x * 120) for x in fig.get_size_inches())
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["episode return", "entropy"]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == [
        "CartPole-v1 lr=0.00025 (3 seeds)",
        "CartPole-v1 lr=0.001 (3 seeds)",
        "CartPole-v1 lr=0.00025 lr=0.003 (2 seeds)",
        "CartPole-v1 lr=0.00025 lr=0.01 (2 seeds)",
    ]
    # run a's labelled line is the mean over seeds of each seed's trailing mean over 4 updates
    import csv

    rows = list(csv.DictReader(open(os.path.join(a, "metrics.csv"))))
    v = np.array([float(r["episode_return"]) for r in rows]).reshape(3, 20)
    line = next(ln for ln in panels[0].get_lines() if ln.get_label().startswith("CartPole-v1 lr=0.00025 (3"))
    np.testing.assert_allclose(line.get_ydata(), np.mean([_hand_window(list(r), 4) for r in v], 0), rtol=1e-12)
    np.testing.assert_array_equal(line.get_xdata(), np.arange(1, 21) * 64)
    faint = [ln for ln in panels[0].get_lines() if ln.get_alpha() == 0.25]
    assert len(faint) == 4  # the raw curve behind each smoothed one


def test_iqm_line_and_time_axis(tmp_path, capture):
    a = _control(tmp_path, "a", 2.5e-4, seeds=5)
    assert main(["plot", a, "--iqm", "--x", "time", "-o", str(tmp_path / "i.png")]) == 0
    ((fig, _),) = capture
    ax = fig.axes[0]
    import csv

    rows = list(csv.DictReader(open(os.path.join(a, "metrics.csv"))))
    v = np.array([float(r["episode_return"]) for r in rows]).reshape(5, 20)
    (line,) = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    np.testing.assert_allclose(line.get_ydata(), [_hand_iqm(v[:, u]) for u in range(20)], rtol=1e-12)
    # time: the run's env steps (5 runs) at its summary's 3200 env-steps/s
    np.testing.assert_allclose(line.get_xdata(), np.arange(1, 21) * 64 * 5 / 3200.0, rtol=1e-12)
    assert "time" in ax.get_xlabel() and "IQM" in ax.get_title()


def test_token_level_run_plots_score_and_kl_by_updates(tmp_path, capture):
    rows = [[s, u, 0.1 * u + s, 0.02 * u, 0.5] for s in range(2) for u in range(6)]
    d = _run(
        tmp_path,
        "tok",
        ["seed", "update", "score", "kl", "entropy"],
        rows,
        {"kind": "token", "config": {"batch_size": 16}, "rlhf": {"task": "reverse"}},
    )
    assert main(["plot", d, "-o", str(tmp_path / "t.png")]) == 0
    ((fig, _),) = capture
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["score", "kl"]
    assert all(ax.get_xlabel() == "updates" for ax in panels)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["reverse (2 seeds)"]


def test_a_token_run_at_beta_0_plots_its_score_alone(tmp_path, capture):
    """At beta 0 nothing reads the reference, its pass is skipped and metrics.csv has no kl."""
    rows = [[s, u, 0.1 * u + s, 0.5] for s in range(2) for u in range(3)]
    d = _run(tmp_path, "tok0", ["seed", "update", "score", "entropy"], rows, {"kind": "token", "rlhf": {}})
    assert main(["plot", d, "-o", str(tmp_path / "t.png")]) == 0
    ((fig, _),) = capture
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == 1 and titles[0].startswith("score"), titles


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--smooth", "0"], "--smooth 0: give a number of updates of at least 1"),
        (["--metric", "episode_return,,entropy"], "names an empty column"),
        (["--metric", "score"], "has no metric 'score'"),
        (["TOK", "--x", "env_steps"], "--x env_steps: tok has no env_steps column"),
        (["NOSUM", "--x", "time"], "--x time: nosum has no readable summary.json"),
        (["TOK"], "the runs share none of the default metrics"),
    ],
)
def test_bad_plot_flags_are_one_line_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    run = _control(tmp_path, "run", 1e-3)
    _run(tmp_path, "tok", ["seed", "update", "score", "kl"], [[0, 0, 0.1, 0.0]])
    _run(tmp_path, "nosum", ["seed", "update", "env_steps", "episode_return"], [[0, 0, 64, 1.0]])
    argv = [{"TOK": "tok", "NOSUM": "nosum"}.get(a, a) for a in argv]
    dirs = [a for a in argv if a in ("tok", "nosum")]
    rest = [a for a in argv if a not in dirs]
    if argv[0] == "tok" and len(argv) == 1:
        dirs = [run, "tok"]
    assert main(["plot", *(dirs or [run]), *rest, "-o", "x.png"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists("x.png")


def test_the_token_run_report_leaves_out_kl_where_the_run_logged_none(tmp_path, capsys):
    """At beta 0 the run has no kl column: the final report says the score alone (it printed
    'KL per sequence nan -> nan' with numpy's empty-mean warning)."""
    import warnings

    from purejaxppo.programs.rlhf_kind import report_token_run

    rows = [[s, u, 0.1 * u + s, 0.5] for s in range(2) for u in range(3)]
    d = _run(tmp_path, "tok0", ["seed", "update", "score", "entropy"], rows, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" would fail here
        report_token_run(d)
    out = capsys.readouterr().out
    assert "sampled score: 0.500 -> 0.700" in out and "KL" not in out, out
    d = _run(tmp_path, "tok1", ["seed", "update", "score", "kl"], [[0, 0, 0.1, 0.2], [0, 1, 0.3, 0.4]], {})
    report_token_run(d)
    assert "KL per sequence 0.200 -> 0.400" in capsys.readouterr().out
