"""Tables and curves for experiments/pbt/run.sh: PBT vs no exploitation vs the preset.

Usage: python experiments/pbt/summarize.py OUT [--figures experiments/pbt]

For every env found in OUT (folders ``TAG-pbtN-iK-sS`` and ``TAG-preset-4seeds``) prints one
markdown table: per repetition the best, median and worst member's final return (the mean
return of episodes that ended in the last 5% of updates, as ``summary.json`` has it), then
the mean over repetitions. The question the table answers: does PBT's best member beat the
best member of the same population trained without exploitation, at equal env steps per member?
Writes ``TAG-curves.png``: the population's median and max over members per update (mean over
repetitions, 10-update moving average), per arm, and every repetition's max in thin lines.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from purejaxppo.cli.curve_stats import ffill, window_mean  # noqa: E402
from purejaxppo.cli.curves import load_curves  # noqa: E402

RUN = re.compile(r"^(?P<tag>[a-z]+)-pbt(?P<n>\d+)-i(?P<interval>\d+)-s(?P<seed>\d+)$")


def finals(run_dir: str) -> np.ndarray:
    return np.asarray(json.load(open(os.path.join(run_dir, "summary.json")))["final_return_per_seed"], float)


def curves(run_dir: str, smooth: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(env_steps per member [U], returns [members, U])``: per member (or seed) the training
    return per update, NaN-free after the first episode, averaged over a trailing ``smooth`` updates."""
    cs = load_curves(run_dir)
    r = np.concatenate([c.values for c in cs])  # [members or seeds, U]
    r = np.stack([ffill(x) for x in r])
    r = window_mean(r, smooth)  # mean of the finite values in the window (NaN before the first episode ends)
    return cs[0].env_steps, r


def area(run_dir: str) -> np.ndarray:
    """Per member, the mean training return over the whole run (area under its curve / steps)."""
    return np.nanmean(curves(run_dir)[1], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--figures", default=os.path.dirname(__file__))
    args = ap.parse_args()
    runs: dict = {}
    for path in sorted(glob.glob(os.path.join(args.out, "*"))):
        m = RUN.match(os.path.basename(path))
        if m and os.path.exists(os.path.join(path, "summary.json")):
            arm = "PBT" if int(m["interval"]) else "no exploitation"
            runs.setdefault(m["tag"], {}).setdefault(arm, []).append((int(m["seed"]), int(m["interval"]), path))
    for tag, arms in runs.items():
        print(f"\n### {tag}\n")
        print(
            "| arm | rep (seed) | best member | median member | worst member | exploits | "
            "median member's mean return over training |"
        )
        print("|---|---|---|---|---|---|---|")
        summary = {}
        for arm in ("PBT", "no exploitation"):
            best = []
            for seed, interval, path in sorted(arms.get(arm, [])):
                f = finals(path)
                s = json.load(open(os.path.join(path, "summary.json")))
                auc = float(np.nanmedian(area(path)))
                best.append((np.nanmax(f), np.nanmedian(f), np.nanmin(f), auc))
                print(
                    f"| {arm} (interval {interval}) | {seed} | {np.nanmax(f):.1f} | {np.nanmedian(f):.1f} | "
                    f"{np.nanmin(f):.1f} | {s.get('exploits', 0)} | {auc:.1f} |"
                )
            if best:
                b = np.array(best)
                summary[arm] = b
                print(
                    f"| **{arm}, mean of {len(b)}** | | **{b[:, 0].mean():.1f}** | **{b[:, 1].mean():.1f}** | "
                    f"**{b[:, 2].mean():.1f}** | | **{b[:, 3].mean():.1f}** |"
                )
        preset = os.path.join(args.out, f"{tag}-preset-4seeds")
        if os.path.exists(os.path.join(preset, "summary.json")):
            f = finals(preset)
            print(
                f"| preset, 4 seeds | - | {np.nanmax(f):.1f} | {np.nanmedian(f):.1f} | {np.nanmin(f):.1f} | "
                f"(mean {np.nanmean(f):.1f}) | {np.nanmedian(area(preset)):.1f} |"
            )
        if "PBT" in summary and "no exploitation" in summary:
            p, s = summary["PBT"], summary["no exploitation"]
            n = min(len(p), len(s))
            wins = int(np.sum(p[:n, 0] > s[:n, 0] + 1e-6))
            ties = int(np.sum(np.abs(p[:n, 0] - s[:n, 0]) <= 1e-6))
            print(
                f"\nPBT's best member vs the static population's best, paired by seed: {wins} wins, {ties} ties, "
                f"{n - wins - ties} losses of {n}; best-member difference mean {np.mean(p[:n, 0] - s[:n, 0]):+.1f}."
            )
        plot(tag, arms, preset, os.path.join(args.figures, f"{tag}-curves.png"))


def plot(tag: str, arms: dict, preset: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, color in (("PBT", "C0"), ("no exploitation", "C1")):
        meds, bests, steps = [], [], None
        for _, _, path in sorted(arms.get(arm, [])):
            steps, r = curves(path, smooth=10)
            meds.append(np.nanmedian(r, axis=0))
            bests.append(np.nanmax(r, axis=0))
            ax.plot(steps, bests[-1], color=color, lw=0.5, alpha=0.4)
        if meds:
            ax.plot(steps, np.mean(meds, axis=0), color=color, lw=2, label=f"{arm}: median member")
            ax.plot(steps, np.mean(bests, axis=0), color=color, lw=1.5, ls="--", label=f"{arm}: max over members")
    if os.path.exists(os.path.join(preset, "metrics.csv")):
        steps, r = curves(preset, smooth=10)
        ax.plot(steps, r.mean(axis=0), color="C2", lw=2, label="preset: mean of 4 seeds")
    ax.set_xlabel("env steps per member")
    ax.set_ylabel("training episode return")
    ax.set_title(
        f"{tag}: mean over repetitions, 10-update moving average\n(thin: each repetition's max over members)",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
