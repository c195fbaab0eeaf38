"""The kind of plain runs and sweeps (recorded as ``run`` or ``sweep``): ``train``'s folders.

One registered :class:`~purejaxppo.run.kinds.RunKind`. A record without a ``kind`` (folders
written before kinds were recorded) is read as this kind: a sweep when it has members.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

from purejaxppo.config import PPOConfig
from purejaxppo.programs.program import kind_name
from purejaxppo.run import kinds
from purejaxppo.run import run_folder as rf

#: the metric that sums up a control run (plain runs, sweeps and PBT), its name in summary.json
HEADLINE = ("episode_return", "return")


class ControlRuns:
    """``R = M x S`` control runs of one PPO config (``M = 1``) or a sweep's members."""

    names = (kind_name(None), kind_name([{}]))
    command = "train"
    what = "PPO (run or sweep)"
    config_type = PPOConfig
    settings_type = None
    headline = HEADLINE
    warm_start = ""  # the checkpoint holds the runner state itself

    def name_of(self, raw: dict) -> str:
        return kind_name(raw.get("members"))

    def program(self, record, *, num_devices: int, split: str, executables: Optional[str] = None):
        from purejaxppo.programs.program import Program

        return Program(record.config, num_devices=num_devices, split=split, executables=executables)

    def resume(self, run_dir: str, record, **kwargs):
        from purejaxppo.programs.runs import continue_chunked

        return continue_chunked(run_dir, record, **kwargs)

    def load(self, run_dir: str, record, checkpoint: Optional[str] = None) -> kinds.Loaded:
        runner, ppo, path, update = rf.restore_runs(run_dir, record, checkpoint)
        return kinds.Loaded(record, runner, ppo, path, update)

    def evaluate(self, run_dir: str, record, request: kinds.EvalRequest) -> tuple:
        from purejaxppo.programs.policy_eval import check_member, evaluate_policies, pick_member

        check_member(record, request.member, run_dir)
        loaded = pick_member(self.load(run_dir, record, request.checkpoint), request.member, run_dir)
        return evaluate_policies(loaded, request, run_dir, request.member, show_values=True)

    def report(self, result, run_dir: str) -> None:
        report_runs(result, run_dir)


def report_runs(res, run_dir: str) -> None:
    """The closing lines of a run or sweep: final returns (a sweep's table, also to results.md), speed."""
    import numpy as np

    from purejaxppo.parallel.runs_axis import results_table

    fr = res.final_return
    if res.members is not None:
        table = results_table(res.members, fr)
        print(table)
        if res.finished:
            with open(os.path.join(run_dir, rf.RESULTS), "w") as f:
                f.write(table + "\n")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            print(
                f"final return over {len(fr)} seed(s): mean {np.nanmean(fr):.1f}  min {np.nanmin(fr):.1f}  "
                f"max {np.nanmax(fr):.1f}"
            )
    print(
        f"compile {res.compile_s:.1f}s | run {res.run_s:.1f}s | {res.steps_per_s:,.0f} env-steps/s "
        f"({res.env_steps:,} steps this session)"
    )
    if not res.finished:
        print(
            f"stopped after {res.updates_done} of {res.config.num_updates} updates; continue with "
            f"`python -m purejaxppo train --resume {run_dir}`"
        )
    table = " and the table (results.md)" if res.members is not None and res.finished else ""
    print(f"metrics, config{',' if table else ' and'} checkpoints{table} written to {run_dir}")


kinds.register(ControlRuns(), default=True)
