"""``rlhf --env NAME|FILE.py:FACTORY``: the flags of a run on a multi-turn JAX environment
(:mod:`purejaxppo.programs.rlhf_env`) into one typed request, each flag that makes no sense
there refused with one ``error:`` line naming it.

Taken with ``--env``: ``--env-option``, ``--max-turns``, ``--turn-tokens``, the model
(``--model DIR``, or the built-in TinyLM's ``--d-model``/``--layers``/``--heads``),
``--max-new-tokens`` (the episode's budget; default: the reset observation and every turn with
its observation), ``--recipe`` and the token-PPO config, and the session's flags (seeds, run
folder, ``--chunk``, ``--stop-after``, ``--export`` of a ``--model`` run, ``--resume``).
"""

from __future__ import annotations

import dataclasses
import os

from purejaxppo.cli import flags
from purejaxppo.cli.errors import UserError

# RLHFSettings fields a run on an environment reads (beside the environment's own)
ENV_READS = ("model_dir", "max_new_tokens", "d_model", "n_layers", "n_heads", "recipe")
# TokenPPOConfig fields whose samples an episode does not have
NOT_ON_EPISODES = {"dynamic_sampling": "dynamic sampling (episodes are sampled once per iteration)"}


def env_request(args, session: dict, config, given_config: dict):
    """The :class:`~purejaxppo.programs.rlhf_session.RLHFRequest` of a new run on ``--env``.

    Args:
      args: the parsed flags; session: the request's session fields (seeds, folders, ...).
      config: the flags' ``TokenPPOConfig`` (no preset); given_config: its fields the flags set.
    Returns:
      The request (its config validated later by the session, in the flags' words).
    Raises:
      UserError: a flag that makes no sense with ``--env`` (one line naming it), or a malformed
        ``--env-option``.
    """
    from purejaxppo.programs.rlhf_env import ENV_FIELDS
    from purejaxppo.programs.rlhf_session import RLHFRequest
    from purejaxppo.programs.rlhf_settings import RLHFSettings

    fields = {f.name: f for f in dataclasses.fields(RLHFSettings)}
    given = flags.given_fields(RLHFSettings, args)
    for name in given:
        if name not in ENV_FIELDS + ENV_READS:
            raise UserError(
                f"{flags.field_flag(fields[name])} does not apply with --env (the environment gives the prompts and "
                "the rewards; no SFT stage or evaluation): drop it"
            )
    for name, what in NOT_ON_EPISODES.items():
        if name in given_config and getattr(config, name):
            raise UserError(f"--{name.replace('_', '-')}: {what} is not supported with --env; drop it")
    if str(session["devices"]) != "1" or args.distributed or args.coordinator is not None:
        raise UserError("--env runs on one device of one process for now; drop --devices and the process flags")
    if args.init_from is not None:
        raise UserError("--init-from does not apply with --env yet; start from --model DIR or the built-in TinyLM")
    d, h = given.get("d_model", RLHFSettings.d_model), given.get("n_heads", RLHFSettings.n_heads)
    if not given.get("model_dir") and d % h:
        raise UserError(f"--d-model {d} must be divisible by --heads {h} (each head takes d_model / heads dims)")
    spec = given["env"]
    path, sep, name = spec.rpartition(":")
    if sep and path.endswith(".py"):  # a file's path made absolute: a resume may start elsewhere
        spec = f"{os.path.abspath(path)}:{name}"
    options = flags.field_values(given.get("env_options") or (), "--env-option", "hi=20", text=True)
    st = {k: v for k, v in given.items() if k in ENV_READS}
    if st.get("model_dir"):
        from purejaxppo.lm.data.row_sources import absolute

        st["model_dir"] = absolute(st["model_dir"])
    settings = RLHFSettings(
        task="env",
        env=spec,
        env_options=options,
        max_turns=given.get("max_turns", RLHFSettings.max_turns),
        turn_tokens=given.get("turn_tokens", RLHFSettings.turn_tokens),
        max_new_tokens=st.pop("max_new_tokens", 0),  # 0: the whole game's budget
        sft_steps=0,
        eval_every=0,
        dtype="bfloat16" if args.bf16 else "float32",
        **st,
    )
    return RLHFRequest(config, settings, given=frozenset(given_config), **session)
