"""Command line: ``python -m purejaxppo train|eval|plot|bench ...``.

User errors (bad flags, invalid config, unknown env, missing or mismatched run folder)
print the problem and the fix and exit with status 2, without a traceback. A training
that is interrupted (Ctrl-C, SIGTERM) saves a checkpoint and says how to resume (exit
130); one that produces non-finite numbers stops with the update and metric (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def _parse_optional_float(s: str):
    if s.lower() in ("none", "null", "off"):
        return None
    return float(s)


def _parse_optional_int(s: str):
    if s.lower() in ("none", "null", "off"):
        return None
    return int(s)


def _parse_int_tuple(s: str) -> tuple:
    try:
        return tuple(int(x) for x in s.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 64,64, got {s!r}") from None


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per :class:`PPOConfig` field (``num_envs`` -> ``--num-envs``)."""
    from .config import PPOConfig

    hints = typing.get_type_hints(PPOConfig)
    group = parser.add_argument_group("config (defaults: shared/PPO.md §6)")
    for f in dataclasses.fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "env_name":
            flag = "--env"
        t, default = hints[f.name], f.default
        args_t = typing.get_args(t)
        optional = type(None) in args_t
        inner = next((a for a in args_t if a is not type(None)), t) if optional else t
        if t is bool:
            conv = _parse_bool
        elif inner is tuple:
            conv = (lambda s: None if s.lower() in ("none", "null", "off") else _parse_int_tuple(s)) if optional \
                else _parse_int_tuple
        elif optional and inner is float:
            conv = _parse_optional_float
        elif optional and inner is int:
            conv = _parse_optional_int
        elif t is int:
            conv = int
        elif t is float:
            conv = float
        else:
            conv = str
        group.add_argument(flag, dest=f"cfg_{f.name}", type=conv, default=None, metavar=f.name.upper(),
                           help=f"default: {default}")


def config_from_args(args, base=None):
    from .config import PPOConfig
    from .presets import preset_config

    if base is None:
        env = getattr(args, "cfg_env_name", None) or PPOConfig().env_name
        base = preset_config(env) if getattr(args, "preset", False) else PPOConfig()
    changes = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    return base.replace(**changes)


def _set_devices(n: int) -> None:
    # Must happen before JAX creates its CPU client (first use, not import).
    if n > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={n}").strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="purejaxppo", description="Functional PPO in JAX on gymnax environments.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train PPO agents (N seeds at once)")
    t.add_argument("--seeds", type=int, default=None, help="number of seeds trained together (vmapped); default 1")
    t.add_argument("--seed", type=int, default=None, help="base random seed; default 0")
    t.add_argument("--run-dir", default=None, help="output folder (default: runs/<env>-<time>)")
    t.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR from its latest checkpoint (its own config and seeds)")
    t.add_argument("--chunk", type=int, default=None, help="updates per compiled chunk between progress reports (25)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="K",
                   help="save a checkpoint every K chunks (10); also saved at the end and on interrupt")
    t.add_argument("--stop-after", type=int, default=None, metavar="UPDATES",
                   help="stop (with a checkpoint) once this many updates are done; continue later with --resume")
    t.add_argument("--devices", default="auto",
                   help="CPU devices to split seeds over: auto (all cores when seeds divide evenly) or a number")
    t.add_argument("--quiet", action="store_true", help="no progress bar; only the summary")
    t.add_argument("--preset", action="store_true",
                   help="start from the shipped per-env config (purejaxppo/presets.py); flags still override")
    t.add_argument("--sweep", action="append", default=None, metavar="NAME=V1,V2,...",
                   help="train a hyperparameter population in one compile (repeatable: grid over all); "
                        "e.g. --sweep lr=1e-4,3e-4,1e-3")
    t.add_argument("--tensorboard", action="store_true", help="also log to RUN_DIR/tb (needs purejaxppo[tensorboard])")
    t.add_argument("--wandb", nargs="?", const="purejaxppo", default=None, metavar="PROJECT",
                   help="also log to Weights & Biases project PROJECT (needs purejaxppo[wandb])")
    add_config_flags(t)

    e = sub.add_parser("eval", help="evaluate a trained run's policy (all seeds)")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--episodes", type=int, default=100, help="episodes per seed (run in parallel)")
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    e.add_argument("--seed", type=int, default=0, help="evaluation random seed")
    e.add_argument("--checkpoint", default=None, help="a checkpoint folder (default: the latest)")
    e.add_argument("--gif", default=None, metavar="OUT.gif", help="render one episode of seed 0 to a GIF")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")

    pl = sub.add_parser("plot", help="learning curves of one or more runs")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("-o", "--out", default="curves.png", help="output image (png/pdf/svg)")
    pl.add_argument("--metric", default="episode_return", help="metric column to plot (default episode_return)")

    b = sub.add_parser("bench", help="throughput benchmark (see benchmarks/throughput.py)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _jax_started_devices():
    """Number of devices if JAX's backend is already up in this process (main() called
    from Python), else None: XLA_FLAGS can no longer change it then."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            import jax

            return jax.device_count()
    except Exception:
        return None
    return None


def _devices_for(seeds: int, spec: str, runs: str = "") -> int:
    """Devices to split ``seeds`` independent runs over (``runs`` names them in errors;
    default ``--seeds=N``)."""
    import re

    cores = os.cpu_count() or 1
    started = _jax_started_devices()
    # a device count already forced in XLA_FLAGS wins over ours (_set_devices keeps it)
    forced = re.search(r"xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    if spec == "auto":
        limit = min(cores, started or (int(forced.group(1)) if forced else cores))
        return max(d for d in range(1, limit + 1) if seeds % d == 0)
    try:
        devices = int(spec)
    except ValueError:
        raise UserError(f"--devices={spec!r} must be 'auto' or an integer") from None
    if devices < 1 or seeds % devices:
        raise UserError(f"--devices={devices} must be >= 1 and divide {runs or f'--seeds={seeds}'}")
    if started is not None and devices > started:
        raise UserError(f"--devices={devices}: JAX already started with {started} device(s) in this process; "
                        "use --devices 1 or run from the command line")
    if forced and devices > int(forced.group(1)):
        raise UserError(f"--devices={devices}: XLA_FLAGS forces {forced.group(1)} host device(s); use --devices "
                        f"{forced.group(1)} (or fewer), or unset xla_force_host_platform_device_count in XLA_FLAGS")
    return devices


def _progress(quiet: bool, total_label: str):
    """``(on_chunk, close)`` for a tqdm bar: updates done/total, env steps, steps/s, return, ETA."""
    import numpy as np

    state = {"bar": None}

    def on_chunk(info):
        if quiet:
            return
        if state["bar"] is None:
            from tqdm import tqdm

            print(f"compiled in {info['compile_s']:.1f}s", flush=True)
            state["bar"] = tqdm(total=info["num_updates"], initial=info.get("start_update", 0), unit="upd",
                                dynamic_ncols=True, file=sys.stdout, mininterval=0.5, desc=total_label,
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} updates "
                                           "[{elapsed}<{remaining} ETA{postfix}]")
        bar = state["bar"]
        bar.update(info["updates"] - bar.n)
        ret = np.asarray(info["episode_return"], np.float64)
        finite = ret[np.isfinite(ret)]
        last = ret[:, -1][np.isfinite(ret[:, -1])]
        latest = last.mean() if last.size else (finite.mean() if finite.size else float("nan"))
        bar.set_postfix_str(f"steps {info['env_steps']:,} | return {latest:.1f} | {info['steps_per_s']:,.0f} steps/s")

    def close():
        if state["bar"] is not None:
            state["bar"].close()

    return on_chunk, close


def _loggers(args, run_dir, config):
    from .driver import TensorBoardLogger, WandbLogger

    out = []
    if args.tensorboard:
        out.append(TensorBoardLogger(run_dir, config.batch_size))
    if args.wandb:
        out.append(WandbLogger(run_dir, config.batch_size, config.to_dict(), project=args.wandb))
    return out


def cmd_train(args) -> int:
    import time

    from .checkpoint import list_checkpoints

    if args.resume:
        return cmd_resume(args)
    seeds = 1 if args.seeds is None else args.seeds
    if seeds < 1:
        raise UserError(f"--seeds={seeds} must be >= 1")
    if args.chunk is not None and args.chunk < 1:
        raise UserError(f"--chunk={args.chunk} must be >= 1")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UserError(f"--checkpoint-every={args.checkpoint_every} must be >= 1")
    if args.sweep:
        # a sweep splits its members x seeds runs over the devices; count them before JAX starts
        import math

        from .population import parse_sweep

        members = math.prod(len(v) for v in parse_sweep(args.sweep).values())
        devices = _devices_for(members * seeds, args.devices,
                               f"the sweep's {members} members x {seeds} seed(s) = {members * seeds} runs")
    else:
        devices = _devices_for(seeds, args.devices)
    _set_devices(devices)

    import numpy as np

    from .config import validate
    from .driver import train_chunked

    config = validate(config_from_args(args))
    if args.sweep:
        return cmd_sweep(args, config, seeds, devices)
    from .train import make_ppo

    make_ppo(config)  # unknown env names fail here, before any compile (the driver builds its own,
    # so that its compiled-chunk cache is shared by later runs of the same config in this process)
    run_dir = args.run_dir or os.path.join("runs", f"{config.env_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if list_checkpoints(os.path.join(run_dir, "checkpoints")) or os.path.exists(os.path.join(run_dir, "metrics.csv")):
        raise UserError(f"run folder {run_dir!r} already holds a run; continue it with "
                        f"`python -m purejaxppo train --resume {run_dir}` or choose another --run-dir")
    if not args.quiet:
        print(f"purejaxppo: training {config.env_name} | {seeds} seed(s) on {devices} device(s) | "
              f"{config.num_updates} updates x {config.batch_size} steps | run folder {run_dir} | compiling...",
              flush=True)
    on_chunk, close = _progress(args.quiet, config.env_name)
    os.makedirs(run_dir, exist_ok=True)
    loggers = _loggers(args, run_dir, config)
    try:
        res = train_chunked(config, seed=0 if args.seed is None else args.seed, num_seeds=seeds, run_dir=run_dir,
                            chunk_updates=args.chunk or 25, num_devices=devices, on_chunk=on_chunk,
                            checkpoint_every=args.checkpoint_every or 10, stop_after=args.stop_after,
                            loggers=loggers)
    finally:
        close()
    _report(res, run_dir, seeds)
    return 0


def cmd_sweep(args, base, seeds: int, devices: int = 1) -> int:
    """Population training: all members x seeds in ONE compile, split over ``devices``
    (same numbers as one device); table best first."""
    import json
    import time

    import jax
    import numpy as np

    from .driver import final_returns, versions
    from .population import make_population, parse_sweep, population_keys, results_table, vmap_population
    from .train import make_ppo

    if args.resume or args.stop_after:
        raise UserError("--sweep runs in one call; --resume/--stop-after are for single-config runs")
    pop = make_population(base, parse_sweep(args.sweep), num_seeds=seeds)
    run_dir = args.run_dir or os.path.join("runs", f"{base.env_name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"config": base.to_dict(), "members": pop.members, "num_seeds": seeds,
                   "seed": args.seed or 0, "versions": versions()}, f, indent=2)
    n = len(pop.members)
    if not args.quiet:
        print(f"purejaxppo: sweep over {n} members x {seeds} seed(s) of {base.env_name} "
              f"({base.num_updates} updates each) in one compile on {devices} device(s)...", flush=True)
    ppo = make_ppo(base)
    if devices == 1:
        keys = population_keys(jax.random.PRNGKey(args.seed or 0), pop)
        fn, inputs = jax.jit(vmap_population(ppo.train)), (keys, pop.configs)
    else:
        # the n*seeds runs flattened to one axis (the same seed keys per member) and split
        # over the devices: independent runs, the same numbers as one device; reshaped below
        from .parallel import population_keys_configs, population_parallel_train

        fn = population_parallel_train(ppo.train, devices)
        runs = population_keys_configs([base.replace(**m) for m in pop.members], seeds, args.seed or 0)
        inputs = fn.place(*runs)
    t0 = time.perf_counter()
    compiled = fn.lower(*inputs).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, metrics = compiled(*inputs)
    metrics = jax.device_get(metrics)
    run_s = time.perf_counter() - t0
    if devices > 1:
        metrics = {k: v.reshape((n, seeds) + v.shape[1:]) for k, v in metrics.items()}
    names = sorted(metrics)
    with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
        f.write(",".join(["member", "seed", "update"] + names) + "\n")
        for m in range(n):
            for s in range(seeds):
                for u in range(base.num_updates):
                    f.write(",".join([str(m), str(s), str(u)] + [f"{float(metrics[k][m, s, u]):.9g}" for k in names]) + "\n")
    finals = np.stack([final_returns(metrics["episode_return"][m]) for m in range(n)])
    table = results_table(pop, finals)
    with open(os.path.join(run_dir, "results.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    steps = n * seeds * base.num_updates * base.batch_size
    print(f"compile {compile_s:.1f}s | run {run_s:.1f}s | {steps / run_s:,.0f} env-steps/s ({steps:,} steps)")
    print(f"metrics, table and config written to {run_dir}")
    return 0


def cmd_resume(args) -> int:
    run_dir = args.resume
    given = sorted("--" + k[4:].replace("_", "-") for k, v in vars(args).items() if k.startswith("cfg_") and v is not None)
    given += [f for f, v in (("--seeds", args.seeds), ("--seed", args.seed), ("--run-dir", args.run_dir)) if v is not None]
    if given:
        raise UserError(f"--resume continues {run_dir!r} with its saved config and seeds, so {', '.join(given)} "
                        "cannot be changed; drop them, or start a new run with another --run-dir")
    from .driver import load_run_info, resume_run

    info = load_run_info(run_dir)
    seeds = info["num_seeds"]
    devices = info.get("num_devices", 1)
    _set_devices(devices)
    config = info["config"]
    if not args.quiet:
        print(f"purejaxppo: resuming {run_dir} ({config.env_name}, {seeds} seed(s), {config.num_updates} updates) "
              "| compiling...", flush=True)
    on_chunk, close = _progress(args.quiet, config.env_name)
    kw = {"on_chunk": on_chunk, "stop_after": args.stop_after, "loggers": _loggers(args, run_dir, config)}
    if args.chunk is not None:
        kw["chunk_updates"] = args.chunk
    if args.checkpoint_every is not None:
        kw["checkpoint_every"] = args.checkpoint_every
    try:
        res = resume_run(run_dir, **kw)
    finally:
        close()
    _report(res, run_dir, seeds)
    return 0


def _report(res, run_dir, seeds):
    import warnings

    import numpy as np

    fr = res.final_return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        print(f"final return over {seeds} seed(s): mean {np.nanmean(fr):.1f}  min {np.nanmin(fr):.1f}  "
              f"max {np.nanmax(fr):.1f}")
    print(f"compile {res.compile_s:.1f}s | run {res.run_s:.1f}s | {res.steps_per_s:,.0f} env-steps/s "
          f"({res.env_steps:,} steps this session)")
    if not res.finished:
        print(f"stopped after {res.updates_done} of {res.config.num_updates} updates; continue with "
              f"`python -m purejaxppo train --resume {run_dir}`")
    print(f"metrics, config and checkpoints written to {run_dir}")


def cmd_eval(args) -> int:
    import json

    import jax
    import numpy as np

    from .driver import load_run
    from .evaluate import evaluate_runner, find_obs_stats, gif_renderer, save_gif, summarize

    if args.episodes < 1:
        raise UserError(f"--episodes={args.episodes} must be >= 1")
    config, info, runner, ppo = load_run(args.run_dir, args.checkpoint)
    if args.gif:
        gif_renderer(config)  # an env we cannot draw fails now, not after the evaluation
    key = jax.random.PRNGKey(args.seed)
    ret, length = evaluate_runner(config, ppo.network, runner, key, args.episodes, not args.stochastic)
    s = summarize(ret)
    s.update(run_dir=args.run_dir, checkpoint=info["checkpoint"], update=info["update"],
             policy="stochastic" if args.stochastic else "deterministic (mode)", episodes_per_seed=args.episodes,
             mean_length=float(np.nanmean(np.where(np.isfinite(ret), length, np.nan))) if s["episodes"] else None)
    if args.gif:
        stats = find_obs_stats(runner.env_state) if config.normalize_obs else None
        params0 = jax.tree.map(lambda x: x[0], runner.train.params)
        stats0 = None if stats is None else jax.tree.map(lambda x: x[0], stats)
        s["gif"], s["gif_frames"] = args.gif, save_gif(args.gif, config, ppo.network, params0, jax.random.PRNGKey(args.seed),
                                                       stats0, not args.stochastic)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{config.env_name} | {info['checkpoint']} (update {info['update']}/{config.num_updates}) | "
          f"{s['policy']} policy | {args.episodes} episode(s) x {len(s['per_seed_mean'])} seed(s)")
    print(f"return: mean {s['mean']:.2f}  std {s['std']:.2f}  min {s['min']:.2f}  max {s['max']:.2f}  "
          f"({s['episodes']} finished episodes)")
    if len(s["per_seed_mean"]) > 1:
        print("per seed mean: " + "  ".join(f"{x:.2f}" for x in s["per_seed_mean"]))
    if args.gif:
        print(f"episode of seed 0 rendered to {args.gif} ({s['gif_frames']} frames)")
    return 0


def cmd_plot(args) -> int:
    from .plot import plot_runs

    for d in args.run_dirs:
        if not os.path.exists(os.path.join(d, "metrics.csv")):
            raise UserError(f"{d!r} has no metrics.csv; pass run folders written by `purejaxppo train`")
    try:
        out = plot_runs(args.run_dirs, args.out, metric=args.metric)
    except KeyError as e:
        raise UserError(e.args[0]) from None
    print(f"learning curves of {len(args.run_dirs)} run(s) written to {out}")
    return 0


class UserError(Exception):
    pass


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .driver import NonFiniteError

    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "plot":
            return cmd_plot(args)
        if args.command == "bench":
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
            from .bench import main as bench_main

            bench_main(args.rest)
            return 0
    except (ConfigError, UserError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NonFiniteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        ckpt = getattr(e, "checkpoint", None)
        where = (f"; progress saved in {ckpt} (update {getattr(e, 'updates_done', '?')}). Continue with "
                 f"`python -m purejaxppo train --resume {os.path.dirname(os.path.dirname(ckpt))}`") if ckpt else ""
        print(f"\ninterrupted{where}", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
