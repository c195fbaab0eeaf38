"""What a run of the chunk loop returns (:class:`RunResult`) and two small rules it follows:
the chunk length (:func:`chunk_size`) and how a run is named in messages (:func:`describe_run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from purejaxppo.config import PPOConfig


@dataclass
class RunResult:
    config: PPOConfig
    run_dir: Optional[str]
    runner_state: object  # the program's state [R, ...]
    metrics: dict  # name -> [R, U] over the whole run (earlier sessions re-read from metrics.csv)
    compile_s: float
    run_s: float
    env_steps: int  # total over runs, this session
    final_return: np.ndarray  # [R]: the program's headline metric at the end (episode return, token score)
    extra: dict = field(default_factory=dict)
    updates_done: int = 0
    finished: bool = True  # False when stopped early by ``stop_after``
    members: Optional[list] = None  # the runs' members ({field: value} each); None for one config

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.run_s, 1e-9)


def chunk_size(num_updates: int, target: int) -> int:
    """The largest divisor of ``num_updates`` not above ``target`` when that is at least
    ``target/2`` (one compile), else ``target`` (the remainder then compiles once more)."""
    target = max(1, min(target, num_updates))
    best = max(d for d in range(1, target + 1) if num_updates % d == 0)
    return best if best * 2 >= target else target


def describe_run(r: int, num_seeds: int, members: Optional[list]) -> str:
    """Run ``r`` in words: its seed, and its member's values when there are members."""
    if members is None:
        return f"seed {r}"
    values = ", ".join(f"{k}={v:g}" for k, v in members[r // num_seeds].items())
    return f"member {r // num_seeds} ({values}), seed {r % num_seeds}"
