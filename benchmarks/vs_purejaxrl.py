"""purejaxppo next to PureJaxRL, same config, same process, interleaved rounds.

PureJaxRL is imported from a checkout YOU supply (nothing of it is in this repo):

    git clone https://github.com/luchris429/purejaxrl /tmp/purejaxrl
    python benchmarks/vs_purejaxrl.py --purejaxrl-dir /tmp/purejaxrl [--rows cartpole_1seed,gru_cartpole]
        [--rounds 3] [--total-timesteps-scale 1.0] [--json OUT.json]

For each row, both sides are compiled (``jax.jit(f).lower(args).compile()``, ``--compile-rounds``
times, median; in-memory caches cleared before each, persistent compilation cache off, after one
small untimed warm-up compile per process) and then run ``--rounds`` times,
interleaved (ours, PureJaxRL, ours on 2 devices, ours, PureJaxRL, ...); run time is the median
over rounds of the compiled call with ``block_until_ready``. Env-steps/s = updates x envs x steps x
seeds / run time. Final return: per seed, the mean over the last 5% of updates of the update's
mean return of the episodes that ended in it (ours: ``metrics["episode_return"]``; PureJaxRL:
``info["returned_episode_returns"]`` where ``info["returned_episode"]``), then the mean (and min)
over seeds (the table also shows the first 5%, to see that both learn). Ratios: ``speed x`` = ours / PureJaxRL env-steps/s; ``compile x`` = PureJaxRL / ours
compile seconds (both > 1 mean ours is better).

Rows (PureJaxRL's settings come from the ``config`` dict in the ``__main__`` block of its script):
  cartpole_1seed        ppo.py defaults (CartPole-v1, 4 envs x 128 steps, 5e5 steps) vs ``PPOConfig()``
  cartpole_16seeds      the same, vmapped over 16 seeds (ours also sharded over 2 host devices)
  cartpole_64seeds      the same, 64 seeds
  gru_cartpole          ppo_rnn.py defaults vs ``PPOConfig(network="gru", gru_size=128, hidden_sizes=(128,),
                        activation="relu")`` with the same hyperparameters
  pendulum              ppo_continuous_action.py (its 256x256 tanh network, NormalizeVecObservation/Reward)
                        vs our Pendulum-v1 preset with hidden_sizes=(256, 256); both use the preset's
                        hyperparameters
  breakout_minatar_mlp  ppo.py on Breakout-MinAtar vs our Breakout-MinAtar preset (64x64 ReLU MLP), 1e6 steps

Seed keys: ``jax.random.split(jax.random.PRNGKey(0), seeds)`` for both (one seed: the first key).
With more than one seed, ours is also timed with ``purejaxppo.parallel.sharding.shard_runs(ppo.train, 2)``:
this script sets ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` before JAX starts when no
count is forced (single-device programs, PureJaxRL's included, run on device 0 as before).
Ours is then also timed on ONE device with one device's share of the seeds (``ours_8seeds`` for 16
seeds on 2 devices): when the sharded run takes as long as its share alone, the devices share the
CPU perfectly and the 2-device ratio is 2 x ours' 1-device ratio. ``cores`` is the process's CPU
seconds over the run's wall seconds (XLA:CPU runs independent ops of one program concurrently, so
one device already uses more than one core).
Config differences that remain between the two sides are printed per row and saved in the JSON.
PureJaxRL needs runtime shims on current gymnax/flax; see ``benchmarks/_purejaxrl_shims.py``.
"""

from __future__ import annotations

import os
import sys

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import ast  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import fmt_k  # noqa: E402  (this folder, on the path above)

ROWS = ("cartpole_1seed", "cartpole_16seeds", "cartpole_64seeds", "gru_cartpole", "pendulum", "breakout_minatar_mlp")

# PureJaxRL config key -> PPOConfig field
KEY_TO_FIELD = {
    "ENV_NAME": "env_name",
    "NUM_ENVS": "num_envs",
    "NUM_STEPS": "num_steps",
    "TOTAL_TIMESTEPS": "total_timesteps",
    "UPDATE_EPOCHS": "update_epochs",
    "NUM_MINIBATCHES": "num_minibatches",
    "LR": "lr",
    "ANNEAL_LR": "anneal_lr",
    "GAMMA": "gamma",
    "GAE_LAMBDA": "gae_lambda",
    "CLIP_EPS": "clip_eps",
    "ENT_COEF": "ent_coef",
    "VF_COEF": "vf_coef",
    "MAX_GRAD_NORM": "max_grad_norm",
    "ACTIVATION": "activation",
}

# what each PureJaxRL script fixes in code, as PPOConfig fields
SCRIPT_FIXED = {
    "ppo": dict(network="mlp", hidden_sizes=(64, 64), normalize_obs=False, normalize_reward=False),
    "ppo_rnn": dict(
        network="gru", gru_size=128, hidden_sizes=(128,), activation="relu", normalize_obs=False, normalize_reward=False
    ),
    "ppo_continuous_action": dict(network="mlp", hidden_sizes=(256, 256)),
}
COMMON_FIXED = dict(
    clip_value=True,
    adam_eps=1e-5,
    adv_norm="minibatch",
    shared_torso=False,
    critic_lr=None,
    target_kl=None,
    max_episode_steps=None,
    obs_keep=None,
    freeze_obs_norm=False,
    rollout_rng="threefry",
    rollout_unroll=1,
)

NOTES_ALL = [
    "time limits: ours bootstraps V(final observation) at truncation; PureJaxRL treats done = terminated | "
    "truncated as terminal",
    "PureJaxRL's train returns every step's info as metrics ([updates, steps, envs] arrays); ours per-update scalars",
]
NOTES = {
    "gru_cartpole": [
        "PureJaxRL's actor/critic hidden layers use orthogonal(2) init (ours sqrt(2)); its GRU uses "
        "flax's default kernel inits (ours: our own orthogonal recurrent init)"
    ],
    "pendulum": [
        "observation normalisation: ours clips to +-10, PureJaxRL does not; reward scaling by the running "
        "std of the discounted return in both (PureJaxRL inside the env step, ours after the rollout)",
        "PureJaxRL's ClipAction clips to [-1, 1]; shimmed to the env's bounds [-2, 2] like ours",
    ],
    "breakout_minatar_mlp": [
        "PureJaxRL's ActorCritic is a fixed 64x64 MLP with separate actor/critic; our preset "
        "is matched to it (any difference is listed above)"
    ],
}


def script_defaults(path: str) -> dict:
    """The ``config = {...}`` literal in the ``if __name__ == "__main__":`` block of ``path``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            for stmt in ast.walk(node):
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Dict)
                    and any(isinstance(t, ast.Name) and t.id == "config" for t in stmt.targets)
                ):
                    return ast.literal_eval(stmt.value)
    raise ValueError(f"no `config = {{...}}` in the __main__ block of {path}")


def theirs_as_fields(script: str, theirs: dict) -> dict:
    """PureJaxRL's settings as PPOConfig fields."""
    out = dict(COMMON_FIXED)
    out.update({KEY_TO_FIELD[k]: v for k, v in theirs.items() if k in KEY_TO_FIELD})
    out["vf_clip_eps"] = theirs["CLIP_EPS"]  # its value clipping uses CLIP_EPS
    out.update(SCRIPT_FIXED[script])
    if script == "ppo_continuous_action":
        out["normalize_obs"] = out["normalize_reward"] = bool(theirs.get("NORMALIZE_ENV", False))
    return out


def fields_as_theirs(cfg) -> dict:
    return {k: getattr(cfg, f) for k, f in KEY_TO_FIELD.items()}


def config_differences(cfg, script: str, theirs: dict) -> list[str]:
    diffs = []
    for field, v in theirs_as_fields(script, theirs).items():
        ours = getattr(cfg, field)
        same = ours == v
        if not same and isinstance(ours, (int, float)) and isinstance(v, (int, float)):
            same = abs(float(ours) - float(v)) <= 1e-9 * max(1.0, abs(float(v)))
        if not same:
            diffs.append(f"{field}: ours={ours!r} purejaxrl={v!r}")
    return diffs


def build_row(name: str, pjr, scale: float, seeds_override=None, num_envs=None):
    """``(ours PPOConfig, script, theirs config dict, seeds)`` for a row; ``seeds_override`` and
    ``num_envs`` change the row's seeds / envs on both sides (e.g. 1024 seeds on a GPU)."""
    from purejaxppo import PPOConfig
    from purejaxppo.config.presets import preset_config

    seeds = {"cartpole_16seeds": 16, "cartpole_64seeds": 64}.get(name, 1)
    path = lambda s: os.path.join(pjr.path, f"{s}.py")
    if name.startswith("cartpole_"):
        script, cfg = "ppo", PPOConfig()
        theirs = script_defaults(path(script))
    elif name == "gru_cartpole":
        script = "ppo_rnn"
        theirs = script_defaults(path(script))
        kw = {f: theirs[k] for k, f in KEY_TO_FIELD.items() if k in theirs}
        kw.update(SCRIPT_FIXED[script], vf_clip_eps=theirs["CLIP_EPS"], total_timesteps=int(theirs["TOTAL_TIMESTEPS"]))
        cfg = PPOConfig(**kw)
    elif name == "pendulum":
        script = "ppo_continuous_action"
        cfg = preset_config("Pendulum-v1", hidden_sizes=(256, 256), activation="tanh")
        theirs = {
            **script_defaults(path(script)),
            **fields_as_theirs(cfg),
            "NORMALIZE_ENV": bool(cfg.normalize_obs and cfg.normalize_reward),
        }
    elif name == "breakout_minatar_mlp":
        script = "ppo"
        cfg = preset_config("Breakout-MinAtar", total_timesteps=1_000_000)
        theirs = {**script_defaults(path(script)), **fields_as_theirs(cfg)}
    else:
        raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
    theirs = {**theirs, "DEBUG": False, "TOTAL_TIMESTEPS": int(theirs["TOTAL_TIMESTEPS"])}
    if seeds_override:
        seeds = seeds_override
    if num_envs:
        cfg = cfg.replace(num_envs=num_envs, total_timesteps=max(cfg.total_timesteps, num_envs * cfg.num_steps))
        theirs["NUM_ENVS"] = num_envs
        theirs["TOTAL_TIMESTEPS"] = cfg.total_timesteps
    if scale != 1.0:
        total = max(cfg.batch_size, int(cfg.total_timesteps * scale))
        cfg = cfg.replace(total_timesteps=total)
        theirs["TOTAL_TIMESTEPS"] = max(
            theirs["NUM_ENVS"] * theirs["NUM_STEPS"], int(theirs["TOTAL_TIMESTEPS"] * scale)
        )
    return cfg, script, theirs, seeds


def window_returns(per_update, frac: float = 0.05):
    """``per_update [S, U]`` mean episode return per update (NaN: none ended) -> per-seed means over
    the first and the last ``frac`` of the updates."""
    import numpy as np

    per_update = np.asarray(per_update, np.float64).reshape(-1, np.shape(per_update)[-1])
    k = max(1, int(round(frac * per_update.shape[1])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(per_update[:, :k], axis=1), np.nanmean(per_update[:, -k:], axis=1)


def warm_up():
    """One small compile first, so that the first timed compile does not also pay XLA's start-up."""
    import jax
    import jax.numpy as jnp

    def f(key, w):
        def body(c, k):
            x = jax.random.normal(k, (4, 8))
            g = jax.grad(lambda w: jnp.tanh(x @ w).sum())(c)
            return c - 1e-3 * g, jax.random.categorical(k, x)

        return jax.lax.scan(body, w, jax.random.split(key, 4))

    jax.jit(f).lower(jax.random.PRNGKey(0), jnp.ones((8, 8))).compile()


@contextlib.contextmanager
def hang_warning(what: str, after_s: float):
    """Warn on stderr if the block has not finished after ``after_s`` seconds (it is not stopped).

    XLA:CPU (jax 0.10.2) has been seen to hang PureJaxRL's vmapped 16-seed program at a tiny budget
    (``--total-timesteps-scale 0.02``: in 3 of 6 runs ``block_until_ready`` never returned, at 0% CPU,
    with 1 or 2 host devices; ours ran 40 of 40 at that config), never at the table's budgets."""
    timer = threading.Timer(
        after_s,
        lambda: print(
            f"  WARNING: {what} has not returned after {after_s:.0f} s and uses no CPU if it hangs; XLA:CPU has "
            "hung PureJaxRL's vmapped program at tiny budgets: interrupt it and use a larger "
            "--total-timesteps-scale",
            file=sys.stderr,
            flush=True,
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def ours_per_update(out):
    return out[1]["episode_return"]


def theirs_per_update(out):
    import numpy as np

    info = out["metrics"] if "metrics" in out else out["metric"]
    r = np.asarray(info["returned_episode_returns"], np.float64)
    m = np.asarray(info["returned_episode"]).astype(bool)
    n = m.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (r * m).sum(axis=(-2, -1)) / np.maximum(n, 1), np.nan)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--purejaxrl-dir", required=True, help="a checkout of luchris429/purejaxrl (repo root)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of: {', '.join(ROWS)}")
    p.add_argument("--rounds", type=int, default=3, help="timed runs per side (median reported)")
    p.add_argument(
        "--total-timesteps-scale",
        type=float,
        default=1.0,
        help="multiply every row's budget (both sides), e.g. 0.05 for a quick check",
    )
    p.add_argument(
        "--compile-rounds",
        type=int,
        default=1,
        help="fresh compiles per side (median reported; in-memory caches cleared before each)",
    )
    p.add_argument("--devices", type=int, default=2, help="host devices for ours' sharded seed variant")
    p.add_argument("--seeds", type=int, default=None, help="override every row's number of vmapped seeds")
    p.add_argument(
        "--num-envs",
        type=int,
        default=None,
        help="override every row's envs per seed, both sides (the budget is raised to >= 1 update)",
    )
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument(
        "--hang-warning-s",
        type=float,
        default=600.0,
        help="warn on stderr when one timed run has not returned after this many seconds",
    )
    args = p.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        p.error(f"unknown row(s) {bad}; rows: {', '.join(ROWS)}")

    import jax
    import numpy as np

    try:
        jax.config.update("jax_enable_compilation_cache", False)  # compile times must be real compiles
    except Exception:  # noqa: BLE001
        pass

    import _purejaxrl_shims
    from _common import compile_timed, hardware, interleaved_rounds
    from purejaxppo import make_ppo
    from purejaxppo.parallel.sharding import shard_runs

    pjr = _purejaxrl_shims.load(args.purejaxrl_dir)
    try:
        commit = subprocess.run(
            ["git", "-C", pjr.path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = None
    hw = hardware()
    print(
        f"PureJaxRL {pjr.path} @ {commit or '?'}; jax {jax.__version__} on {hw['device_kind']} "
        f"({hw['jax_devices']} device(s)), {hw['cpu_count']} CPUs"
    )
    for s in pjr.shims:
        print(f"  shim: {s}")
    for k, e in pjr.errors.items():
        print(f"  cannot import PureJaxRL {k}.py: {e}")

    warm_up()
    results = []
    for name in rows:
        cfg, script, theirs, seeds = build_row(name, pjr, args.total_timesteps_scale, args.seeds, args.num_envs)
        mod = getattr(pjr, script)
        if mod is None:
            print(f"\n[{name}] skipped: PureJaxRL {script}.py did not import ({pjr.errors.get(script)})")
            continue
        diffs = config_differences(cfg, script, theirs)
        notes = NOTES_ALL + NOTES.get(name, [])
        print(
            f"\n[{name}] {cfg.env_name}: {seeds} seed(s), {cfg.num_envs} envs x {cfg.num_steps} steps, "
            f"{cfg.total_timesteps} steps/seed; PureJaxRL {script}.py"
        )
        print("  config differences (ours vs PureJaxRL): " + ("none" if not diffs else ""))
        for d in diffs:
            print(f"    {d}")
        for nte in notes:
            print(f"  note: {nte}")

        keys = jax.random.split(jax.random.PRNGKey(0), seeds)
        ppo = make_ppo(cfg)
        theirs_train = mod.make_train(dict(theirs))
        variants = []  # (label, jitted/lowerable, args, steps, per-update extractor)
        ours_steps = cfg.num_updates * cfg.batch_size * seeds
        t_updates = theirs["TOTAL_TIMESTEPS"] // theirs["NUM_STEPS"] // theirs["NUM_ENVS"]
        theirs_steps = t_updates * theirs["NUM_STEPS"] * theirs["NUM_ENVS"] * seeds
        if seeds == 1:
            variants.append(("ours", jax.jit(ppo.train), (keys[0],), ours_steps, ours_per_update))
            variants.append(("purejaxrl", jax.jit(theirs_train), (keys[0],), theirs_steps, theirs_per_update))
        else:
            variants.append(("ours", jax.jit(jax.vmap(ppo.train)), (keys,), ours_steps, ours_per_update))
            variants.append(("purejaxrl", jax.jit(jax.vmap(theirs_train)), (keys,), theirs_steps, theirs_per_update))
            if len(jax.devices()) >= args.devices > 1 and seeds % args.devices == 0:
                runs = shard_runs(ppo.train, args.devices)
                variants.append((f"ours_{args.devices}dev", runs, runs.place(keys), ours_steps, ours_per_update))
                # one device's share of that run, alone: t(share, 1 device) / t(all, D devices) is how
                # well D devices share the CPU (1.0 = perfectly), apart from how fast ours is per seed
                share = seeds // args.devices
                variants.append(
                    (
                        f"ours_{share}seeds",
                        jax.jit(jax.vmap(ppo.train)),
                        (keys[:share],),
                        ours_steps // args.devices,
                        ours_per_update,
                    )
                )

        rec = {label: {"compiles": [], "times": [], "cores": [], "steps": steps} for label, _, _, steps, _ in variants}
        for _ in range(max(1, args.compile_rounds)):
            for label, fn, a, _, _ in variants:
                rec[label]["compiled"], seconds = compile_timed(fn, *a, clear=True)
                rec[label]["compiles"].append(seconds)
                print(f"  compiled {label:<12} {rec[label]['compiles'][-1]:.2f} s", flush=True)
        for v in rec.values():
            v["compile_s"] = statistics.median(v["compiles"])
        per_update = {label: extract for label, _, _, _, extract in variants}

        def each(r, label, t):
            if r == 0:
                rec[label]["first"], rec[label]["final"] = window_returns(per_update[label](t.out))
            print(
                f"  round {r + 1} {label:<12} {t.wall_s:.2f} s  {fmt_k(rec[label]['steps'] / t.wall_s)} steps/s  "
                f"{t.cores:.2f} cores",
                flush=True,
            )

        calls = {label: functools.partial(rec[label]["compiled"], *a) for label, _, a, _, _ in variants}
        timings = interleaved_rounds(
            calls, args.rounds, each, lambda r, label: hang_warning(f"round {r + 1} of {label}", args.hang_warning_s)
        )
        for label, t in timings.items():
            rec[label]["times"], rec[label]["cores"] = t.times, t.cores

        row = {
            "row": name,
            "env": cfg.env_name,
            "seeds": seeds,
            "script": script,
            "ours_config": cfg.to_dict(),
            "purejaxrl_config": theirs,
            "config_differences": diffs,
            "notes": notes,
            "results": {},
        }
        base = rec["purejaxrl"]
        base_sps = base["steps"] / statistics.median(base["times"])
        for label, _, _, steps, _ in variants:
            v = rec[label]
            med = statistics.median(v["times"])
            sps = steps / med
            fin = v["final"]
            res = {
                "compile_s": round(v["compile_s"], 3),
                "compile_s_all": [round(t, 3) for t in v["compiles"]],
                "run_s": [round(t, 3) for t in v["times"]],
                "run_s_median": round(med, 3),
                "env_steps": steps,
                "steps_per_s": round(sps, 1),
                "cores_used": round(statistics.median(v["cores"]), 2),
                "final_return_mean": float(np.nanmean(fin)),
                "final_return_min": float(np.nanmin(fin)),
                "final_return_per_seed": [round(float(x), 2) for x in fin],
                "first_return_mean": float(np.nanmean(v["first"])),
            }
            if label != "purejaxrl":
                res["speed_ratio"] = round(sps / base_sps, 3)
                res["compile_ratio"] = round(base["compile_s"] / v["compile_s"], 3)
            row["results"][label] = res
        results.append(row)

    # --- table -------------------------------------------------------------------------------------
    head = (
        f"{'row':<22}{'impl':<14}{'compile s':>10}{'run s':>9}{'steps/s':>10}{'cores':>7}{'first ret':>10}"
        f"{'final ret':>10}{'(min)':>9}{'speed x':>9}{'compile x':>11}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for row in results:
        first = True
        order = ["purejaxrl"] + [k for k in row["results"] if k != "purejaxrl"]
        for label in order:
            v = row["results"][label]
            ratio = f"{v['speed_ratio']:.2f}x" if "speed_ratio" in v else ""
            cratio = f"{v['compile_ratio']:.2f}x" if "compile_ratio" in v else ""
            print(
                f"{row['row'] if first else '':<22}{label:<14}{v['compile_s']:>10.2f}{v['run_s_median']:>9.2f}"
                f"{fmt_k(v['steps_per_s']):>10}{v['cores_used']:>7.2f}{v['first_return_mean']:>10.1f}{v['final_return_mean']:>10.1f}{v['final_return_min']:>9.1f}"
                f"{ratio:>9}{cratio:>11}"
            )
            first = False
    print(
        "first/final ret: mean over seeds of the first/last 5% of updates' mean episode return; (min): worst "
        "seed's final\nspeed x = ours / PureJaxRL env-steps/s; compile x = PureJaxRL / ours compile seconds; "
        "cores: process CPU seconds / wall seconds of the run\nours_Nseeds: one device's share of the "
        "sharded run, alone on one device (its run s next to ours_Ddev's is how well the devices share the CPU)"
    )

    if args.json:
        out = {
            "rows": results,
            "device_kind": hw["device_kind"],
            "jax": jax.__version__,
            "cpu_count": os.cpu_count(),
            "jax_devices": len(jax.devices()),
            "hardware": hw,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "purejaxrl": {"dir": pjr.path, "commit": commit, "shims": pjr.shims},
            "args": vars(args),
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
        print(f"wrote {args.json}")
    return results


if __name__ == "__main__":
    main()
