"""The PBT kind (recorded as ``pbt``): a population trained by ``train --pbt N``.

One registered :class:`~purejaxppo.run.kinds.RunKind`; the program is
:class:`~purejaxppo.programs.pbt_program.PBTProgram`, the front door
:mod:`purejaxppo.programs.pbt_run`.
"""

from __future__ import annotations

from typing import Optional

from purejaxppo.config import PPOConfig
from purejaxppo.programs.run_kind import HEADLINE
from purejaxppo.run import kinds


class _Settings:
    """``PBTSettings`` imported when a record is read (keeps this module light)."""

    @staticmethod
    def from_dict(d: dict):
        from purejaxppo.programs.pbt_program import PBTSettings

        return PBTSettings.from_dict(d)


class PBTRuns:
    names = ("pbt",)
    command = "train"
    what = "PBT"
    config_type = PPOConfig
    settings_type = _Settings
    headline = HEADLINE
    warm_start = ".runner"  # the population state holds its members' runner state

    def name_of(self, raw: dict) -> str:
        return self.names[0]

    def program(self, record, *, num_devices: int, split: str, executables: Optional[str] = None):
        from purejaxppo.programs.pbt_program import PBTProgram

        return PBTProgram(record.config, record.settings, num_devices=num_devices, num_seeds=record.num_seeds)

    def resume(self, run_dir: str, record, **kwargs):
        from purejaxppo.programs.pbt_run import resume_pbt

        return resume_pbt(run_dir, record, **kwargs)

    def load(self, run_dir: str, record, checkpoint: Optional[str] = None) -> kinds.Loaded:
        from purejaxppo.programs.pbt_run import load_pbt_run

        runner, ppo, path, update = load_pbt_run(run_dir, record, checkpoint)
        return kinds.Loaded(record, runner, ppo, path, update)

    def evaluate(self, run_dir: str, record, request: kinds.EvalRequest) -> tuple:
        from purejaxppo.programs.pbt_run import read_summary
        from purejaxppo.programs.policy_eval import check_member, evaluate_policies, pick_member

        member = request.member if request.member is not None else read_summary(run_dir).get("best_member")
        check_member(record, request.member, run_dir)
        loaded = pick_member(self.load(run_dir, record, request.checkpoint), member, run_dir)
        return evaluate_policies(loaded, request, run_dir, member, show_values=False)

    def report(self, result, run_dir: str) -> None:
        report_pbt(result, run_dir)


def report_pbt(res, run_dir: str) -> None:
    """The closing lines of a PBT run: final returns, the best member and its schedule, speed."""
    import numpy as np

    fr = np.asarray(res.final_return, np.float64)
    seeds = len(fr) // len(res.members or fr)
    runs = f"{len(fr) // seeds} members x {seeds} populations" if seeds > 1 else f"{len(fr)} members"
    print(
        f"final return over {runs}: best {np.nanmax(fr) if np.isfinite(fr).any() else float('nan'):.1f}"
        f"  median {np.nanmedian(fr) if np.isfinite(fr).any() else float('nan'):.1f}"
    )
    if "best_member" in res.extra:
        where = f" of population {res.extra['best_seed']}" if "best_seed" in res.extra else ""
        print(
            f"best member {res.extra['best_member']}{where} (final return {res.extra['best_final_return']:.1f}); "
            f"{res.extra.get('exploits', 0)} member copies (exploits) in lineage.csv"
        )
        for seg in res.extra.get("best_schedule", []):
            vals = ", ".join(f"{k}={v:.4g}" for k, v in seg.items() if k not in ("from_update", "member"))
            print(f"  from update {seg['from_update']:>5}: {vals}  (in member {seg['member']})")
    print(
        f"compile {res.compile_s:.1f}s | run {res.run_s:.1f}s | {res.steps_per_s:,.0f} env-steps/s "
        f"({res.env_steps:,} steps this session)"
    )
    if not res.finished:
        print(
            f"stopped after {res.updates_done} of {res.config.num_updates} updates; continue with "
            f"`python -m purejaxppo train --resume {run_dir}`"
        )
    print(f"metrics, lineage, config and checkpoints written to {run_dir}")


kinds.register(PBTRuns())
