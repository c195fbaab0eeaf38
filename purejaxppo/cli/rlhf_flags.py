"""The flags of ``python -m purejaxppo rlhf`` and what they become: a validated
:class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` and :class:`~purejaxppo.programs.rlhf_program.RLHFSettings`.

The config flags are generated from ``TokenPPOConfig``'s fields (one ``--flag`` per field, parsed
strictly by :func:`purejaxppo.cli.flags.flag_type`), as ``train``'s come from ``PPOConfig``; a
few keep a short name (:data:`RENAMES`). Their defaults are the config's; a built-in task
brings its own preset (:data:`TASK_PRESETS`), said in ``--help``. Every check here runs before
any work (no SFT, no compile, no folder created) and names the flag as typed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import typing

from purejaxppo.cli.distributed import add_process_flags
from purejaxppo.cli.errors import UserError, check_seed
from purejaxppo.cli.flags import flag_type, strict_float, strict_int
from purejaxppo.cli.train_setup import add_sink_flags
from purejaxppo.run.record import CHUNK_UPDATES

RENAMES = {
    "num_iterations": "--iterations",
    "batch_size": "--batch",
    "update_epochs": "--epochs",
    "num_minibatches": "--minibatches",
}
# set by the data (the task's, or the tokenizer's and --max-new-tokens), implied (adaptive_kl: by
# --kl-target), or Python-only (ptx needs a pretraining batch function)
NOT_FLAGS = ("max_new_tokens", "stop_ids", "pad_id", "adaptive_kl", "ptx", "ptx_coef")
# the built-in tasks' presets (flags override them): reversal of up to 6 digits after a short SFT
# leaves the SFT model at about 0.3 greedy exact match, with room for PPO to show (about 0.6 after
# 80 iterations, experiments/lm/RESULTS.md); longer strings learn far slower
TOY_CONFIG = dict(num_iterations=80, actor_lr=1e-3, critic_lr=1e-3, beta=0.02)
TASK_PRESETS = {
    "reverse": dict(task_options={"max_len": 6, "max_new": 8}, sft_steps=40, config=TOY_CONFIG),
    "grammar": dict(task_options={}, sft_steps=300, config=TOY_CONFIG),
}
# flag -> (RLHFSettings field, type, help); TEXT: the user's own model and data, TOY: a built-in task's
TEXT = {
    "--model": (
        "model_dir",
        str,
        "a local Hugging Face model folder (config.json, *.safetensors, tokenizer.json): "
        "the initial policy and the frozen reference",
    ),
    "--prompts": (
        "prompts",
        str,
        "training prompts: .jsonl ({\"prompt\": ...} or {\"messages\": [...]}) or .txt (one per line)",
    ),
    "--eval-prompts": ("eval_prompts", str, "prompts of the greedy evaluation (default: the first of --prompts)"),
    "--reward": ("reward", str, "FILE.py:FUNCTION or module:FUNCTION, fn(prompts, responses) -> list of floats"),
    "--reward-model": ("reward_model", str, "a local *ForSequenceClassification folder scoring prompt + response"),
    "--sft-data": ("sft_data", str, ".jsonl of {\"prompt\"/\"messages\", \"response\"}: a supervised stage first"),
    "--max-new-tokens": ("max_new_tokens", strict_int, "response budget in tokens (default 16)"),
    "--max-prompt-tokens": (
        "max_prompt_tokens",
        strict_int,
        "prompt budget (default 0: the model's positions minus --max-new-tokens)",
    ),
    "--sft-batch": ("sft_batch", strict_int, "pairs per SFT step (default 64)"),
    "--sft-lr": ("sft_lr", strict_float, "SFT learning rate (default 3e-3)"),
}
TEXT_SWITCHES = {
    "--chat-template": (
        "chat_template",
        "render plain prompts as a user message through the model's chat template (messages always are)",
    ),
    "--truncate-prompts": (
        "truncate_prompts",
        "cut prompts over the budget from the left (counted) instead of refusing them",
    ),
}
TOY = {
    "--d-model": ("d_model", strict_int, "TinyLM width (default 32)"),
    "--layers": ("n_layers", strict_int, "TinyLM layers (default 2)"),
    "--heads": ("n_heads", strict_int, "TinyLM attention heads (default 2)"),
    "--init": ("init", str, "start a built-in task from a local GPT-2 folder (config.json + model.safetensors)"),
}
BOTH = {
    "--sft-steps": (
        "sft_steps",
        strict_int,
        "supervised steps before PPO (default: the task's preset, 40 for reverse; 100 with --sft-data, else 0)",
    ),
    "--eval-every": ("eval_every", strict_int, "greedy evaluation every N iterations (default 10; 0 = off)"),
}


def _names(s: str) -> tuple:
    """``q_proj,v_proj`` -> ``("q_proj", "v_proj")``; an empty item is refused, not dropped."""
    items = tuple(x.strip() for x in s.split(","))
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names like q_proj,v_proj (no empty items), got {s!r}"
        )
    return items


# tuple fields of names, not of ints
NAME_TUPLES = ("lora_targets",)


def config_flag(name: str) -> str:
    return RENAMES.get(name, "--" + name.replace("_", "-"))


def config_fields():
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig

    hints = typing.get_type_hints(TokenPPOConfig)
    return [(f, hints[f.name]) for f in dataclasses.fields(TokenPPOConfig) if f.name not in NOT_FLAGS]


def add_rlhf(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--task",
        default=None,
        help="built-in task: reverse (exact match) | grammar (default reverse; not with --model)",
    )
    p.add_argument("--seed", type=strict_int, default=0)
    p.add_argument("--seeds", type=strict_int, default=1, help="independent runs trained at once (default 1)")
    p.add_argument("--run-dir", default=None, help="run folder (default runs/rlhf-TASK-<time>)")
    p.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue this run folder (no other flags)")
    p.add_argument(
        "--init-from",
        metavar="RUN_DIR",
        default=None,
        help="start from a policy in another rlhf run folder (its newest checkpoint, LoRA merged) "
        "instead of the model's own weights; the same model flags; no SFT stage unless --sft-steps",
    )
    p.add_argument(
        "--init-from-run",
        type=strict_int,
        default=None,
        metavar="K",
        help="with --init-from a folder of several runs (seeds): start from its run K (needed there)",
    )
    p.add_argument("--devices", default="1", help="split each iteration's prompts over N devices (default 1)")
    p.add_argument(
        "--chunk",
        type=strict_int,
        default=None,
        help=f"iterations per compiled chunk (default {CHUNK_UPDATES}, the run record's; with --resume: "
        "changes it for this session)",
    )
    p.add_argument(
        "--stop-after",
        type=strict_int,
        default=None,
        metavar="ITERATIONS",
        help="stop (with a checkpoint) once this many iterations are done; continue later with --resume",
    )
    p.add_argument(
        "--export",
        dest="export_dir",
        metavar="DIR",
        default=None,
        help="when the run finishes, write run 0's policy (LoRA merged) in the Hugging Face layout of the "
        "model it started from into DIR (new or empty), as `export RUN_DIR DIR` does",
    )
    p.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
    p.add_argument(
        "--task-option",
        dest="task_options",
        action="append",
        metavar="FIELD=VALUE",
        default=None,
        help="a field of the task (e.g. max_len=6, partial_credit=true); repeatable",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_sink_flags(p)
    add_process_flags(p)
    preset = ", ".join(f"{k}={v}" for k, v in TOY_CONFIG.items())
    group = p.add_argument_group(f"token-PPO config (defaults: TokenPPOConfig's; the built-in tasks use {preset})")
    for f, hint in config_fields():
        parse = _names if f.name in NAME_TUPLES else flag_type(hint, f.name)
        group.add_argument(
            config_flag(f.name),
            dest=f"cfg_{f.name}",
            type=parse,
            default=None,
            metavar=f.name.upper(),
            help=f"default: {f.default}",
        )
    text = p.add_argument_group("your own model and data")
    for flag, (dest, typ, helptext) in TEXT.items():
        text.add_argument(flag, dest=dest, type=typ, default=None, help=helptext, metavar=flag[2:].upper())
    for flag, (dest, helptext) in TEXT_SWITCHES.items():
        text.add_argument(flag, dest=dest, action="store_true", help=helptext)
    toy = p.add_argument_group("the built-in tasks' model")
    for flag, (dest, typ, helptext) in {**TOY, **BOTH}.items():
        toy.add_argument(flag, dest=dest, type=typ, default=None, help=helptext, metavar=flag[2:].upper())


def given_flags(args) -> list:
    """The run-defining flags given on the command line (what ``--resume`` refuses)."""
    out = [config_flag(f.name) for f, _ in config_fields() if getattr(args, f"cfg_{f.name}") is not None]
    out += [flag for flag, (dest, *_) in {**TEXT, **TOY, **BOTH}.items() if getattr(args, dest) is not None]
    out += [flag for flag, (dest, _) in TEXT_SWITCHES.items() if getattr(args, dest)]
    out += ["--task"] * (args.task is not None) + ["--task-option"] * bool(args.task_options)
    out += ["--init-from"] * (args.init_from is not None) + ["--init-from-run"] * (args.init_from_run is not None)
    return out


def as_flags(message: str) -> str:
    """A config error in the flags' words: ``num_minibatches=4`` -> ``--minibatches 4``."""
    for f, _ in sorted(config_fields(), key=lambda x: -len(x[0].name)):
        message = re.sub(rf"\b{f.name}=", config_flag(f.name) + " ", message)
    return message


def token_config(args, text: bool):
    """The validated :class:`TokenPPOConfig` of the flags (the task's preset under them)."""
    from purejaxppo.config import ConfigError
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig, validate_token_config

    base = {} if text else TASK_PRESETS.get(args.task or "reverse", {}).get("config", TOY_CONFIG)
    changes = {
        f.name: getattr(args, f"cfg_{f.name}") for f, _ in config_fields() if getattr(args, f"cfg_{f.name}") is not None
    }
    if "kl_target" in changes:
        changes["adaptive_kl"] = True
    try:
        return validate_token_config(TokenPPOConfig(**{**base, **changes}))
    except ConfigError as e:
        raise UserError(as_flags(str(e))) from None


def _at_least(flag: str, value, low: int, why: str = "") -> None:
    if value is not None and value < low:
        raise UserError(f"{flag} {value} must be at least {low}{why}")


def check_plain(args, text: bool) -> None:
    """The flags' own ranges and combinations (no file read yet)."""
    check_seed("--seed", args.seed)
    _at_least("--seeds", args.seeds, 1, " (independent runs trained at once)")
    _at_least("--chunk", args.chunk, 1, " (iterations per compiled chunk)")
    _at_least("--stop-after", args.stop_after, 1, " (iterations before stopping with a checkpoint)")
    _at_least("--init-from-run", args.init_from_run, 0, " (a run of the --init-from folder)")
    if args.init_from_run is not None and args.init_from is None:
        raise UserError("--init-from-run K chooses a run of the --init-from RUN_DIR folder; add --init-from or drop it")
    for flag in ("--sft-steps", "--eval-every", "--max-prompt-tokens"):
        _at_least(flag, getattr(args, {**TEXT, **BOTH}[flag][0]), 0)
    for flag in ("--d-model", "--layers", "--heads", "--max-new-tokens", "--sft-batch"):
        _at_least(flag, getattr(args, {**TEXT, **TOY}[flag][0]), 1)
    if args.sft_lr is not None and not (math.isfinite(args.sft_lr) and args.sft_lr > 0):
        raise UserError(f"--sft-lr {args.sft_lr} must be a finite number > 0")
    if text:
        wrong = [f for f in ("--task", "--task-option", *TOY) if _given(args, f)]
        if wrong:
            raise UserError(
                f"{wrong[0]} belongs to the built-in tasks; with --model the model, prompts and reward "
                "are yours (drop it)"
            )
        if not args.prompts:
            raise UserError("--model needs --prompts FILE (.jsonl or .txt) to train on")
        if bool(args.reward) == bool(args.reward_model):
            raise UserError(
                "--model needs one reward: --reward FILE.py:FUNCTION (a function of the texts) or --reward-model DIR"
            )
        if args.sft_steps and not args.sft_data:
            raise UserError(f"--sft-steps {args.sft_steps} needs --sft-data FILE (prompt/response pairs)")
        return
    wrong = [f for f in (*TEXT, *TEXT_SWITCHES) if _given(args, f)]
    if wrong:
        raise UserError(
            f"{wrong[0]} needs --model DIR (your own model and data); the built-in --task runs use "
            "--task-option instead"
        )
    d, h = args.d_model or 32, args.n_heads or 2
    if d % h:
        raise UserError(f"--d-model {d} must be divisible by --heads {h} (each head takes d_model / heads dims)")


def _given(args, flag: str) -> bool:
    if flag == "--task":
        return args.task is not None
    if flag == "--task-option":
        return bool(args.task_options)
    dest = {**TEXT, **TOY, **BOTH}.get(flag, (TEXT_SWITCHES.get(flag, (None,))[0],))[0]
    v = getattr(args, dest)
    return bool(v) if isinstance(v, bool) else v is not None


def task_options(items) -> tuple:
    """``["max_len=6", "partial_credit=true"]`` -> ``(("max_len", 6), ("partial_credit", True))``."""
    out = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise UserError(f"--task-option {item!r} must be FIELD=VALUE (e.g. max_len=6)")
        low = value.lower()
        try:
            out[field] = (
                True
                if low == "true"
                else False
                if low == "false"
                else (int(value) if value.lstrip("-").isdigit() else float(value))
            )
        except ValueError:
            raise UserError(f"--task-option {item!r}: the value must be a number, true or false") from None
    return tuple(sorted(out.items()))
