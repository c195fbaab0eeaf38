"""``eval RUN_DIR``: evaluate a trained run folder of any kind and print the report.

The folder's kind evaluates it (:meth:`purejaxppo.run.kinds.RunKind.evaluate`): a control
run's policies play episodes (all seeds, or one member), a token-level PPO run's policy answers
its task's evaluation prompts greedily. The flags are checked here first, before any work.
"""

from __future__ import annotations

from purejaxppo.cli.errors import MAX_EPISODES, UserError, check_seed


def cmd_eval(args) -> int:
    import json

    from purejaxppo.programs import kinds
    from purejaxppo.run.kinds import EvalRequest
    from purejaxppo.run.outputs import check_out_file

    episodes, stochastic = _episodes_and_policy(args)
    if args.gif:
        check_out_file(args.gif, "--gif", (".gif",))
    kind, record = kinds.folder(args.run_dir)
    request = EvalRequest(
        episodes=episodes,
        stochastic=stochastic,
        seed=args.seed,
        member=args.member,
        gif=args.gif,
        protocol=args.protocol,
        checkpoint=args.checkpoint,
    )
    summary, lines = kind.evaluate(args.run_dir, record, request)
    print(json.dumps(summary, indent=2) if args.json else "\n".join(lines))
    return 0


def _episodes_and_policy(args) -> tuple:
    """``(episodes or None, stochastic)`` from ``--protocol`` / ``--episodes`` / ``--stochastic``, checked."""
    episodes, stochastic = args.episodes, args.stochastic
    if args.protocol:
        from purejaxppo.config.references import EVAL_PROTOCOLS

        if args.episodes is not None or args.stochastic:
            raise UserError(
                f"--protocol {args.protocol} fixes the episodes and the policy "
                f"({EVAL_PROTOCOLS[args.protocol]}); drop --episodes/--stochastic"
            )
        episodes, stochastic = EVAL_PROTOCOLS[args.protocol]["episodes"], EVAL_PROTOCOLS[args.protocol]["stochastic"]
    check_seed("--seed", args.seed)
    if episodes is not None and not 1 <= episodes <= MAX_EPISODES:
        raise UserError(
            f"--episodes={episodes} must be between 1 and {MAX_EPISODES:,} (all episodes of "
            "all seeds run in parallel, in memory)"
        )
    return episodes, stochastic
