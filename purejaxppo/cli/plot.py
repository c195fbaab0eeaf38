"""Learning curves from run folders, one panel per metric.

Each run (or member of a sweep or population) is one line per panel: across its seeds the mean
with a min..max band, or (``iqm=True``) the interquartile mean with a 95% percentile-bootstrap
band; curves and their labels come from :mod:`purejaxppo.cli.curves`, the statistics from
:mod:`purejaxppo.cli.curve_stats`. ``smooth=N`` smooths every seed's curve over ``N`` updates
(an EMA of span N or a trailing window) before the statistic, the raw statistic drawn faint
behind. Updates in which no episode finished are NaN in ``episode_return``/``episode_length``;
they are carried forward from the last finite value so lines have no gaps. A sparse metric
(``eval_*``: only at the updates where an evaluation ran) is drawn through its points, with
markers; a metric ``m`` with an ``eval_m`` column gets the evaluation on top (dashed, same colour).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import numpy as np

from purejaxppo.cli.curve_stats import bootstrap_iqm, ffill, iqm as iqm_of, smooth as smooth_curves
from purejaxppo.cli.curves import X_LABELS, headline_metrics, labels, load_curves, metric_columns, x_values

SPARSE = ("eval_return", "eval_episodes")  # metrics.csv columns set only at some updates (--eval-every)
FILLED = ("episode_return", "episode_length")  # NaN = no episode finished in that update


def _sparse(metric: str) -> bool:
    return metric in SPARSE or metric.startswith("eval_")


def _eval_of(metric: str, run_dir: str) -> Optional[str]:
    """The column holding ``metric``'s periodic evaluation, if the run has one."""
    name = "eval_return" if metric == "episode_return" else f"eval_{metric}"
    return name if not _sparse(metric) and name in metric_columns(run_dir) else None


def _metrics(metric) -> list:
    return [m for m in metric.split(",")] if isinstance(metric, str) else list(metric)


def plot_runs(
    run_dirs: Sequence[str],
    out: str,
    metric: Union[str, Sequence[str], None] = None,
    *,
    smooth: int = 1,
    smoother: str = "ema",
    x: Optional[str] = None,
    iqm: bool = False,
    title: Optional[str] = None,
    resamples: int = 1000,
) -> str:
    """Draw ``metric`` (a name, ``"a,b,c"`` or a list: one panel each; ``None``: the runs'
    headline metrics) of every run/member against ``x`` (``env_steps``, ``updates``, ``time``;
    ``None``: env steps where every run counts them, else updates) into ``out`` (png/pdf/svg by
    extension); returns ``out``. ``KeyError`` (a message with the fix) for a metric or axis a run
    lacks, before anything is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = headline_metrics(run_dirs) if metric is None else _metrics(metric)
    if x is None:
        x = "env_steps" if all("env_steps" in metric_columns(d) for d in run_dirs) else "updates"
    panels = {m: [c for d in run_dirs for c in load_curves(d, m)] for m in metrics}  # every check before drawing
    first = panels[metrics[0]]
    names = labels(first)
    xs = [x_values(c, x, c.values.shape[0] * max(1, sum(o.run_dir == c.run_dir for o in first))) for c in first]
    evals = {m: [_eval_curve(c, m) for c in first] for m in metrics}
    ncols = 2 if len(metrics) in (2, 4) else min(len(metrics), 3)
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(7, 4.5) if len(metrics) == 1 else (5.4 * ncols, 3.8 * nrows), squeeze=False, sharex=True
    )
    colors = [f"C{i % 10}" for i in range(len(first))]
    for ax, m in zip(axes.flat, metrics):
        for i, c in enumerate(panels[m]):
            v = ffill(c.values) if m in FILLED else c.values
            n = v.shape[0]
            _draw(
                ax,
                xs[i],
                v,
                f"{names[i]} ({n} seed{'s' if n > 1 else ''})",
                colors[i],
                marker="o" if _sparse(m) else None,
                smooth=smooth,
                smoother=smoother,
                iqm=iqm,
                resamples=resamples,
            )
            e = evals[m][i]
            if e is not None:
                _draw(
                    ax,
                    xs[i],
                    e.values,
                    f"{names[i]} {'greedy eval' if m == 'episode_return' else 'eval'}",
                    colors[i],
                    "--",
                    "o",
                    iqm=iqm,
                    resamples=resamples,
                )
        ax.set_ylabel(m.replace("_", " "))
        ax.set_title(m.replace("_", " "), fontsize=10)
        ax.grid(alpha=0.3)
    for k, ax in enumerate(axes.flat):
        if k >= len(metrics):
            ax.set_visible(False)
        elif k + ncols >= len(metrics):  # the lowest panel of its column: its x axis is labelled
            ax.set_xlabel(X_LABELS[x])
            ax.xaxis.set_tick_params(labelbottom=True)
    stat = "IQM over seeds, band = 95% bootstrap CI" if iqm else "mean over seeds, band = min..max"
    if smooth > 1:
        stat += f"; {'EMA of span' if smoother == 'ema' else 'trailing mean over'} {smooth} updates, raw faint"
    if len(metrics) == 1:
        axes[0, 0].set_title(title or f"{metrics[0].replace('_', ' ')}: {stat}", fontsize=10)
        axes[0, 0].legend(fontsize=8)
        fig.tight_layout()
    else:
        fig.suptitle(title or stat, fontsize=11)
        handles, texts = axes[0, 0].get_legend_handles_labels()
        rows = -(-len(texts) // ncols)
        fig.legend(handles, texts, loc="lower center", ncol=ncols, fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, min(0.5, (0.15 + 0.2 * rows) / fig.get_figheight()), 1, 0.97))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _eval_curve(curve, metric: str):
    """The evaluation curve belonging to ``curve``'s ``metric`` (same run and member), or None."""
    name = _eval_of(metric, curve.run_dir)
    if name is None:
        return None
    match = [c for c in load_curves(curve.run_dir, name) if c.member == curve.member]
    return match[0] if match and np.isfinite(match[0].values).any() else None


def center_band(values: np.ndarray, iqm: bool, resamples: int = 1000):
    """``(center [U], low [U], high [U])`` over the seeds of ``values [S, U]``: the IQM and its
    bootstrap interval (``iqm``; ``resamples=0``: the IQM alone, no band) or mean, min and max."""
    import warnings

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if iqm:
            center = iqm_of(values)
            return (center,) + (bootstrap_iqm(values, resamples) if resamples else (center, center))
        return np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)


def _draw(
    ax,
    steps: np.ndarray,
    values: np.ndarray,
    label: str,
    color=None,
    style: str = "-",
    marker=None,
    *,
    smooth: int = 1,
    smoother: str = "ema",
    iqm: bool = False,
    resamples: int = 1000,
):
    """The statistic over seeds of ``values [S, U]`` (line) and its band; updates where every
    seed is NaN are left out (so a sparse metric's points are joined). With ``smooth > 1`` each
    seed is smoothed first and the raw statistic is drawn faint behind. Returns the line's colour."""
    keep = np.isfinite(values).any(axis=0)
    shown = smooth_curves(values, smooth, smoother)[:, keep]
    center, lo, hi = center_band(shown, iqm, resamples)
    if smooth > 1:
        raw = center_band(values[:, keep], iqm, 0)[0]
        ax.plot(steps[keep], raw, style, color=color, alpha=0.25, linewidth=0.8)
    (line,) = ax.plot(steps[keep], center, style, color=color, marker=marker, markersize=3, label=label)
    if values.shape[0] > 1:
        ax.fill_between(steps[keep], lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    return line.get_color()


def plot_schedules(run_dir: str, out: str, best: Optional[int] = None) -> str:
    """A PBT run's hyperparameter schedules from its ``lineage.csv``: one panel per searched
    hyperparameter, every member's value over updates (thin steps) and, bold, the schedule the
    ``best`` member's final weights were trained with (its ancestry). Returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from purejaxppo.run.lineage import ancestry, read_lineage

    names, table = read_lineage(run_dir)
    updates = sorted(table)
    values = np.stack([table[u]["hparams"] for u in updates])  # [T, N, K]
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 2.6 * len(names)), sharex=True, squeeze=False)
    lineage = ancestry(names, table, best) if best is not None else []
    for k, (name, ax) in enumerate(zip(names, axes[:, 0])):
        for m in range(values.shape[1]):
            ax.step(updates, values[:, m, k], where="post", color="0.6", alpha=0.5, linewidth=0.8)
        if lineage:
            xs = [s["from_update"] for s in lineage] + [updates[-1]]
            ys = [s[name] for s in lineage] + [lineage[-1][name]]
            ax.step(xs, ys, where="post", color="C3", linewidth=2, label=f"best member {best} (ancestry)")
            ax.legend(fontsize=8)
        if np.all(values[..., k] > 0) and values[..., k].max() / values[..., k].min() > 20:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update")
    axes[0, 0].set_title(f"PBT schedules: {os.path.basename(os.path.normpath(run_dir))}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
