"""``python -m purejaxppo rlhf``: token-level PPO (SFT, then PPO), or ``--resume``.

Two ways in: a built-in task (``--task reverse|grammar``, a TinyLM or ``--init`` GPT-2), or the
user's own model and data (``--model DIR --prompts FILE --reward FILE.py:FUNC``, or
``--reward-model DIR``; ``--sft-data FILE`` for a supervised stage first). Every input is
checked before any work: each flag's range and choices as it is parsed, then the flags together
into one typed request (:func:`rlhf_request`), then the files and the model folder, once, by the
session (:mod:`purejaxppo.programs.rlhf_session`): a bad one is one ``error:`` line, exit 2,
nothing created (:func:`flag_errors` says each problem by its type, naming the flag as typed).

Every flag is generated (:func:`purejaxppo.cli.flags.add_field_flags`) from the declaration of a
field of one of three records: :class:`RLHFCommand` (how this session runs: seeds, folders,
devices), ``RLHFSettings`` (the setup: task or data, model, SFT, evaluation) and
``TokenPPOConfig`` (PPO). The declaration holds the flag's name, help, choices, range and
default; ranges and choices are checked as argparse parses. A built-in task brings its own
preset (:data:`TASK_PRESETS`), said in ``--help``. The run folder: ``docs/token_ppo.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from typing import Optional

from purejaxppo.cli.devices import count_devices
from purejaxppo.cli.distributed import add_process_flags, join
from purejaxppo.cli.errors import UserError, seed_setting
from purejaxppo.cli import flags
from purejaxppo.cli.flags import add_field_flags, field_flag, given_fields, one_line_errors
from purejaxppo.cli.train_setup import add_sink_flags
from purejaxppo.config.fields import setting
from purejaxppo.run.record import CHUNK_UPDATES

__all__ = ["add_rlhf", "cmd_rlhf"]


def cmd_rlhf(args) -> int:
    from purejaxppo.programs.rlhf_session import SessionHooks, run_session

    request = rlhf_request(args)  # the flags together, before waiting for the other processes
    with flag_errors(args):
        group = join(args)  # several processes: before anything starts JAX
        run_session(request, SessionHooks(group, make_devices=count_devices))
    return 0


# the built-in tasks' presets (flags override them): reversal of up to 6 digits after a short SFT
# leaves the SFT model at about 0.3 greedy exact match, with room for PPO to show (about 0.6 after
# 80 iterations, experiments/lm/RESULTS.md); longer strings learn far slower
TOY_CONFIG = dict(num_iterations=80, actor_lr=1e-3, critic_lr=1e-3, beta=0.02)
TASK_PRESETS = {
    "reverse": dict(task_options={"max_len": 6, "max_new": 8}, sft_steps=40, config=TOY_CONFIG),
    "grammar": dict(task_options={}, sft_steps=300, config=TOY_CONFIG),
}
# RLHFSettings fields that belong to one way in: the user's own model and data, or a built-in task
TEXT_ONLY = (
    *("model_dir", "prompts", "eval_prompts", "sft_data", "columns", "data_options", "held_out", "reward_model"),
    *("reward", "reward_weights", "reward_options", "chat_template", "max_new_tokens", "max_prompt_tokens"),
    "truncate_prompts",
)
TASK_ONLY = ("task", "task_options", "d_model", "n_layers", "n_heads", "init")


@dataclasses.dataclass(frozen=True)
class RLHFCommand:
    """How one ``rlhf`` session runs, besides the run's setup (``RLHFSettings``) and config:
    the fields' declarations are the flags'."""

    seed: int = seed_setting("the SFT stage and of the runs")
    seeds: int = setting(1, "independent runs trained at once, all from the same SFT model", lo=1)
    run_dir: Optional[str] = setting(None, "the run folder (default runs/rlhf-TASK-<time>)", metavar="DIR")
    resume: Optional[str] = setting(
        None, "continue this run folder with its own settings (no run-defining flags)", metavar="RUN_DIR"
    )
    init_from: Optional[str] = setting(
        None,
        "start from a policy in another rlhf run folder (its newest checkpoint, LoRA merged) instead of the "
        "model's own weights; the same model flags; no SFT stage unless --sft-steps",
        metavar="RUN_DIR",
    )
    init_from_run: Optional[int] = setting(
        None,
        "with --init-from a folder of several runs (seeds): start from its run K (needed there)",
        lo=0,
        metavar="K",
    )
    devices: str = setting(
        "1", "split each iteration's prompts over N devices (N must divide --batch); across processes: all", metavar="N"
    )
    chunk: Optional[int] = setting(
        None,
        f"iterations per compiled chunk (default {CHUNK_UPDATES}, the run record's; with --resume: changes it "
        "for this session)",
        lo=1,
    )
    stop_after: Optional[int] = setting(
        None,
        "stop (with a checkpoint) once this many iterations are done; continue later with --resume",
        lo=1,
        metavar="ITERATIONS",
    )
    export_dir: Optional[str] = setting(
        None,
        "when the run finishes, write run 0's policy (LoRA merged) in the Hugging Face layout of the model it "
        "started from into DIR (new or empty), as `export RUN_DIR DIR` does",
        flag="--export",
        metavar="DIR",
    )
    bf16: bool = setting(False, "compute in bfloat16 (parameters stay float32)", switch=True)
    quiet: bool = setting(False, "no progress bar and no report at the end", switch=True)


def _records():
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    return TokenPPOConfig, RLHFSettings


def config_flag(name: str) -> str:
    """The flag of a ``TokenPPOConfig`` field (``num_minibatches`` -> ``--minibatches``)."""
    return field_flag(next(f for f in dataclasses.fields(_records()[0]) if f.name == name))


def settings_flag(name: str) -> str:
    """The flag of an ``RLHFSettings`` field (``model_dir`` -> ``--model``)."""
    return field_flag(next(f for f in dataclasses.fields(_records()[1]) if f.name == name))


def _preset_notes() -> dict:
    """How the built-in tasks' presets change the defaults, for ``--help``."""
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    notes = {name: f"the built-in tasks: {value:g}" for name, value in TOY_CONFIG.items()}
    steps = ", ".join(f"{task} {p['sft_steps']}" for task, p in TASK_PRESETS.items())
    notes["sft_steps"] = (
        f"default: the task's preset ({steps}); with --model {RLHFSettings.sft_steps} given --sft-data, else 0; "
        "with --init-from 0"
    )
    notes["eval_every"] = "across processes: 0, as the evaluation runs on one process only for now"
    return notes


def add_rlhf(p: argparse.ArgumentParser) -> None:
    """The command's flags, each generated from its field's declaration (see the module's doc)."""
    config_cls, settings_cls = _records()
    one_line_errors(p)
    add_field_flags(p, RLHFCommand)
    add_sink_flags(p)
    add_process_flags(p)
    notes = _preset_notes()
    preset = ", ".join(f"{k}={v}" for k, v in TOY_CONFIG.items())
    group = p.add_argument_group(f"token-PPO config (defaults: TokenPPOConfig's; the built-in tasks use {preset})")
    add_field_flags(group, config_cls, dest_prefix="cfg_", notes=notes)
    text = p.add_argument_group("your own model and data (--model DIR)")
    add_field_flags(text, settings_cls, skip=_all_but(settings_cls, TEXT_ONLY), notes=notes)
    toy = p.add_argument_group("a built-in task (--task NAME)")
    add_field_flags(toy, settings_cls, skip=_all_but(settings_cls, TASK_ONLY), notes=notes)
    from purejaxppo.programs.rlhf_env import ENV_FIELDS

    env = p.add_argument_group("a multi-turn JAX environment (--env NAME), docs/jax_episodes.md")
    add_field_flags(env, settings_cls, skip=_all_but(settings_cls, ENV_FIELDS), notes=notes)
    both = p.add_argument_group("either way: the SFT stage and the evaluation")
    add_field_flags(both, settings_cls, skip=TEXT_ONLY + TASK_ONLY + ENV_FIELDS, notes=notes)


def _all_but(cls, names) -> tuple:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in names)


def given_settings(args) -> dict:
    """``{field: value}`` of the ``RLHFSettings`` fields given on the command line."""
    return given_fields(_records()[1], args)


def given_config(args) -> dict:
    """``{field: value}`` of the ``TokenPPOConfig`` fields given on the command line."""
    return given_fields(_records()[0], args, "cfg_")


# RLHFCommand's fields that shape a new run (a resume takes the folder's own)
RUN_DEFINING = ("seed", "seeds", "bf16", "init_from", "init_from_run")


def given_flags(args) -> list:
    """The run-defining flags given on the command line (what ``--resume`` refuses)."""
    out = [config_flag(name) for name in given_config(args)] + [settings_flag(name) for name in given_settings(args)]
    own = {f.name: f for f in dataclasses.fields(RLHFCommand)}
    return out + [field_flag(own[name]) for name in RUN_DEFINING if getattr(args, name) is not None]


def token_config(args, text: bool):
    """The :class:`TokenPPOConfig` of the flags (the task's preset under them), not yet
    validated: the session validates it once, in the flags' words (``flag_of=config_flag``)."""
    from purejaxppo.lm.ppo.token_config import TokenPPOConfig

    base = {} if text else TASK_PRESETS.get(args.task or "reverse", {}).get("config", TOY_CONFIG)
    changes = given_config(args)
    if "kl_target" in changes:
        changes["adaptive_kl"] = True
    return TokenPPOConfig(**{**base, **changes})


def check_plain(args, text: bool) -> None:
    """The combinations of flags (each flag's own range was checked as it was parsed); no file read yet."""
    if args.init_from_run is not None and args.init_from is None:
        raise UserError("--init-from-run K chooses a run of the --init-from RUN_DIR folder; add --init-from or drop it")
    given = given_settings(args)
    if text:
        wrong = [settings_flag(name) for name in TASK_ONLY if name in given]
        if wrong:
            raise UserError(
                f"{wrong[0]} belongs to the built-in tasks; with --model the model, prompts and reward "
                "are yours (drop it)"
            )
        if not args.prompts:
            raise UserError("--model needs --prompts FILE (.jsonl or .txt) to train on")
        if not args.reward and not args.reward_model:
            raise UserError(
                "--model needs a reward: --reward NAME or FILE.py:FUNCTION (a built-in or a function of the texts; "
                "repeat for several), --reward-model DIR, or both (summed with --reward-weights)"
            )
        if args.sft_steps and not args.sft_data:
            raise UserError(f"--sft-steps {args.sft_steps} needs --sft-data FILE (prompt/response pairs)")
        return
    wrong = [settings_flag(name) for name in TEXT_ONLY if name in given]
    if wrong:
        raise UserError(
            f"{wrong[0]} needs --model DIR (your own model and data); the built-in --task runs use "
            "--task-option instead"
        )
    defaults = _records()[1]()
    d, h = given.get("d_model", defaults.d_model), given.get("n_heads", defaults.n_heads)
    if d % h:
        raise UserError(f"--d-model {d} must be divisible by --heads {h} (each head takes d_model / heads dims)")


def rlhf_request(args):
    """The :class:`~purejaxppo.programs.rlhf_session.RLHFRequest` of the parsed flags: a new
    run's config (unvalidated: the session validates it once, in the flags' words) and settings,
    or the folder ``--resume`` continues; a bad combination is a :class:`UserError`."""
    from purejaxppo.programs.rlhf_session import RLHFRequest

    cmd = flags.record_of(RLHFCommand, args)  # this session's own settings, the defaults declared there
    session = dict(
        flag_of=config_flag,
        seed=cmd.seed,
        seeds=cmd.seeds,
        devices=cmd.devices,
        run_dir=cmd.run_dir,
        resume=cmd.resume,
        init_from=cmd.init_from,
        init_from_run=cmd.init_from_run,
        export_dir=cmd.export_dir,
        chunk=cmd.chunk,
        stop_after=cmd.stop_after,
        command=args.command,
        quiet=cmd.quiet,
        tensorboard=bool(args.tensorboard),
        wandb=args.wandb,
    )
    if args.resume:
        given = given_flags(args)
        if given:
            raise UserError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
        return RLHFRequest(None, None, **session)
    if args.env is not None:  # a multi-turn environment: its own flags' rules
        from purejaxppo.cli.rlhf_env_cmd import env_request

        return env_request(args, session, token_config(args, True), given_config(args))
    text = args.model_dir is not None
    check_plain(args, text)
    many = args.distributed or args.coordinator is not None
    given = frozenset(given_config(args)) | ({"adaptive_kl"} if args.cfg_kl_target is not None else set())
    return RLHFRequest(token_config(args, text), _settings(args, text, many), given=given, **session)


def _settings(args, text: bool, many: bool):
    """The :class:`RLHFSettings` of the flags: the fields given, the rest the declared defaults
    but for the rules below (paths made absolute: a resume may start elsewhere)."""
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    st = given_settings(args)
    st.pop("task_options", None)
    if many:  # the evaluation during training runs on one process only (for now)
        st.setdefault("eval_every", 0)
    if args.init_from:  # the source run's policy is the start: no SFT stage unless asked for
        st.setdefault("sft_steps", 0)
    dtype = "bfloat16" if args.bf16 else "float32"
    if text:
        from purejaxppo.lm.data.row_sources import absolute

        for dest in ("model_dir", "prompts", "eval_prompts", "sft_data", "reward_model"):
            if st.get(dest):
                st[dest] = absolute(st[dest])  # a path made absolute; a generator (reasoning-gym:NAME) as given
        specs = []
        for spec in st.get("reward") or ():  # a file's path made absolute; a built-in name or module as given
            path, sep, name = spec.rpartition(":")
            specs.append(f"{os.path.abspath(path)}:{name}" if sep and path.endswith(".py") else spec)
        st["reward"] = tuple(specs)
        for dest, flag, example in (
            ("reward_options", "--reward-option", "length.limit=48"),
            ("data_options", "--data-option", "size=2000"),
        ):
            st[dest] = flags.field_values(st.get(dest) or (), flag, example, text=True)
        if not st.get("sft_data"):  # no demonstrations: no SFT stage
            st.setdefault("sft_steps", 0)
        return RLHFSettings(task="text", dtype=dtype, **st)
    task = args.task or RLHFSettings.task
    preset = TASK_PRESETS.get(task, {"task_options": {}})
    if "sft_steps" in preset:
        st.setdefault("sft_steps", preset["sft_steps"])
    options = {
        **preset["task_options"],
        **dict(flags.field_values(args.task_options or [], "--task-option", "max_len=6")),
    }
    return RLHFSettings(**{**st, "task": task}, task_options=tuple(sorted(options.items())), dtype=dtype)


@contextlib.contextmanager
def flag_errors(args):
    """Each problem a session raises, told by its type, as one :class:`UserError` naming the flag
    as typed: a reward function that cannot be loaded or that failed (``RewardSpecError``,
    ``RewardFunctionError``), a reward-model folder that cannot score the policy
    (``RewardModelError``), a prompt file (``PromptFileError``), a model folder
    (``CheckpointFolderError``), the rest of the setup (``ConfigError``)."""
    from purejaxppo.config import ConfigError
    from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError
    from purejaxppo.lm.data.prompts import PromptFileError
    from purejaxppo.lm.rewards.python_reward import RewardFunctionError, RewardSpecError
    from purejaxppo.lm.tasks.text_task import RewardModelError

    try:
        yield
    except (
        RewardSpecError,
        RewardModelError,
        PromptFileError,
        RewardFunctionError,
        ConfigError,
    ) as e:  # they name the flag
        raise UserError(str(e)) from None
    except CheckpointFolderError as e:  # the policy's folder (a reward model's is a RewardModelError)
        flag, typed = ("--model", args.model_dir) if args.model_dir is not None else ("--init", args.init)
        raise UserError(f"{flag} {typed}: {e}") from None
