"""Run kinds by name: how a run folder's program is rebuilt to resume it.

``config.json`` records its run's ``kind``; :func:`program_for_folder` looks the kind up here.
A new run kind adds its module to :mod:`purejaxppo.programs` and one entry to :data:`KINDS`
(or calls :func:`register_kind`), and the loop, ``resume_run`` and ``train --resume`` need no
other change.
"""

from __future__ import annotations

from typing import Callable, Dict

from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings
from purejaxppo.programs.program import Program
from purejaxppo.run.checkpoint import CheckpointError
from purejaxppo.run.protocol import RunProgram
from purejaxppo.programs.rlhf_program import RLHFProgram, RLHFSettings

#: ``kind -> build(info, num_devices, split) -> RunProgram``; ``info``: the folder's config.json
KINDS: Dict[str, Callable[..., RunProgram]] = {
    "run": lambda info, num_devices, split: Program(info["config"], num_devices=num_devices, split=split),
    "sweep": lambda info, num_devices, split: Program(info["config"], num_devices=num_devices, split=split),
    "pbt": lambda info, num_devices, split: PBTProgram(info["config"], PBTSettings.from_dict(info["pbt"]),
                                                       num_devices=num_devices, num_seeds=info["num_seeds"]),
}



def _rlhf(info, num_devices, split):
    settings = RLHFSettings.from_dict(info["rlhf"])
    return RLHFProgram(info["config"], settings, *RLHFProgram.template(settings), num_devices=num_devices)


KINDS["rlhf"] = _rlhf


def _resume_rlhf(run_dir, **kwargs):
    from purejaxppo.programs.rlhf_run import resume_rlhf

    return resume_rlhf(run_dir, **kwargs)


def _reward(info, num_devices, split):
    from purejaxppo.programs.reward_run import prepare
    from purejaxppo.programs.reward_program import RewardProgram

    return RewardProgram(info["config"], info["reward"], *prepare(info["reward"], info["config"], info["seed"])[:4])


def _resume_reward(run_dir, **kwargs):
    from purejaxppo.programs.reward_run import resume_reward

    return resume_reward(run_dir, **kwargs)


KINDS["reward"] = _reward

#: kinds with their own front door: ``resume(run_dir, **kwargs) -> RunResult`` (``resume_run`` hands over)
RESUMERS: Dict[str, Callable] = {"rlhf": _resume_rlhf, "reward": _resume_reward}


def register_kind(name: str, build: Callable[..., RunProgram]) -> None:
    """Make run folders of kind ``name`` resumable: ``build(info, num_devices, split)``."""
    KINDS[name] = build


def program_for_folder(info: dict, *, num_devices: int = 1, split: str = "seeds") -> RunProgram:
    """The program that continues a folder with this ``config.json`` (``info``)."""
    kind = info.get("kind") or ("sweep" if info.get("members") else "run")  # folders from before kinds were recorded
    if kind not in KINDS:
        raise CheckpointError(f"this folder holds a {kind!r} run, which this purejaxppo cannot resume (known kinds: "
                              f"{', '.join(sorted(KINDS))}); nothing was changed")
    return KINDS[kind](info, num_devices, split)
