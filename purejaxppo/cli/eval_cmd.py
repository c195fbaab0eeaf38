"""``eval RUN_DIR``: play a trained run's policy (all seeds, or one member) and print the returns."""

from __future__ import annotations

from purejaxppo.cli.errors import MAX_EPISODES, UserError, check_seed


def cmd_eval(args) -> int:
    import json

    import jax

    from purejaxppo.step.evaluate import evaluate_runner, find_obs_stats, gif_renderer, save_gif
    from purejaxppo.run.outputs import check_out_file

    _episodes_and_policy(args)
    if args.gif:
        check_out_file(args.gif, "--gif", (".gif",))
    config, info, runner, ppo, picked = _load_for_eval(args)
    if args.gif:
        gif_renderer(config)  # an env we cannot draw fails now, not after the evaluation
    key = jax.random.PRNGKey(args.seed)
    ret, length = evaluate_runner(config, ppo.agent, runner, key, args.episodes, not args.stochastic)
    # a sweep's or PBT run's members are different policies: one summary each, never pooled
    members = info.get("members") if not picked else None
    s = {"run_dir": args.run_dir, "checkpoint": info["checkpoint"], "update": info["update"], **picked,
         "policy": "stochastic" if args.stochastic else "deterministic (mode)", "episodes_per_seed": args.episodes,
         **({"protocol": args.protocol} if args.protocol else {})}
    if members:
        seeds = info["num_seeds"]
        s["members"] = [{"member": m, **({"values": v} if info.get("kind") != "pbt" else {}),
                         **_returns(ret[m * seeds:(m + 1) * seeds], length[m * seeds:(m + 1) * seeds])}
                        for m, v in enumerate(members)]
    else:
        s.update(_returns(ret, length))
    if args.gif:
        stats = find_obs_stats(runner.env_state) if config.normalize_obs else None
        params0 = jax.tree.map(lambda x: x[0], runner.train.params)
        stats0 = None if stats is None else jax.tree.map(lambda x: x[0], stats)
        s["gif"], s["gif_frames"] = args.gif, save_gif(args.gif, config, ppo.agent, params0, jax.random.PRNGKey(args.seed),
                                                       stats0, not args.stochastic)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    _print(s, config, info, args)
    return 0


def _episodes_and_policy(args) -> None:
    """``--protocol`` / ``--episodes`` / ``--stochastic`` checked, and the defaults filled in."""
    if args.protocol:
        from purejaxppo.config.references import EVAL_PROTOCOLS

        if args.episodes is not None or args.stochastic:
            raise UserError(f"--protocol {args.protocol} fixes the episodes and the policy "
                            f"({EVAL_PROTOCOLS[args.protocol]}); drop --episodes/--stochastic")
        args.episodes, args.stochastic = EVAL_PROTOCOLS[args.protocol]["episodes"], EVAL_PROTOCOLS[args.protocol]["stochastic"]
    check_seed("--seed", args.seed)
    args.episodes = 100 if args.episodes is None else args.episodes
    if not 1 <= args.episodes <= MAX_EPISODES:
        raise UserError(f"--episodes={args.episodes} must be between 1 and {MAX_EPISODES:,} (all episodes of "
                        "all seeds run in parallel, in memory)")


def _returns(ret, length) -> dict:
    """mean/std/min/max/per-seed means of the returns ``[S, E]`` of one policy's seeds, and the mean length."""
    import numpy as np

    from purejaxppo.step.evaluate import summarize

    s = summarize(ret)
    s["mean_length"] = float(np.nanmean(np.where(np.isfinite(ret), length, np.nan))) if s["episodes"] else None
    return s


def _print(s: dict, config, info: dict, args) -> None:
    """The summary as text: one block per member of a sweep or PBT run."""
    blocks = s.get("members") or [s]
    seeds = len(blocks[0]["per_seed_mean"])
    of = f" of member {s['member']}" if "member" in s else (f" per member, {len(blocks)} members" if "members" in s else "")
    print(f"{config.env_name} | {info['checkpoint']} (update {info['update']}/{config.num_updates}) | "
          f"{s['policy']} policy | {args.episodes} episode(s) x {seeds} seed(s){of}")
    for b in blocks:
        who = ""
        if "members" in s:
            values = ", ".join(f"{k}={v:g}" for k, v in b.get("values", {}).items())
            who = f"member {b['member']}{f' ({values})' if values else ''}: "
        print(f"{who}return: mean {b['mean']:.2f}  std {b['std']:.2f}  min {b['min']:.2f}  max {b['max']:.2f}  "
              f"({b['episodes']} finished episodes)")
        if len(b["per_seed_mean"]) > 1:
            print(f"{'  ' if who else ''}per seed mean: " + "  ".join(f"{x:.2f}" for x in b["per_seed_mean"]))
    if args.gif:
        print(f"episode of seed 0 rendered to {args.gif} ({s['gif_frames']} frames)")


def _load_for_eval(args):
    """``(config, info, runner, ppo, {"member": K} or {})``: the runs of ``args.member`` (a PBT
    run's best member by default) or all of them."""
    import jax

    from purejaxppo.run.run_folder import load_run, load_run_info

    info = load_run_info(args.run_dir)
    member = args.member
    if info.get("kind") == "pbt":
        from purejaxppo.programs.pbt_run import load_pbt_run, read_summary

        config, info, runner, ppo = load_pbt_run(args.run_dir, args.checkpoint)
        if member is None:
            member = read_summary(args.run_dir).get("best_member")
    else:
        config, info, runner, ppo = load_run(args.run_dir, args.checkpoint)
    if member is None:
        return config, info, runner, ppo, {}
    members, seeds = info.get("members"), info["num_seeds"]
    if not members or not 0 <= member < len(members):
        what = f"has {len(members)} members (0..{len(members) - 1})" if members else "is not a sweep or PBT run"
        raise UserError(f"--member {member}: {args.run_dir!r} {what}")
    runner = jax.tree.map(lambda x: x[member * seeds:(member + 1) * seeds], runner)
    return config, info, runner, ppo, {"member": member}
