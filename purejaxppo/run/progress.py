"""The CLI's progress bar: updates done/total, env steps, return, greedy eval return, steps/s, ETA (tqdm)."""

from __future__ import annotations

import sys

import numpy as np


def progress_bar(
    quiet: bool,
    label: str,
    metric: str = "episode_return",
    eval_metric: str = "eval_return",
    shown: str = "return",
    steps: str = "steps",
    fmt: str = ".1f",
):
    """``(on_chunk, close)``: ``on_chunk(info)`` is the chunk loop's callback (see
    :func:`purejaxppo.run.loop.run_chunks`); the bar appears with the first chunk. It shows
    the runs' mean of ``metric`` (as ``shown``) and of the latest ``eval_metric``; ``steps``
    names what the loop counts (env steps; sequences for token-level PPO)."""
    state = {"bar": None, "eval": ""}

    def on_chunk(info):
        if quiet:
            return
        if state["bar"] is None:
            from tqdm import tqdm

            print(f"compiled in {info['compile_s']:.1f}s", flush=True)
            state["bar"] = tqdm(
                total=info["num_updates"],
                initial=info.get("start_update", 0),
                unit="upd",
                dynamic_ncols=True,
                file=sys.stdout,
                mininterval=0.5,
                desc=label,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} updates "
                "[{elapsed}<{remaining} ETA{postfix}]",
            )
        bar = state["bar"]
        bar.update(info["updates"] - bar.n)
        ret = np.asarray(info["metrics"][metric], np.float64)
        finite, last = ret[np.isfinite(ret)], ret[:, -1][np.isfinite(ret[:, -1])]
        latest = last.mean() if last.size else (finite.mean() if finite.size else float("nan"))
        if (info.get("evaluated") or {}).get(eval_metric) is not None:  # the latest evaluation, kept until the next
            ev = np.asarray(info["evaluated"][eval_metric], np.float64)
            state["eval"] = f" | eval {ev[np.isfinite(ev)].mean() if np.isfinite(ev).any() else float('nan'):{fmt}}"
        bar.set_postfix_str(
            f"{steps} {info['env_steps']:,} | {shown} {latest:{fmt}}{state['eval']} | "
            f"{info['steps_per_s']:,.0f} {steps}/s"
        )

    def close():
        if state["bar"] is not None:
            state["bar"].close()

    return on_chunk, close
