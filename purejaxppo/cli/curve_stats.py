"""Statistics of learning curves, in NumPy: forward fill, smoothing along updates (an EMA or a
trailing window) and, across seeds, the interquartile mean with a percentile-bootstrap interval.

Shapes: a curve set is ``[..., S, U]`` (seeds, updates) or ``[..., U]``; NaN marks an update with
no value (no episode finished, or a metric set only at some updates). Smoothing keeps NaN where
the input has it, so a smoothed curve is drawn at the same points as the raw one.
"""

from __future__ import annotations

import numpy as np

SMOOTHERS = ("ema", "window")


def ffill(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs along the last axis (``[..., U]``); leading NaNs stay NaN."""
    a = np.array(a, np.float64)
    idx = np.where(np.isfinite(a), np.arange(a.shape[-1]), 0)
    np.maximum.accumulate(idx, axis=-1, out=idx)
    return np.take_along_axis(a, idx, axis=-1)


def ema(a: np.ndarray, n: int) -> np.ndarray:
    """Exponential moving average along the last axis with span ``n`` (``alpha = 2 / (n + 1)``),
    started at the first finite value (no pull toward 0); a NaN is skipped (the average carries
    over it) and stays NaN in the output."""
    a = np.array(a, np.float64)
    alpha = 2.0 / (n + 1.0)
    out = np.full_like(a, np.nan)
    avg = np.full(a.shape[:-1], np.nan)
    for u in range(a.shape[-1]):
        x = a[..., u]
        ok = np.isfinite(x)
        avg = np.where(ok, np.where(np.isfinite(avg), avg + alpha * (x - avg), x), avg)
        out[..., u] = np.where(ok, avg, np.nan)
    return out


def window_mean(a: np.ndarray, n: int) -> np.ndarray:
    """Trailing mean along the last axis: at update ``u`` the mean of the finite values among
    updates ``u - n + 1 .. u`` (fewer at the start); NaN where the input is NaN."""
    a = np.array(a, np.float64)
    ok = np.isfinite(a)
    pad = [(0, 0)] * (a.ndim - 1) + [(1, 0)]
    total = np.cumsum(np.pad(np.where(ok, a, 0.0), pad), axis=-1)
    count = np.cumsum(np.pad(ok, pad), axis=-1)
    lo = np.maximum(np.arange(a.shape[-1]) + 1 - n, 0)
    s = total[..., 1:] - np.take(total, lo, axis=-1)
    c = count[..., 1:] - np.take(count, lo, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, s / c, np.nan)


def smooth(a: np.ndarray, n: int, kind: str = "ema") -> np.ndarray:
    """``a`` smoothed along its last axis over ``n`` updates by ``kind`` (``SMOOTHERS``);
    ``n <= 1``: ``a`` unchanged."""
    if kind not in SMOOTHERS:
        raise ValueError(f"smoother {kind!r}: one of {', '.join(SMOOTHERS)}")
    if n <= 1:
        return np.array(a, np.float64)
    return ema(a, n) if kind == "ema" else window_mean(a, n)


def iqm(values: np.ndarray, axis: int = -2) -> np.ndarray:
    """Interquartile mean over ``axis`` (the seeds), NaN-aware: of the ``n`` finite values, drop
    the ``floor(n / 4)`` lowest and as many highest and average the rest (``scipy.stats.trim_mean``
    at 0.25 on the finite values; the mean when ``n < 4``). NaN where none is finite."""
    v = np.moveaxis(np.asarray(values, np.float64), axis, -1)
    srt = np.sort(v, axis=-1)  # NaN sorts last
    n = np.isfinite(srt).sum(-1, keepdims=True)
    k = n // 4
    i = np.arange(srt.shape[-1])
    keep = (i >= k) & (i < n - k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(keep, srt, 0.0).sum(-1) / keep.sum(-1)


def bootstrap_iqm(
    values: np.ndarray, resamples: int = 1000, level: float = 0.95, seed: int = 0, block: int = 100
) -> tuple:
    """``(low [U], high [U])``: the percentile-bootstrap interval at ``level`` of the IQM over the
    seeds of ``values [S, U]``. Each resample draws ``S`` seeds with replacement and keeps whole
    curves (every update of a resampled seed comes with it); ``seed`` fixes the draws, so a plot
    is reproducible. Computed ``block`` resamples at a time (memory ``block x S x U``)."""
    values = np.asarray(values, np.float64)
    rng = np.random.default_rng(seed)
    s = values.shape[0]
    stats = []
    for start in range(0, resamples, block):
        idx = rng.integers(0, s, size=(min(block, resamples - start), s))
        stats.append(iqm(values[idx], axis=1))  # [b, S, U] -> [b, U]
    stats = np.concatenate(stats)
    tail = 100 * (1 - level) / 2
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # updates where no resample has a value
            return tuple(np.nanpercentile(stats, [tail, 100 - tail], axis=0))
