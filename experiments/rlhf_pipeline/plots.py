"""The pipeline's tables and figures from its evaluation rows (``eval.csv``): per reward
(``rm``: the learned reward model; ``true``: the true objective, the ceiling) and beta, the TRUE
objective and the PROXY (reward-model score) against KL from the SFT model and against the PPO
iteration, mean over seeds (thick) and each seed (thin)."""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

COLORS = {"rm": "tab:red", "true": "tab:blue"}
PANELS = (("true", "TRUE objective"), ("proxy", "proxy (reward model)"), ("corr", "corr(proxy, true) over samples"))
LABELS = {"rm": "PPO on the reward model", "true": "PPO on the true objective"}


def _grouped(rows):
    """``{(reward, beta): {iteration: [row per seed]}}``."""
    out = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[(r["reward"], float(r["beta"]))][int(r["iteration"])].append(r)
    return out


def _curve(by_it, key):
    its = sorted(by_it)
    return np.array(its), np.array([[float(r[key]) for r in sorted(by_it[i], key=lambda r: r["seed"])] for i in its])


def summary_table(rows) -> list:
    """One dict per (reward, beta): start, peak (of the seed mean) and end of true and proxy."""
    table = []
    for (reward, beta), by_it in sorted(_grouped(rows).items()):
        its, true = _curve(by_it, "true")
        _, proxy = _curve(by_it, "proxy")
        _, kl = _curve(by_it, "kl")
        m_true, m_proxy, m_kl = true.mean(1), proxy.mean(1), kl.mean(1)
        peak = int(np.argmax(m_true))
        table.append(
            {
                "reward": reward,
                "beta": beta,
                "seeds": true.shape[1],
                "true_sft": round(float(m_true[0]), 3),
                "proxy_sft": round(float(m_proxy[0]), 3),
                "true_peak": round(float(m_true[peak]), 3),
                "peak_iteration": int(its[peak]),
                "kl_at_peak": round(float(m_kl[peak]), 2),
                "proxy_at_peak": round(float(m_proxy[peak]), 3),
                "true_final": round(float(m_true[-1]), 3),
                "proxy_final": round(float(m_proxy[-1]), 3),
                "kl_final": round(float(m_kl[-1]), 2),
                "final_iteration": int(its[-1]),
                "true_final_per_seed": [round(float(x), 2) for x in true[-1]],
                "proxy_max_iteration": int(its[int(np.argmax(m_proxy))]),
            }
        )
    return table


def markdown_table(table) -> str:
    head = (
        "| reward | beta | true: SFT -> peak (iter, KL) -> final | proxy: SFT -> at true peak -> final "
        "| final KL | final true per seed |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for t in table:
        lines.append(
            f"| {t['reward']} | {t['beta']:g} | {t['true_sft']:.2f} -> {t['true_peak']:.2f} "
            f"({t['peak_iteration']}, {t['kl_at_peak']:.1f}) -> {t['true_final']:.2f} "
            f"| {t['proxy_sft']:.2f} -> {t['proxy_at_peak']:.2f} -> {t['proxy_final']:.2f} "
            f"| {t['kl_final']:.1f} | {', '.join(f'{x:.2f}' for x in t['true_final_per_seed'])} |"
        )
    return "\n".join(lines)


def _panel(ax, groups, beta, x_key, y_key):
    for reward in ("rm", "true"):
        by_it = groups.get((reward, beta))
        if not by_it:
            continue
        its, y = _curve(by_it, y_key)
        x = its[:, None].repeat(y.shape[1], 1) if x_key == "iteration" else _curve(by_it, x_key)[1]
        for s in range(y.shape[1]):
            ax.plot(x[:, s], y[:, s], color=COLORS[reward], alpha=0.25, lw=0.8)
        ax.plot(x.mean(1), y.mean(1), color=COLORS[reward], lw=2.2, marker="o", ms=3, label=LABELS[reward])


def plot_all(rows, out: str) -> list:
    """``proxy_true_vs_kl.png`` and ``proxy_true_vs_iteration.png`` in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _grouped(rows)
    betas = sorted({b for _, b in groups})
    paths = []
    for x_key, xlabel in (("kl", "KL(policy || SFT) per response, nats"), ("iteration", "PPO iteration")):
        fig, axes = plt.subplots(3, len(betas), figsize=(4.2 * len(betas), 10), squeeze=False)
        for j, beta in enumerate(betas):
            for i, (y_key, ylabel) in enumerate(PANELS):
                ax = axes[i, j]
                _panel(ax, groups, beta, x_key, y_key)
                ax.set_title(f"beta = {beta:g}: {ylabel}", fontsize=10)
                ax.set_xlabel(xlabel, fontsize=9)
                ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=8)
        fig.suptitle("mean over seeds (thick), each seed (thin)", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, f"proxy_true_vs_{x_key}.png")
        fig.savefig(path, dpi=75)
        plt.close(fig)
        paths.append(path)
    return paths
