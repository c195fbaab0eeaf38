"""Command line: ``python -m purejaxppo train|bench ...``.

User errors (bad flags, invalid config, unknown env) print the problem and the fix
and exit with status 2, without a traceback.
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
        if t is bool:
            conv = _parse_bool
        elif f.name == "hidden_sizes":
            conv = _parse_int_tuple
        elif f.name == "target_kl":
            conv = _parse_optional_float
        elif f.name == "max_episode_steps":
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

    base = base if base is not None else PPOConfig()
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
    t.add_argument("--seeds", type=int, default=1, help="number of seeds trained together (vmapped)")
    t.add_argument("--seed", type=int, default=0, help="base random seed")
    t.add_argument("--run-dir", default=None, help="output folder (default: runs/<env>-<time>)")
    t.add_argument("--chunk", type=int, default=25, help="updates per compiled chunk between progress reports")
    t.add_argument("--devices", default="auto",
                   help="CPU devices to split seeds over: auto (all cores when seeds divide evenly) or a number")
    t.add_argument("--quiet", action="store_true", help="no progress bar; only the summary")
    add_config_flags(t)

    b = sub.add_parser("bench", help="throughput benchmark (see benchmarks/throughput.py)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def cmd_train(args) -> int:
    import time

    seeds = args.seeds
    if seeds < 1:
        raise UserError(f"--seeds={seeds} must be >= 1")
    cores = os.cpu_count() or 1
    if args.devices == "auto":
        devices = max(d for d in range(1, cores + 1) if seeds % d == 0)
    else:
        try:
            devices = int(args.devices)
        except ValueError:
            raise UserError(f"--devices={args.devices!r} must be 'auto' or an integer") from None
        if devices < 1 or seeds % devices:
            raise UserError(f"--devices={devices} must be >= 1 and divide --seeds={seeds}")
    _set_devices(devices)

    import numpy as np

    from .config import validate
    from .driver import train_chunked

    config = validate(config_from_args(args))
    from .train import make_ppo

    ppo = make_ppo(config)  # unknown env names fail here, before any compile
    run_dir = args.run_dir or os.path.join("runs", f"{config.env_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if not args.quiet:
        print(f"purejaxppo: training {config.env_name} | {seeds} seed(s) on {devices} device(s) | "
              f"{config.num_updates} updates x {config.batch_size} steps | compiling...", flush=True)
    bar = None

    def on_chunk(info):
        nonlocal bar
        if args.quiet:
            return
        if bar is None:
            from tqdm import tqdm

            print(f"compiled in {info['compile_s']:.1f}s", flush=True)
            bar = tqdm(total=info["num_updates"], unit="upd", dynamic_ncols=True, file=sys.stdout, mininterval=0.5)
        bar.update(info["updates"] - bar.n)
        ret = np.asarray(info["episode_return"])
        with np.errstate(all="ignore"):
            latest = np.nanmean(ret[:, -1]) if np.isfinite(ret[:, -1]).any() else np.nanmean(ret)
        bar.set_postfix_str(f"steps {info['env_steps']:,} | return {latest:.1f} | {info['steps_per_s']:,.0f} steps/s")

    res = train_chunked(config, seed=args.seed, num_seeds=seeds, run_dir=run_dir, chunk_updates=args.chunk,
                        num_devices=devices, on_chunk=on_chunk, ppo=ppo)
    if bar is not None:
        bar.close()
    fr = res.final_return
    print(f"final return over {seeds} seed(s): mean {np.nanmean(fr):.1f}  min {np.nanmin(fr):.1f}  "
          f"max {np.nanmax(fr):.1f}")
    print(f"compile {res.compile_s:.1f}s | run {res.run_s:.1f}s | {res.steps_per_s:,.0f} env-steps/s "
          f"({res.env_steps:,} steps)")
    print(f"metrics and config written to {run_dir}")
    return 0


class UserError(Exception):
    pass


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .config import ConfigError

    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "bench":
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
            from .bench import main as bench_main

            bench_main(args.rest)
            return 0
    except (ConfigError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
