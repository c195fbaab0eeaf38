"""The reward-model kind (recorded as ``reward``): the ``reward`` command's folders.

One registered :class:`~purejaxppo.run.kinds.RunKind`; the program is
:class:`~purejaxppo.programs.reward_program.RewardProgram`, the front door
:mod:`purejaxppo.programs.reward_run`. Its evaluation is in the run itself (the held-out
pairs' loss and accuracy every epoch, ``metrics.csv``); the model is ``RUN_DIR/model``.
"""

from __future__ import annotations

from typing import Optional

from purejaxppo.config import ConfigError
from purejaxppo.run import kinds
from purejaxppo.run import run_folder as rf


class RewardRuns:
    names = ("reward-model",)
    command = "reward"
    what = "reward-model"
    config_type = kinds.Lazy("purejaxppo.programs.reward_program", "RewardConfig")
    settings_type = kinds.Lazy("purejaxppo.programs.reward_program", "RewardSettings")
    headline = ("eval_accuracy", "eval_accuracy")
    warm_start = None  # a reward model's state: it cannot start a control run

    def name_of(self, raw: dict) -> str:
        return self.names[0]

    def program(self, record, *, num_devices: int = 1, split: str = "seeds", executables: Optional[str] = None):
        from purejaxppo.programs.reward_program import RewardProgram
        from purejaxppo.programs.reward_run import prepare

        return RewardProgram(record.config, record.settings, *prepare(record.settings, record.config, record.seed)[:4])

    def resume(self, run_dir: str, record, **kwargs):
        from purejaxppo.programs.reward_run import resume_reward

        kwargs.pop("program", None)  # the front door builds it (it reads and checks the pairs file first)
        return resume_reward(run_dir, record, **kwargs)

    def load(self, run_dir: str, record, checkpoint: Optional[str] = None) -> kinds.Loaded:
        import jax

        from purejaxppo.programs.reward_run import run_keys
        from purejaxppo.run.checkpoint import restore_checkpoint

        path = rf.checkpoint_to_load(run_dir, record, checkpoint)
        prog = self.program(record)
        state, meta = restore_checkpoint(path, jax.eval_shape(prog.init, *run_keys(record.seed, record.num_seeds)))
        return kinds.Loaded(record, state, prog, path, int(meta["update"]))

    def evaluate(self, run_dir: str, record, request: kinds.EvalRequest) -> tuple:
        raise ConfigError(
            f"{run_dir!r} holds a {self.what} run, evaluated on its held-out pairs every epoch: read "
            f"eval_accuracy in its metrics.csv (or plot {run_dir}); the model is in {run_dir}/model"
        )

    def report(self, result, run_dir: str) -> None:
        from purejaxppo.programs.reward_run import MODEL

        acc, loss = result.metrics.get("eval_accuracy"), result.metrics.get("eval_loss")
        if acc is not None and acc.size:
            print(
                f"held-out pairwise accuracy {float(acc[:, -1].mean()):.3f}, loss {float(loss[:, -1].mean()):.4f} "
                f"after {result.updates_done} epoch(s)"
            )
        print(
            f"wrote {run_dir} (metrics.csv, checkpoints"
            + (
                f", {MODEL}/: the reward model)"
                if result.finished
                else f"); continue with python -m purejaxppo reward --resume {run_dir}"
            )
        )


kinds.register(RewardRuns())
