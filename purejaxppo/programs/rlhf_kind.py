"""The token-level PPO kind (recorded as ``rlhf``): the ``rlhf`` command's folders.

One registered :class:`~purejaxppo.run.kinds.RunKind`; the program is
:class:`~purejaxppo.programs.rlhf_program.RLHFProgram`, the front door
:mod:`purejaxppo.programs.rlhf_run`. ``eval RUN_DIR`` answers the task's fixed evaluation
prompts greedily with the final (or given) checkpoint's policy, as the evaluation during
training does (:class:`~purejaxppo.programs.rlhf_eval.RLHFEvaluator`).
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from typing import Optional

import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.run import kinds
from purejaxppo.run import run_folder as rf


class TokenRuns:
    names = ("rlhf",)
    command = "rlhf"
    what = "token-level PPO (rlhf)"
    config_type = kinds.Lazy("purejaxppo.lm.ppo.token_config", "TokenPPOConfig")
    settings_type = kinds.Lazy("purejaxppo.programs.rlhf_settings", "RLHFSettings")
    headline = ("score", "score")
    warm_start = None  # its state is a language model's: it cannot start a control run

    def name_of(self, raw: dict) -> str:
        return self.names[0]

    def program(self, record, *, num_devices: int, split: str = "prompts", executables: Optional[str] = None):
        from purejaxppo.programs.rlhf_program import RLHFProgram

        return RLHFProgram(
            record.config, record.settings, *RLHFProgram.template(record.settings), num_devices=num_devices
        )

    def resume(self, run_dir: str, record, **kwargs):
        from purejaxppo.programs.rlhf_run import resume_rlhf

        return resume_rlhf(run_dir, record, **kwargs)

    def load(self, run_dir: str, record, checkpoint: Optional[str] = None) -> kinds.Loaded:
        """The runs' token-PPO state ``[S, ...]``; ``agent_fns``: the program (its ``lm``, ``task``)."""
        import jax

        from purejaxppo.programs.rlhf_run import run_keys
        from purejaxppo.run.checkpoint import restore_checkpoint

        path = rf.checkpoint_to_load(run_dir, record, checkpoint)
        prog = self.program(record, num_devices=1)
        state, meta = restore_checkpoint(path, jax.eval_shape(prog.init, *run_keys(record.seed, record.num_seeds)))
        return kinds.Loaded(record, state, prog, path, int(meta["update"]))

    def initial_policy(self, run_dir: str, record, run: int = 0) -> tuple:
        """``(params, update, checkpoint)``: run ``run``'s policy (LoRA merged, host arrays) at the
        newest checkpoint, for a token-level run to start from (``rlhf --init-from``)."""
        from purejaxppo.programs.rlhf_export import loaded_policy

        loaded = self.load(run_dir, record)
        return loaded_policy(loaded.runner, run), loaded.update, loaded.checkpoint

    def evaluate(self, run_dir: str, record, request: kinds.EvalRequest) -> tuple:
        from purejaxppo.lm.ppo.token_ppo import policy_params
        from purejaxppo.programs.rlhf_eval import RLHFEvaluator
        from purejaxppo.run import signals

        for flag, v in (
            ("--protocol", request.protocol),
            ("--episodes", request.episodes),
            ("--stochastic", request.stochastic or None),
            ("--member", request.member),
            ("--gif", request.gif),
        ):
            if v is not None:
                raise ConfigError(
                    f"{flag} does not apply to {run_dir!r}, a {self.what} run: eval answers its task's "
                    f"{record.settings.eval_batch} fixed evaluation prompts greedily; drop {flag}"
                )
        if getattr(record.settings, "env", None):  # episodes, not fixed prompts: no greedy evaluation yet
            raise ConfigError(
                f"{run_dir!r} trained on the environment {record.settings.env}, which has no fixed evaluation "
                "prompts; read its episodes' score, turns and terminated in metrics.csv"
            )
        loaded = self.load(run_dir, record, request.checkpoint)
        prog, settings = loaded.agent_fns, record.settings
        evaluator = RLHFEvaluator(prog.task, prog.lm, 1, settings.eval_batch)
        with signals.interrupts_at_safe_points():  # Ctrl-C inside a Python reward: raised once it returns
            stats, samples = evaluator.evaluate(policy_params(loaded.runner))
        stats = {k[len("eval_") :]: v for k, v in sorted(stats.items())}
        sft = record.notes.get("sft") or {}
        s = {
            "run_dir": run_dir,
            "checkpoint": loaded.checkpoint,
            "update": loaded.update,
            "policy": "greedy",
            "task": settings.task,
            "prompts": settings.eval_batch,
            "seeds": record.num_seeds,
            "mean": {k: float(np.mean(v)) for k, v in stats.items()},
            "per_seed": {k: [float(x) for x in v] for k, v in stats.items()},
            "sft_score": sft.get("eval_score"),
            "samples": samples,
        }
        lines = [
            f"{settings.task} | {loaded.checkpoint} (iteration {loaded.update}/{record.config.num_updates}) | "
            f"greedy policy | {settings.eval_batch} evaluation prompts x {record.num_seeds} seed(s)"
        ]
        for k, v in stats.items():
            per = "" if len(v) == 1 else "  (per seed " + "  ".join(f"{x:.3f}" for x in v) + ")"
            lines.append(f"{k}: {float(np.mean(v)):.3f}{per}")
        if sft.get("eval_score") is not None:
            lines.append(f"the SFT model it started from: score {sft['eval_score']:.3f}")
        lines += ["answers of seed 0:"] + [f"  {x}" for x in samples]
        return s, lines

    def report(self, result, run_dir: str) -> None:
        report_token_run(run_dir)


def report_token_run(run_dir: str) -> None:
    """The SFT baseline, the first and last iterations' score and KL, the latest evaluation, and
    the files the folder holds (only those that exist)."""
    with open(os.path.join(run_dir, rf.METRICS)) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(run_dir, rf.CONFIG)) as f:
        sft = json.load(f).get("sft") or {}
    value = lambda r, k: float(r[k]) if r.get(k) not in (None, "") else float("nan")  # noqa: E731
    updates = sorted({int(r["update"]) for r in rows})
    mean = lambda k, u: np.nanmean([value(r, k) for r in rows if int(r["update"]) == u])  # noqa: E731
    if "eval_score" in sft:  # an environment run has no SFT stage nor fixed prompts
        print(f"SFT model (greedy): score {sft['eval_score']:.3f}")
    kl = (  # no reference pass at beta 0 (nothing reads it): no kl column
        f"; KL per sequence {mean('kl', updates[0]):.3f} -> {mean('kl', updates[-1]):.3f}" if "kl" in rows[0] else ""
    )
    print(f"sampled score: {mean('score', updates[0]):.3f} -> {mean('score', updates[-1]):.3f}{kl}")
    if "reward_fn_s" in rows[0]:
        spent = sum(value(r, "reward_fn_s") for r in rows if r["seed"] == rows[0]["seed"])
        print(f"text reward on the host: {spent:.2f}s over {len(updates)} iterations (reward_fn_s in metrics.csv)")
    with warnings.catch_warnings():  # no evaluation yet: every eval_score is NaN (nanmean warns)
        warnings.simplefilter("ignore", RuntimeWarning)
        evaluated = [u for u in updates if "eval_score" in rows[0] and np.isfinite(mean("eval_score", u))]
    if evaluated:
        print(f"greedy score at iteration {evaluated[-1] + 1}: {mean('eval_score', evaluated[-1]):.3f}")
    held = [n for n in (rf.METRICS, "samples.txt", rf.CHECKPOINTS) if os.path.exists(os.path.join(run_dir, n))]
    print(f"wrote {run_dir} ({', '.join(held)}); continue with python -m purejaxppo rlhf --resume {run_dir}")


kinds.register(TokenRuns())
