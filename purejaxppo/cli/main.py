"""Command line: ``python -m purejaxppo train|eval|plot|bench ...``: parses, calls, prints.

User errors (bad flags, invalid config, unknown env, missing or mismatched run folder)
print the problem and the fix and exit with status 2, without a traceback. A training
that is interrupted (Ctrl-C, SIGTERM) saves a checkpoint and says how to resume (exit
130); one that produces non-finite numbers stops with the update and metric (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys

from purejaxppo.cli.flags import add_config_flags, config_from_args
from purejaxppo.cli.pbt_cli import add_pbt_flags, check_pbt_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="purejaxppo", description="Functional PPO in JAX on gymnax environments.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train PPO agents (N seeds at once)")
    t.add_argument("--seeds", type=int, default=None, help="number of seeds trained together (vmapped); default 1")
    t.add_argument("--seed", type=int, default=None, help="base random seed; default 0")
    t.add_argument("--run-dir", default=None, help="output folder (default: runs/<env>-<time>)")
    t.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR from its latest checkpoint (its own config and seeds)")
    t.add_argument("--init-from", metavar="RUN_DIR", default=None,
                   help="a new run starting from RUN_DIR's final params, optimizer and normaliser state, with this "
                        "run's own config and schedule (same network and env; see README)")
    t.add_argument("--member", type=int, default=None, metavar="K",
                   help="with --init-from a sweep or PBT RUN_DIR: start from its member K")
    t.add_argument("--chunk", type=int, default=None, help="updates per compiled chunk between progress reports (25)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="K",
                   help="save a checkpoint every K chunks (10); also saved at the end and on interrupt")
    t.add_argument("--stop-after", type=int, default=None, metavar="UPDATES",
                   help="stop (with a checkpoint) once this many updates are done; continue later with --resume")
    t.add_argument("--devices", default="auto",
                   help="devices to use: auto (as many CPU cores as divide the work evenly) or a number")
    t.add_argument("--split", choices=("seeds", "envs"), default=None,
                   help="seeds (default): shard the runs (members x seeds) over the devices; "
                        "envs: split every run's envs over them (data parallel)")
    t.add_argument("--quiet", action="store_true", help="no progress bar; only the summary")
    t.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (default: on, in ~/.cache/purejaxppo/xla)")
    t.add_argument("--preset", action="store_true",
                   help="start from the shipped per-env config (purejaxppo/presets.py); flags still override")
    t.add_argument("--reference", choices=("gymnax-blines",), default=None,
                   help="start from a published baseline's own config for --env (purejaxppo/references.py); "
                        "flags still override; not with --preset")
    t.add_argument("--sweep", action="append", default=None, metavar="NAME=V1,V2,...",
                   help="train a hyperparameter population in one compile (repeatable: grid over all); "
                        "e.g. --sweep lr=1e-4,3e-4,1e-3")
    t.add_argument("--tensorboard", action="store_true", help="also log to RUN_DIR/tb (needs purejaxppo[tensorboard])")
    t.add_argument("--wandb", nargs="?", const="purejaxppo", default=None, metavar="PROJECT",
                   help="also log to Weights & Biases project PROJECT (needs purejaxppo[wandb])")
    t.add_argument("--eval-every", type=int, default=None, metavar="N",
                   help="every N updates, play greedy (mode action) episodes on separate env copies; their mean "
                        "return goes to metrics.csv (eval_return), the progress bar and the plot")
    t.add_argument("--eval-episodes", type=int, default=None, metavar="K",
                   help="episodes per run and evaluation, in parallel (default 10; needs --eval-every)")
    add_pbt_flags(t)
    add_config_flags(t)

    e = sub.add_parser("eval", help="evaluate a trained run's policy (all seeds)")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--episodes", type=int, default=None, help="episodes per seed (run in parallel); default 100")
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    e.add_argument("--protocol", choices=("gymnax-blines",), default=None,
                   help="a published baseline's evaluation: gymnax-blines = 164 episodes per seed with SAMPLED "
                        "actions (their batch_evaluate); not with --episodes/--stochastic")
    e.add_argument("--seed", type=int, default=0, help="evaluation random seed")
    e.add_argument("--checkpoint", default=None, help="a checkpoint folder (default: the latest)")
    e.add_argument("--gif", default=None, metavar="OUT.gif", help="render one episode of seed 0 to a GIF")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")
    e.add_argument("--member", type=int, default=None, metavar="K",
                   help="evaluate only member K of a sweep or PBT run (PBT default: the best member)")

    pl = sub.add_parser("plot", help="learning curves of one or more runs")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("-o", "--out", default="curves.png", help="output image (png/pdf/svg)")
    pl.add_argument("--metric", default="episode_return", help="metric column to plot (default episode_return)")

    ev = sub.add_parser("envs", help="list the environment suites (and which extra installs each)")
    ev.add_argument("--suite", default=None, help="list the env names of one suite (gymnax, brax, playground, ...)")

    b = sub.add_parser("bench", help="throughput benchmark (see benchmarks/throughput.py)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _loggers(args, run_dir, config, num_members):
    from purejaxppo.run.sinks import TensorBoardLogger, WandbLogger

    out = []
    if args.tensorboard:
        out.append(TensorBoardLogger(run_dir, config.batch_size, num_members))
    if args.wandb:
        out.append(WandbLogger(run_dir, config.batch_size, config.to_dict(), args.wandb, num_members))
    return out


def cmd_train(args) -> int:
    import math
    import time

    from purejaxppo.run.run_folder import refuse_existing_run
    from purejaxppo.config import validate
    from purejaxppo.cli.devices import choose_devices, set_devices
    from purejaxppo.run.outputs import check_run_dir
    from purejaxppo.scale.population import parse_sweep
    from purejaxppo.run.progress import progress_bar

    if args.resume:
        return cmd_resume(args)
    check_pbt_flags(args)
    seeds = 1 if args.seeds is None else args.seeds
    _check_counts(args, seeds)
    grid = parse_sweep(_distinct_sweeps(args.sweep)) if args.sweep else None
    n_members = math.prod(len(v) for v in grid.values()) if grid else 1
    config = validate(config_from_args(args))
    init_from = _check_init_from(args, config, seeds)
    evaluation = _eval_flags(args, config)
    check_run_dir(args.run_dir or "runs")  # output paths and optional sinks: checked before any work
    if args.run_dir:
        refuse_existing_run(args.run_dir)
    _check_sinks(args)
    split = args.split or "seeds"
    # count the devices before JAX starts (it reads XLA_FLAGS once)
    if split == "envs":  # a minibatch's units (env sequences for the GRU) are split too
        units = config.num_envs // config.num_minibatches if config.network == "gru" else config.minibatch_size
        devices = choose_devices(args.devices, math.gcd(config.num_envs, units), "", check=False)
    elif args.pbt is not None:
        devices = choose_devices(args.devices, max(args.pbt, 1), f"the PBT population's {args.pbt} members")
    else:
        runs = (f"the sweep's {n_members} members x {seeds} seed(s) = {n_members * seeds} runs" if grid
                else f"--seeds={seeds}")
        devices = choose_devices(args.devices, n_members * seeds, runs)
    set_devices(devices)
    cache = _compile_cache(args)
    if args.pbt is not None:
        from purejaxppo.cli.pbt_cli import cmd_train_pbt

        return cmd_train_pbt(args, config, devices, *progress_bar(args.quiet, config.env_name),
                             loggers=lambda run_dir, n: _loggers(args, run_dir, config, n))
    from purejaxppo.run.loop import train_chunked
    from purejaxppo.scale.population import make_population
    from purejaxppo.programs.program import Program

    members = make_population(config, grid, num_seeds=seeds).members if grid else None
    program = Program(config, num_devices=devices, split=split,  # unknown envs etc. fail here, before any folder
                      executables=cache)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.run_dir or os.path.join("runs", f"{config.env_name.replace(':', '-')}-{'sweep-' if grid else ''}{stamp}")
    if not args.quiet:
        what = f"sweep over {n_members} members x {seeds} seed(s) of" if grid else f"training {seeds} seed(s) of"
        print(f"purejaxppo: {what} {config.env_name} in one compile on {devices} device(s)"
              f"{' (envs split)' if split == 'envs' else ''} | {config.num_updates} updates x {config.batch_size} "
              f"steps | run folder {run_dir} | compiling...", flush=True)
    on_chunk, close = progress_bar(args.quiet, config.env_name)
    os.makedirs(run_dir, exist_ok=True)
    try:
        res = train_chunked(config, seed=args.seed or 0, num_seeds=seeds, members=members, run_dir=run_dir,
                            chunk_updates=args.chunk or 25, program=program, on_chunk=on_chunk,
                            checkpoint_every=args.checkpoint_every or 10, stop_after=args.stop_after,
                            loggers=_loggers(args, run_dir, config, n_members), init_from=init_from,
                            run_info={"reference": args.reference} if args.reference else None, **evaluation)
    finally:
        close()
    return _report(res, run_dir, seeds)


def _check_init_from(args, config, seeds):
    """``--init-from`` (+ ``--member``): its record for config.json, checked before any work; or None."""
    if args.init_from is None:
        if args.member is not None:
            raise UserError("--member K picks the member of an --init-from sweep or PBT run; add --init-from RUN_DIR")
        return None
    from purejaxppo.run.warm_start import describe

    return describe(args.init_from, args.member, config, seeds, "pbt" if args.pbt is not None else "run")


def _check_counts(args, seeds=None) -> None:
    for flag, v in (("--seeds", seeds), ("--chunk", args.chunk), ("--checkpoint-every", args.checkpoint_every),
                    ("--stop-after", args.stop_after)):
        if v is not None and v < 1:
            raise UserError(f"{flag}={v} must be >= 1")


def _eval_flags(args, config) -> dict:
    """``--eval-every``/``--eval-episodes`` checked before any work -> ``train_chunked`` keywords."""
    if args.eval_every is None:
        if args.eval_episodes is not None:
            raise UserError("--eval-episodes needs --eval-every N (how often to evaluate, in updates)")
        return {}
    if args.pbt is not None:
        raise UserError("--eval-every is not available with --pbt yet; evaluate a PBT run afterwards with "
                        "`python -m purejaxppo eval RUN_DIR`")
    from purejaxppo.programs.eval_program import check_eval

    episodes = 10 if args.eval_episodes is None else args.eval_episodes
    if episodes > MAX_EPISODES:
        raise UserError(f"--eval-episodes={episodes} must be between 1 and {MAX_EPISODES:,} (all episodes of all "
                        "runs play in parallel, in memory)")
    check_eval(args.eval_every, episodes, config.num_updates)
    return {"eval_every": args.eval_every, "eval_episodes": episodes}


def _distinct_sweeps(specs: list) -> list:
    """``--sweep lr=1e-3 --sweep lr=1e-4`` would silently keep one: refused, naming the fix."""
    seen = {}
    for spec in specs:
        name = spec.split("=", 1)[0].strip().replace("-", "_")
        if name in seen:
            values = f"{seen[name].split('=', 1)[-1]},{spec.split('=', 1)[-1]}"
            raise UserError(f"--sweep {name} is given twice ({seen[name]!r} and {spec!r}); list all values in one: "
                            f"--sweep {name}={values}")
        seen[name] = spec
    return specs


def _check_sinks(args) -> None:
    from purejaxppo.run.sinks import require_tensorboard, require_wandb

    if args.tensorboard:
        require_tensorboard()
    if args.wandb:
        require_wandb()


def _compile_cache(args):
    """Turn on the compile caches (unless opted out): JAX's persistent cache, and the folder of
    whole executables inside it (:mod:`purejaxppo.run.executable_cache`) that is returned; or None."""
    if getattr(args, "no_compile_cache", False) or os.environ.get("PUREJAXPPO_NO_COMPILE_CACHE"):
        return None
    from purejaxppo.run.compile_cache import announce_once, enable

    path = enable()
    notice = announce_once(path) if path else None
    if notice and not args.quiet:
        print(notice, flush=True)
    if not path or os.environ.get("PUREJAXPPO_NO_EXECUTABLE_CACHE"):  # JAX's cache alone (benchmarks compare)
        return None
    return os.path.join(path, "executables")


def cmd_resume(args) -> int:
    from purejaxppo.cli.devices import choose_devices, set_devices
    from purejaxppo.run.loop import resume_run
    from purejaxppo.run.progress import progress_bar
    from purejaxppo.run.outputs import check_run_dir
    from purejaxppo.run.run_folder import finished_run, load_run_info

    run_dir = args.resume
    given = sorted("--" + k[4:].replace("_", "-") for k, v in vars(args).items() if k.startswith("cfg_") and v is not None)
    given += [f for f, v in (("--seeds", args.seeds), ("--seed", args.seed), ("--run-dir", args.run_dir),
                             ("--sweep", args.sweep), ("--split", args.split), ("--pbt", args.pbt),
                             ("--reference", args.reference),
                             ("--search", args.search), ("--pbt-interval", args.pbt_interval),
                             ("--pbt-quantile", args.pbt_quantile), ("--init-from", args.init_from),
                             ("--member", args.member), ("--eval-every", args.eval_every),
                             ("--eval-episodes", args.eval_episodes)) if v is not None]
    if given:
        raise UserError(f"--resume continues {run_dir!r} with its saved config and seeds, so {', '.join(given)} "
                        "cannot be changed; drop them, or start a new run with another --run-dir")
    _check_counts(args)
    info = load_run_info(run_dir)
    seeds, members, config = info["num_seeds"], info.get("members"), info["config"]
    if finished_run(run_dir):  # nothing to compute, nothing to rewrite
        print(f"{run_dir} already finished all {config.num_updates} updates; nothing to do (its summary.json is "
              f"unchanged). Evaluate it with `python -m purejaxppo eval {run_dir}`")
        return 0
    check_run_dir(run_dir, "--resume")
    _check_sinks(args)
    devices = info.get("num_devices", 1)
    choose_devices(str(devices), devices, "")  # still available?
    set_devices(devices)
    cache = _compile_cache(args)
    if not args.quiet:
        what = f"{len(members)} members x {seeds} seed(s)" if members else f"{seeds} seed(s)"
        print(f"purejaxppo: resuming {run_dir} ({config.env_name}, {what}, {config.num_updates} updates) "
              "| compiling...", flush=True)
    on_chunk, close = progress_bar(args.quiet, config.env_name)
    kw = {"on_chunk": on_chunk, "stop_after": args.stop_after,
          "loggers": _loggers(args, run_dir, config, len(members) if members else 1)}
    if args.chunk is not None:
        kw["chunk_updates"] = args.chunk
    if args.checkpoint_every is not None:
        kw["checkpoint_every"] = args.checkpoint_every
    pbt = info.get("kind") == "pbt"
    if pbt:
        from purejaxppo.cli.pbt_cli import report
        from purejaxppo.programs.pbt_run import resume_pbt
    else:
        from purejaxppo.programs.program import Program

        kw["program"] = Program(config, num_devices=devices, split=info.get("split", "seeds"),
                                executables=cache)
    try:
        res = resume_pbt(run_dir, **kw) if pbt else resume_run(run_dir, **kw)
    finally:
        close()
    return report(res, run_dir) if pbt else _report(res, run_dir, seeds)


def _report(res, run_dir, seeds) -> int:
    import warnings

    import numpy as np

    from purejaxppo.scale.population import results_table

    fr = res.final_return
    if res.members is not None:
        table = results_table(res.members, fr)
        print(table)
        if res.finished:
            with open(os.path.join(run_dir, "results.md"), "w") as f:
                f.write(table + "\n")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            print(f"final return over {seeds} seed(s): mean {np.nanmean(fr):.1f}  min {np.nanmin(fr):.1f}  "
                  f"max {np.nanmax(fr):.1f}")
    print(f"compile {res.compile_s:.1f}s | run {res.run_s:.1f}s | {res.steps_per_s:,.0f} env-steps/s "
          f"({res.env_steps:,} steps this session)")
    if not res.finished:
        print(f"stopped after {res.updates_done} of {res.config.num_updates} updates; continue with "
              f"`python -m purejaxppo train --resume {run_dir}`")
    table = " and the table (results.md)" if res.members is not None and res.finished else ""
    print(f"metrics, config{',' if table else ' and'} checkpoints{table} written to {run_dir}")
    return 0


def cmd_eval(args) -> int:
    import json

    import jax
    import numpy as np

    from purejaxppo.step.evaluate import evaluate_runner, find_obs_stats, gif_renderer, save_gif, summarize
    from purejaxppo.run.outputs import check_out_file

    if args.protocol:
        from purejaxppo.config.references import EVAL_PROTOCOLS

        if args.episodes is not None or args.stochastic:
            raise UserError(f"--protocol {args.protocol} fixes the episodes and the policy "
                            f"({EVAL_PROTOCOLS[args.protocol]}); drop --episodes/--stochastic")
        args.episodes, args.stochastic = EVAL_PROTOCOLS[args.protocol]["episodes"], EVAL_PROTOCOLS[args.protocol]["stochastic"]
    args.episodes = 100 if args.episodes is None else args.episodes
    if not 1 <= args.episodes <= MAX_EPISODES:
        raise UserError(f"--episodes={args.episodes} must be between 1 and {MAX_EPISODES:,} (all episodes of "
                        "all seeds run in parallel, in memory)")
    if args.gif:
        check_out_file(args.gif, "--gif", (".gif",))
    config, info, runner, ppo, picked = _load_for_eval(args)
    if args.gif:
        gif_renderer(config)  # an env we cannot draw fails now, not after the evaluation
    key = jax.random.PRNGKey(args.seed)
    ret, length = evaluate_runner(config, ppo.agent, runner, key, args.episodes, not args.stochastic)
    s = summarize(ret)
    s.update(run_dir=args.run_dir, checkpoint=info["checkpoint"], update=info["update"], **picked,
             policy="stochastic" if args.stochastic else "deterministic (mode)", episodes_per_seed=args.episodes,
             **({"protocol": args.protocol} if args.protocol else {}),
             mean_length=float(np.nanmean(np.where(np.isfinite(ret), length, np.nan))) if s["episodes"] else None)
    if args.gif:
        stats = find_obs_stats(runner.env_state) if config.normalize_obs else None
        params0 = jax.tree.map(lambda x: x[0], runner.train.params)
        stats0 = None if stats is None else jax.tree.map(lambda x: x[0], stats)
        s["gif"], s["gif_frames"] = args.gif, save_gif(args.gif, config, ppo.agent, params0, jax.random.PRNGKey(args.seed),
                                                       stats0, not args.stochastic)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{config.env_name} | {info['checkpoint']} (update {info['update']}/{config.num_updates}) | "
          f"{s['policy']} policy | {args.episodes} episode(s) x {len(s['per_seed_mean'])} seed(s)"
          f"{' of member %d' % s['member'] if 'member' in s else ''}")
    print(f"return: mean {s['mean']:.2f}  std {s['std']:.2f}  min {s['min']:.2f}  max {s['max']:.2f}  "
          f"({s['episodes']} finished episodes)")
    if len(s["per_seed_mean"]) > 1:
        print("per seed mean: " + "  ".join(f"{x:.2f}" for x in s["per_seed_mean"]))
    if args.gif:
        print(f"episode of seed 0 rendered to {args.gif} ({s['gif_frames']} frames)")
    return 0


MAX_EPISODES = 100_000  # per seed, all in parallel: bounded so a typo cannot ask for 100 GB


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


def cmd_plot(args) -> int:
    from purejaxppo.run.outputs import check_out_file
    from purejaxppo.cli.plot import plot_runs

    if os.path.splitext(args.out)[1] == "" and not os.path.isdir(args.out):
        args.out += ".png"  # what matplotlib would write; reported under its real name
    check_out_file(args.out, "-o", (".png", ".pdf", ".svg", ".jpg", ".jpeg"))
    for d in args.run_dirs:
        if not os.path.exists(os.path.join(d, "metrics.csv")):
            raise UserError(f"{d!r} has no metrics.csv; pass run folders written by `purejaxppo train`")
    try:
        out = plot_runs(args.run_dirs, args.out, metric=args.metric)
    except KeyError as e:
        raise UserError(e.args[0]) from None
    print(f"learning curves of {len(args.run_dirs)} run(s) written to {out}")
    for d in args.run_dirs:  # PBT runs: their hyperparameter schedules too
        if os.path.exists(os.path.join(d, "lineage.csv")):
            from purejaxppo.programs.pbt_run import read_summary
            from purejaxppo.cli.plot import plot_schedules

            stem, ext = os.path.splitext(out)
            path = plot_schedules(d, f"{stem}-{os.path.basename(os.path.normpath(d))}-schedules{ext or '.png'}",
                                  read_summary(d).get("best_member"))
            print(f"hyperparameter schedules of {d} written to {path}")
    return 0


def cmd_envs(args) -> int:
    from purejaxppo.envs import SUITES, env_names, installed, pip_command

    if args.suite:
        names = env_names(args.suite)  # unknown suite / missing extra: ConfigError
        prefix = "" if args.suite == "gymnax" else f"{args.suite}:"
        print("\n".join(prefix + n for n in names))
        return 0
    print("gymnax      installed  (no prefix, e.g. CartPole-v1)")
    for name, suite in SUITES.items():
        state = "installed " if installed(name) else "missing   "
        how = f"e.g. {suite.example}" if installed(name) else pip_command(name)
        print(f"{name:<11} {state} {suite.about}; {how}")
    print('all suites: pip install "purejaxppo[suites]"; names of one: python -m purejaxppo envs --suite SUITE')
    return 0


class UserError(Exception):
    pass


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its own flags, passed on as they are (argparse.REMAINDER drops leading options)
        from purejaxppo.cli.bench import main as bench_main

        bench_main(argv[1:])
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    from purejaxppo.run.checkpoint import CheckpointError
    from purejaxppo.config import ConfigError
    from purejaxppo.run.guards import NonFiniteError, RunFolderWriteError, TrainingInterrupted

    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "plot":
            return cmd_plot(args)
        if args.command == "envs":
            return cmd_envs(args)
    except (ConfigError, UserError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (NonFiniteError, RunFolderWriteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. a full disk while writing results.md or a plot
        print(f"error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}; free some space or fix "
              "permissions and run the command again", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        ckpt = e.checkpoint if isinstance(e, TrainingInterrupted) else None
        where = (f"; progress saved in {ckpt} (update {e.updates_done}). Continue with "
                 f"`python -m purejaxppo train --resume {os.path.dirname(os.path.dirname(ckpt))}`") if ckpt else ""
        print(f"\ninterrupted{where}", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
