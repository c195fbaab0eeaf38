"""``python -m purejaxppo rlhf``: token-level PPO on a built-in task (SFT, then PPO), or ``--resume``.

The run folder is a control run's (config.json, metrics.csv with one row per iteration and
seed, checkpoints, summary.json) plus ``samples.txt`` (greedy generations at every
``--eval-every``). The flags map onto :class:`~purejaxppo.lm.config.TokenPPOConfig` and
:class:`~purejaxppo.programs.rlhf_program.RLHFSettings`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.train_setup import add_sink_flags, check_sinks, sinks_for

# flag -> (TokenPPOConfig field, type, help)
CONFIG_FLAGS = {
    "--iterations": ("num_iterations", int, "PPO iterations (default 80)"),
    "--batch": ("batch_size", int, "prompts per iteration (default 64)"),
    "--epochs": ("update_epochs", int, "epochs over each batch (default 4)"),
    "--minibatches": ("num_minibatches", int, "minibatches per epoch (default 4)"),
    "--micro-batches": ("micro_batches", int, "gradient accumulation: passes per minibatch (default 1)"),
    "--beta": ("beta", float, "KL coefficient (the initial one with --kl-target) (default 0.02)"),
    "--kl-target": ("kl_target", float, "adaptive KL: target KL per sequence (turns the controller on)"),
    "--kl-estimator": ("kl_estimator", str, "per-token KL in the reward: k1 | k2 | k3 | abs (default k1)"),
    "--actor-lr": ("actor_lr", float, "policy learning rate (default 1e-3)"),
    "--critic-lr": ("critic_lr", float, "critic learning rate (default 1e-3)"),
    "--critic": ("critic", str, "separate (its own model) | value_head (on the policy's trunk) (default separate)"),
    "--temperature": ("temperature", float, "sampling temperature (default 1)"),
    "--top-k": ("top_k", int, "sample from the k most probable tokens (default 0 = off)"),
    "--top-p": ("top_p", float, "nucleus sampling mass (default 1 = off)"),
    "--ent-coef": ("ent_coef", float, "entropy bonus (default 0)"),
    "--missing-eos-penalty": ("missing_eos_penalty", float, "subtracted from a response with no EOS (default 1)"),
}
DEFAULTS = dict(num_iterations=80, batch_size=64, actor_lr=1e-3, critic_lr=1e-3, beta=0.02)
# each task's preset (flags and --task-option override it): reversal of up to 6 digits after a
# short SFT leaves the SFT model at about 0.3 greedy exact match, with room for PPO to show (about
# 0.6 after 80 iterations, experiments/lm/RESULTS.md); longer strings learn far slower
TASK_PRESETS = {"reverse": dict(task_options={"max_len": 6, "max_new": 8}, sft_steps=40),
                "grammar": dict(task_options={}, sft_steps=300)}
SETTING_FLAGS = {
    "--sft-steps": ("sft_steps", int, "supervised steps before PPO (default: the task's preset, 40 for reverse)"),
    "--d-model": ("d_model", int, "TinyLM width (default 32)"),
    "--layers": ("n_layers", int, "TinyLM layers (default 2)"),
    "--heads": ("n_heads", int, "TinyLM attention heads (default 2)"),
    "--init": ("init", str, "start from a local GPT-2 folder (config.json + model.safetensors, HF layout)"),
    "--eval-every": ("eval_every", int, "greedy evaluation on fixed prompts every N iterations (default 10; 0 = off)"),
}


def add_rlhf(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="reverse", help="built-in task: reverse (exact match) | grammar (default reverse)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="independent runs trained at once (default 1)")
    p.add_argument("--run-dir", default=None, help="run folder (default runs/rlhf-TASK-<time>)")
    p.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue this run folder (no other flags)")
    p.add_argument("--devices", default="1", help="split each iteration's prompts over N devices (default 1)")
    p.add_argument("--chunk", type=int, default=10, help="iterations per compiled chunk (default 10)")
    p.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
    p.add_argument("--task-option", dest="rl_task_options", action="append", metavar="FIELD=VALUE", default=None,
                   help="a field of the task (e.g. max_len=6, partial_credit=true); repeatable")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_sink_flags(p)
    for flag, (dest, typ, text) in {**CONFIG_FLAGS, **SETTING_FLAGS}.items():
        p.add_argument(flag, dest=f"rl_{dest}", type=typ, default=None, help=text, metavar=flag[2:].upper())


def _config_and_settings(args):
    from purejaxppo.lm.config import TokenPPOConfig, validate_token_config
    from purejaxppo.programs.rlhf_program import RLHFSettings

    cfg = {**DEFAULTS, **{d: getattr(args, f"rl_{d}") for d, _, _ in CONFIG_FLAGS.values()
                          if getattr(args, f"rl_{d}") is not None}}
    if "kl_target" in cfg:
        cfg["adaptive_kl"] = True
    st = {d: getattr(args, f"rl_{d}") for d, _, _ in SETTING_FLAGS.values() if getattr(args, f"rl_{d}") is not None}
    st.setdefault("eval_every", 10)
    preset = TASK_PRESETS.get(args.task, {"task_options": {}})
    st.setdefault("sft_steps", preset.get("sft_steps", 100))
    options = {**preset["task_options"], **dict(_task_options(args.rl_task_options or []))}
    settings = RLHFSettings(task=args.task, task_options=tuple(sorted(options.items())),
                            dtype="bfloat16" if args.bf16 else "float32", **st)
    try:
        settings.make_task()
    except (ValueError, TypeError) as e:  # an unknown task, an unknown field, a value out of range
        raise UserError(f"--task {args.task}: {e}") from None
    return validate_token_config(TokenPPOConfig(**cfg)), settings


def _task_options(items) -> tuple:
    """``["max_len=6", "partial_credit=true"]`` -> ``(("max_len", 6), ("partial_credit", True))``."""
    out = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise UserError(f"--task-option {item!r} must be FIELD=VALUE (e.g. max_len=6)")
        low = value.lower()
        try:
            out[field] = True if low == "true" else False if low == "false" else (
                int(value) if value.lstrip("-").isdigit() else float(value))
        except ValueError:
            raise UserError(f"--task-option {item!r}: the value must be a number, true or false") from None
    return tuple(sorted(out.items()))


def cmd_rlhf(args) -> int:
    from purejaxppo.cli.devices import choose_devices, set_devices

    given = [f for f, (d, _, _) in {**CONFIG_FLAGS, **SETTING_FLAGS}.items() if getattr(args, f"rl_{d}") is not None]
    given += ["--task-option"] if args.rl_task_options else []
    if args.resume and given:
        raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    if args.resume:  # the folder's kind says which command continues it
        from purejaxppo.cli.train_cmd import refuse_other_command
        from purejaxppo.programs import kinds

        kind, record = kinds.folder(args.resume)
        refuse_other_command(kind, args.resume, args.command)
        devices = record.num_devices
    else:
        config, settings = _config_and_settings(args)
        devices = choose_devices(args.devices, config.batch_size, f"--batch ({config.batch_size})")
        if args.run_dir:  # a used folder is refused before the SFT runs
            from purejaxppo.run.run_folder import refuse_existing_run

            refuse_existing_run(args.run_dir)
    check_sinks(args)
    set_devices(devices)
    from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
    from purejaxppo.run.progress import progress_bar

    on_chunk, close = progress_bar(args.quiet, f"rlhf {args.task}", metric="score", eval_metric="eval_score",
                                   shown="score", steps="sequences", fmt=".3f")
    try:
        if args.resume:
            result = resume_rlhf(args.resume, record, on_chunk=on_chunk,
                                 loggers=sinks_for(args, args.resume, record.config, 1))
            run_dir = args.resume
        else:
            run_dir = args.run_dir or os.path.join("runs", f"rlhf-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}")
            t = time.perf_counter()
            sft = sft_model(settings, args.seed)
            if not args.quiet:
                ev = {k[5:]: round(v, 3) for k, v in sft[2].items() if k.startswith("eval_")}
                print(f"SFT: {settings.sft_steps} steps in {time.perf_counter() - t:.1f}s; greedy {json.dumps(ev)}",
                      flush=True)
            result = train_rlhf(config, settings, seed=args.seed, num_seeds=args.seeds, run_dir=run_dir,
                                num_devices=devices, chunk_updates=args.chunk, on_chunk=on_chunk, sft=sft,
                                loggers=sinks_for(args, run_dir, config, 1))
    finally:
        close()
    if not args.quiet:
        _report(run_dir)
    return 0


def _report(run_dir: str) -> None:
    from purejaxppo.programs.rlhf_kind import report_token_run

    report_token_run(run_dir)
