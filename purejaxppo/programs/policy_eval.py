"""``eval RUN_DIR`` of a control run (one config, a sweep, PBT): play the trained policies.

:func:`evaluate_policies` is the ``evaluate`` of the kinds whose runs are control policies
(:mod:`purejaxppo.programs.run_kind`, :mod:`purejaxppo.programs.pbt_kind`): every run (or
one member's runs) plays ``episodes`` episodes, and the report gives one summary per policy
(a sweep's or PBT run's members are different policies: never pooled).
"""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.run.kinds import EvalRequest, Loaded

DEFAULT_EPISODES = 100  # per run, when the command does not say


def check_member(record, member: Optional[int], run_dir: str) -> None:
    """``--member`` names one of the record's members (checked before anything is loaded)."""
    members = record.members
    if member is not None and (not members or not 0 <= member < len(members)):
        what = f"has {len(members)} members (0..{len(members) - 1})" if members else "has no members"
        raise ConfigError(f"--member {member}: {run_dir!r} {what}")


def pick_member(loaded: Loaded, member: Optional[int], run_dir: str) -> Loaded:
    """``loaded`` with only member ``member``'s runs (None: all runs)."""
    check_member(loaded.record, member, run_dir)
    if member is None:
        return loaded
    seeds = loaded.record.num_seeds
    return loaded._replace(runner=jax.tree.map(lambda x: x[member * seeds : (member + 1) * seeds], loaded.runner))


def evaluate_policies(
    loaded: Loaded, request: EvalRequest, run_dir: str, member: Optional[int], show_values: bool
) -> tuple:
    """``(summary, lines)``: ``request.episodes`` episodes of every run of ``loaded`` (already
    cut to ``member`` when it is not None); ``show_values``: a member's swept values are
    part of its name (a sweep's; a PBT member's change during training)."""
    from purejaxppo.step.evaluate import evaluate_runner, find_obs_stats, gif_renderer, save_gif

    request = request._replace(episodes=DEFAULT_EPISODES if request.episodes is None else request.episodes)
    record, runner, ppo = loaded.record, loaded.runner, loaded.agent_fns
    config = record.config
    if request.gif:
        gif_renderer(config)  # an env we cannot draw fails now, not after the evaluation
    key = jax.random.PRNGKey(request.seed)
    ret, length = evaluate_runner(config, ppo.agent, runner, key, request.episodes, not request.stochastic)
    s = {
        "run_dir": run_dir,
        "checkpoint": loaded.checkpoint,
        "update": loaded.update,
        **({"member": member} if member is not None else {}),
        "policy": "stochastic" if request.stochastic else "deterministic (mode)",
        "episodes_per_seed": request.episodes,
        **({"protocol": request.protocol} if request.protocol else {}),
    }
    members = record.members if member is None else None
    if members:
        seeds = record.num_seeds
        s["members"] = [
            {
                "member": m,
                **({"values": v} if show_values else {}),
                **returns(ret[m * seeds : (m + 1) * seeds], length[m * seeds : (m + 1) * seeds]),
            }
            for m, v in enumerate(members)
        ]
    else:
        s.update(returns(ret, length))
    if request.gif:
        stats = find_obs_stats(runner.env_state) if config.normalize_obs else None
        params0 = jax.tree.map(lambda x: x[0], runner.train.params)
        stats0 = None if stats is None else jax.tree.map(lambda x: x[0], stats)
        s["gif"], s["gif_frames"] = (
            request.gif,
            save_gif(
                request.gif,
                config,
                ppo.agent,
                params0,
                jax.random.PRNGKey(request.seed),
                stats0,
                not request.stochastic,
            ),
        )
    return s, lines(s, config, request)


def returns(ret, length) -> dict:
    """mean/std/min/max/per-seed means of the returns ``[S, E]`` of one policy's seeds, and the mean length."""
    from purejaxppo.step.evaluate import summarize

    s = summarize(ret)
    s["mean_length"] = float(np.nanmean(np.where(np.isfinite(ret), length, np.nan))) if s["episodes"] else None
    return s


def lines(s: dict, config, request: EvalRequest) -> list:
    """The summary as text: one block per member of a sweep or PBT run."""
    blocks = s.get("members") or [s]
    seeds = len(blocks[0]["per_seed_mean"])
    of = (
        f" of member {s['member']}"
        if "member" in s
        else (f" per member, {len(blocks)} members" if "members" in s else "")
    )
    out = [
        f"{config.env_name} | {s['checkpoint']} (update {s['update']}/{config.num_updates}) | "
        f"{s['policy']} policy | {request.episodes} episode(s) x {seeds} seed(s){of}"
    ]
    for b in blocks:
        who = ""
        if "members" in s:
            values = ", ".join(f"{k}={v:g}" for k, v in b.get("values", {}).items())
            who = f"member {b['member']}{f' ({values})' if values else ''}: "
        out.append(
            f"{who}return: mean {b['mean']:.2f}  std {b['std']:.2f}  min {b['min']:.2f}  max {b['max']:.2f}  "
            f"({b['episodes']} finished episodes)"
        )
        if len(b["per_seed_mean"]) > 1:
            out.append(f"{'  ' if who else ''}per seed mean: " + "  ".join(f"{x:.2f}" for x in b["per_seed_mean"]))
    if request.gif:
        out.append(f"episode of seed 0 rendered to {request.gif} ({s['gif_frames']} frames)")
    return out
