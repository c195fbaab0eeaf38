"""purejaxppo next to rejax's PPO (``rejax.PPO``), same env, same hyperparameters, same process,
interleaved rounds, compile apart; including rejax's headline feature, a vmap over
hyperparameters, next to ours (``--sweep`` / ``stack_configs``).

One-time install (rejax is NOT a dependency of purejaxppo; its own requirements, jax, flax,
gymnax, optax, distrax, are all in ``[dev]``, so nothing else is pulled in):

    pip install --no-deps rejax==0.1.3
    python benchmarks/vs_rejax.py [--rows cartpole,breakout_minatar,cartpole_lr_sweep]
        [--rounds 3] [--json OUT.json]

rejax 0.1.3 (the newest) does not run on gymnax 1.x as installed (its rollout and its
``evaluate`` unpack a five-value step); ``benchmarks/_rejax_shims.py`` hands rejax the env
behind a five-value wrapper (nothing installed is edited) and takes rejax's periodic evaluation
out of the timed program (see there).

Rows:
  cartpole            CartPole-v1 with rejax's published PPO config (``configs/gymnax/cartpole.yaml``:
                      5 envs x 100 steps, 5 epochs x 5 minibatches, lr 7.5e-4 constant, grad clip 0.5,
                      tanh 64x64, 1e5 steps), 1 seed
  breakout_minatar    Breakout-MinAtar: rejax publishes no MinAtar config, so both sides use our
                      Breakout-MinAtar preset (64 envs x 128 steps, 4 epochs x 8 minibatches, ReLU 64x64,
                      lr 3.5e-3), constant lr on both (rejax has no annealing), 5e5 steps, 1 seed
  cartpole_lr_sweep   the cartpole row's config with 8 learning rates (1e-4 .. 3e-3) in ONE compiled
                      program: rejax ``jax.vmap(PPO.train, in_axes=(0, None))`` over stacked algorithms:
                      ONE unbatched key, so every member draws the same random numbers (rollout, env,
                      shuffles) and each is computed once for all; ours like with like,
                      ``jax.vmap(ppo.train, in_axes=(None, 0))`` over the configs of
                      ``purejaxppo.parallel.runs_axis.runs``. Two more rows of ours: ``ours_runkeys``, the
                      same key given once per run (``[8]`` keys, as ``train --sweep`` lays its runs out:
                      the same numbers, but every random draw is batched 8 ways), and with
                      ``--host-devices N`` (N > 1) ``ours_cli``: those runs sharded over N forced host
                      devices by ``parallel.shard_runs``, what ``train --sweep lr=...`` runs with its
                      default ``--devices auto`` on an N-core CPU (rejax's vmap has no device sharding;
                      N devices in the process may slow the 1-device programs: compare within a run)

Timing: ``jax.jit(f).lower(args).compile()`` timed after ``jax.clear_caches()`` (persistent cache
off), then ``--rounds`` runs per side interleaved (ours, rejax, ours, ...), median, each to
``block_until_ready``. Env-steps/s = env steps / run seconds (all members together on the sweep
row). Final return: rejax's protocol for both (``rejax.evaluate.evaluate``: 128 episodes, the
policy's sampled actions, until the episode ends or the env's ``max_steps_in_episode``), on each
side's final policy; on the sweep row the best and the median member.

Truncation: ours bootstraps V(final observation) at time limits (CartPole's 500 steps); rejax
treats ``done = terminated | truncated`` as terminal (no bootstrap). Every row also runs
``ours_noboot``: ours with ``bootstrap_truncated=False``, rejax's semantics, where no final
state's value is read and our step skips that critic pass (``H*E + E`` observations, not
``2*H*E``): the like-with-like row.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import fmt_k, loadavg_now  # noqa: E402  (this folder, on the path above)

REJAX_CARTPOLE = dict(
    env="CartPole-v1",
    agent_kwargs=dict(activation="tanh"),
    num_envs=5,
    num_steps=100,
    num_epochs=5,
    num_minibatches=5,
    learning_rate=0.00075,
    max_grad_norm=0.5,
    total_timesteps=100_000,
    eval_freq=1000,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
)
SWEEP_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 7.5e-4, 1e-3, 2e-3, 3e-3)
ROWS = ("cartpole", "breakout_minatar", "cartpole_lr_sweep")

NOTES_ALL = [
    "truncation: ours bootstraps V(final observation); rejax treats done = terminated | truncated as terminal",
    "grad clipping: rejax optax.clip (each gradient ELEMENT to +-max_grad_norm), ours clip_by_global_norm",
    "optimisers: rejax one Adam for the actor and one for the critic (separate losses); ours one Adam over both "
    "(separate networks, summed loss): per-parameter Adam makes these the same but for the clipping",
    "initialisation: rejax flax's default (lecun_normal kernels, heads too); ours orthogonal (sqrt(2) torso, 0.01 "
    "policy head, 1 value head)",
]


def rejax_settings(name: str, scale: float = 1.0) -> dict:
    if name in ("cartpole", "cartpole_lr_sweep"):
        s = dict(REJAX_CARTPOLE)
    elif name == "breakout_minatar":
        from purejaxppo.config.presets import preset_config

        c = preset_config("Breakout-MinAtar")
        s = dict(
            env="Breakout-MinAtar",
            agent_kwargs=dict(activation=c.activation, hidden_layer_sizes=tuple(c.hidden_sizes)),
            num_envs=c.num_envs,
            num_steps=c.num_steps,
            num_epochs=c.update_epochs,
            num_minibatches=c.num_minibatches,
            learning_rate=c.lr,
            max_grad_norm=c.max_grad_norm,
            total_timesteps=500_000,
            eval_freq=c.num_envs * c.num_steps * 8,
            gamma=c.gamma,
            gae_lambda=c.gae_lambda,
            clip_eps=c.clip_eps,
            ent_coef=c.ent_coef,
            vf_coef=c.vf_coef,
        )
    else:
        raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
    if scale != 1.0:
        s["total_timesteps"] = max(s["eval_freq"], int(s["total_timesteps"] * scale))
    return s


def rejax_env_steps(s: dict) -> int:
    """Env steps rejax's train runs: ceil(T / eval_freq) chunks of ceil(eval_freq / (E*H)) iterations."""
    it = s["num_envs"] * s["num_steps"]
    per_chunk = -(-s["eval_freq"] // it)
    chunks = -(-s["total_timesteps"] // s["eval_freq"])
    return chunks * per_chunk * it


def ours_config(s: dict):
    from purejaxppo import PPOConfig

    kw = s.get("agent_kwargs", {})
    return PPOConfig(
        env_name=s["env"],
        num_envs=s["num_envs"],
        num_steps=s["num_steps"],
        total_timesteps=rejax_env_steps(s),
        update_epochs=s["num_epochs"],
        num_minibatches=s["num_minibatches"],
        hidden_sizes=tuple(kw.get("hidden_layer_sizes", (64, 64))),
        activation=kw.get("activation", "swish"),
        anneal_lr=False,
        clip_value=True,
        vf_clip_eps=s["clip_eps"],
        adv_norm="minibatch",
        lr=s["learning_rate"],
        clip_eps=s["clip_eps"],
        vf_coef=s["vf_coef"],
        ent_coef=s["ent_coef"],
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        max_grad_norm=s["max_grad_norm"],
        adam_eps=1e-8,
    )


def make_rejax(s: dict):
    import rejax
    import _rejax_shims

    env, params = _rejax_shims.make_env(s["env"])
    kw = {k: v for k, v in s.items() if k != "env"}
    kw["agent_kwargs"] = dict(kw.get("agent_kwargs", {}))
    return _rejax_shims.without_eval(rejax.PPO.create(env=env, env_params=params, **kw))


def ours_act(ppo, runner):
    """rejax-style ``act(obs, rng) -> action`` (one unbatched observation) for our final runner."""
    import jax.numpy as jnp
    from purejaxppo.stages.normalize import apply_obs_stats
    from purejaxppo.step.evaluate import find_obs_stats

    agent, params = ppo.agent, runner.train.params
    stats = find_obs_stats(runner.env_state)

    def act(obs, rng):
        x = jnp.asarray(obs, jnp.float32)[None]
        if stats is not None:
            x = apply_obs_stats(stats, x)
        _, dist_params, _ = agent.act(params, agent.initial_carry(1), x, None)
        return jnp.squeeze(agent.dist.sample(rng, dist_params), 0)

    return act


def rollout_only(ppo, algo, n_iters: int):
    """Where the time goes: each side's rollout + values + GAE alone, ``n_iters`` times in one
    compiled scan, params fixed at init (the update left out). Ours: the step's own rollout and
    targets phases (``_common.rollouts_alone``, as ``profile_step.py``'s rollout part); rejax its
    own ``collect_trajectories`` + critic on the last observation + ``calculate_gae``. The rest of
    each side's run is the update (and init)."""
    import jax
    from _common import rollouts_alone

    def ours(key):
        return rollouts_alone(ppo, ppo.init(key), n_iters)[1].sum()

    def theirs(key):
        ts = algo.init_state(key)

        def body(ts, _):
            ts, traj = algo.collect_trajectories(ts)
            last_val = algo.critic.apply(ts.critic_ts.params, ts.last_obs)
            adv, tgt = algo.calculate_gae(traj, last_val)
            return ts, adv.sum() + tgt.sum()

        return jax.lax.scan(body, ts, None, length=n_iters)[1].sum()

    out, key = {}, jax.random.PRNGKey(0)
    for label, fn in (("ours", ours), ("rejax", theirs)):
        jax.clear_caches()
        c = jax.jit(fn).lower(key).compile()
        t0 = time.perf_counter()
        jax.block_until_ready(c(key))
        out[label] = round(time.perf_counter() - t0, 3)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of: {', '.join(ROWS)}")
    p.add_argument("--rounds", type=int, default=3, help="timed runs per side (median reported)")
    p.add_argument("--total-timesteps-scale", type=float, default=1.0, help="multiply every row's budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--profile",
        action="store_true",
        help="also time each side's rollout (+ values, GAE) alone: the rest of its run is the update",
    )
    p.add_argument(
        "--host-devices",
        type=int,
        default=1,
        help="force this many host CPU devices (before JAX starts); > 1 adds the sweep row's ours_cli",
    )
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.host_devices > 1:
        from purejaxppo.cli.devices import set_devices

        set_devices(args.host_devices)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        p.error(f"unknown row(s) {bad}; rows: {', '.join(ROWS)}")

    import jax
    import jax.numpy as jnp
    import numpy as np

    try:
        jax.config.update("jax_enable_compilation_cache", False)
    except Exception:  # noqa: BLE001
        pass
    try:
        import rejax
    except ImportError:
        raise SystemExit(
            "rejax is not installed: pip install --no-deps rejax==0.1.3 (see this script's docstring)"
        ) from None
    import _rejax_shims
    from _common import compile_timed, hardware, interleaved_rounds
    from purejaxppo import make_ppo
    from purejaxppo.parallel.sharding import shard_runs
    from purejaxppo.parallel.runs_axis import runs
    from vs_purejaxrl import warm_up

    ver = getattr(rejax, "__version__", None)
    if ver is None:
        from importlib.metadata import version

        ver = version("rejax")
    hw = hardware()
    print(
        f"rejax {ver} PPO; jax {jax.__version__} on {hw['device_kind']} ({hw['jax_devices']} device(s)), "
        f"{hw['cpu_count']} CPUs, load {hw.get('loadavg_at_start')}"
    )
    for sh in _rejax_shims.APPLIED:
        print(f"  shim: {sh}")
    warm_up()

    results = []
    for name in rows:
        s = rejax_settings(name, args.total_timesteps_scale)
        cfg = ours_config(s)
        steps = rejax_env_steps(s)
        algo = make_rejax(s)
        ppo = make_ppo(cfg)
        key = jax.random.PRNGKey(args.seed)
        sweep = name.endswith("_sweep")
        notes = list(NOTES_ALL)
        if name == "breakout_minatar":
            notes.append(
                "rejax publishes no MinAtar config: both use purejaxppo's Breakout-MinAtar preset with a "
                "constant lr (rejax has no lr annealing)"
            )
        if sweep:
            algos = [algo.replace(learning_rate=lr) for lr in SWEEP_LRS]
            stacked = jax.tree.map(lambda *x: jnp.stack(x), *algos)
            r_fn, r_args = jax.jit(jax.vmap(type(algo).train, in_axes=(0, None))), (stacked, key)
            keys, configs = runs(cfg, [{"lr": lr} for lr in SWEEP_LRS], 1, args.seed)
            keys = jnp.broadcast_to(key, keys.shape)  # the one seed key of rejax's side, once per run
            o_fn, o_args = jax.jit(jax.vmap(ppo.train, in_axes=(None, 0))), (key, configs)
            extra = [("ours_runkeys", jax.jit(jax.vmap(ppo.train)), (keys, configs))]
            if args.host_devices > 1:
                cli = shard_runs(ppo.train, num_devices=args.host_devices)
                extra.append(("ours_cli", cli.jitted, cli.place(keys, configs)))
            n = len(SWEEP_LRS)
        else:
            r_fn, r_args = jax.jit(algo.train), (key,)
            o_fn, o_args = jax.jit(ppo.train), (key,)
            extra, n = [], 1
        # like with like on truncation: ours with rejax's semantics (every end terminal)
        ppo_nb = make_ppo(cfg.replace(bootstrap_truncated=False))
        if sweep:
            nb_configs = runs(cfg.replace(bootstrap_truncated=False), [{"lr": lr} for lr in SWEEP_LRS], 1, args.seed)[1]
            extra.insert(0, ("ours_noboot", jax.jit(jax.vmap(ppo_nb.train, in_axes=(None, 0))), (key, nb_configs)))
        else:
            extra.insert(0, ("ours_noboot", jax.jit(ppo_nb.train), (key,)))
        sides = [("ours", o_fn, o_args), ("rejax", r_fn, r_args)] + extra
        labels = [lab for lab, _, _ in sides]
        total = steps * n
        print(
            f"\n[{name}] {s['env']}: {n} run(s) x {s['num_envs']} envs x {s['num_steps']} steps, {steps} steps each"
            + (f", lr in {SWEEP_LRS}" if sweep else "")
        )
        for nte in notes:
            print(f"  note: {nte}")

        rec = {}
        for label, fn, a in sides:
            compiled, seconds = compile_timed(fn, *a, clear=True)
            rec[label] = {"compiled": compiled, "args": a, "compile_s": seconds}
            print(f"  compiled {label:<12} {rec[label]['compile_s']:.2f} s", flush=True)

        def each(r, label, t):
            if r == 0:
                rec[label]["out"] = t.out
            print(
                f"  round {r + 1} {label:<12} {t.wall_s:.2f} s  {fmt_k(total / t.wall_s)} steps/s  {t.cores:.2f} cores",
                flush=True,
            )

        calls = {label: functools.partial(rec[label]["compiled"], *rec[label]["args"]) for label in labels}
        for label, t in interleaved_rounds(calls, args.rounds, each).items():
            rec[label]["times"], rec[label]["cores"] = t.times, t.cores
        outs = {label: rec[label].pop("out") for label in labels}

        # final evaluation: rejax's protocol on both sides
        ekey = jax.random.PRNGKey(args.seed + 1)

        def ours_returns(p, final):  # rejax's evaluation of each of our runs' final policy
            finals = [jax.tree.map(lambda x: x[i], final) for i in range(n)] if sweep else [final]
            return np.asarray(
                [float(_rejax_shims.final_eval(algo, None, ekey, act=ours_act(p, f))[1].mean()) for f in finals]
            )

        if sweep:
            r_ret = np.asarray(
                jax.vmap(lambda al, ts: _rejax_shims.final_eval(al, ts, ekey)[1].mean())(stacked, outs["rejax"][0])
            )
        else:
            r_ret = np.asarray([float(_rejax_shims.final_eval(algo, outs["rejax"][0], ekey)[1].mean())])
        o_rets = {
            "ours": ours_returns(ppo, outs["ours"][0]),
            "ours_noboot": ours_returns(ppo_nb, outs["ours_noboot"][0]),
        }
        print(
            f"  eval (rejax.evaluate, 128 episodes): rejax {np.round(r_ret, 1).tolist()}  "
            + "  ".join(f"{k} {np.round(v, 1).tolist()}" for k, v in o_rets.items()),
            flush=True,
        )

        prof = None
        if args.profile and not sweep:
            iters = steps // (s["num_envs"] * s["num_steps"])
            prof = {"rollout_alone_s": rollout_only(ppo, algo, iters)}
            for label in ("ours", "rejax"):
                run_s = statistics.median(rec[label]["times"])
                roll = prof["rollout_alone_s"][label]
                prof[label] = {"run_s": round(run_s, 3), "rollout_s": roll, "update_and_rest_s": round(run_s - roll, 3)}
                print(
                    f"  {label}: rollout + values + GAE alone {roll:.2f} s of its {run_s:.2f} s run; update and the "
                    f"rest {run_s - roll:.2f} s",
                    flush=True,
                )
        row = {
            "row": name,
            "env": s["env"],
            "runs": n,
            "rejax_settings": s,
            "ours_config": cfg.to_dict(),
            "profile": prof,
            "sweep_lrs": list(SWEEP_LRS) if sweep else None,
            "notes": notes,
            "bootstraps_truncation": {"ours": True, "rejax": False},
            "results": {},
            "loadavg_after": loadavg_now(),
        }
        base_sps = total / statistics.median(rec["rejax"]["times"])
        for label in ["rejax"] + [lab for lab in labels if lab != "rejax"]:
            ret = r_ret if label == "rejax" else o_rets.get(label, o_rets["ours"])  # layouts of ours: not evaluated
            v = rec[label]
            med = statistics.median(v["times"])
            res = {
                "compile_s": round(v["compile_s"], 3),
                "run_s": [round(t, 3) for t in v["times"]],
                "run_s_median": round(med, 3),
                "env_steps": total,
                "steps_per_s": round(total / med, 1),
                "cores_used": round(statistics.median(v["cores"]), 2),
                "eval_return_per_run": [round(float(x), 2) for x in ret],
                "eval_return": float(np.max(ret) if sweep else ret[0]),
                "eval_return_median": float(np.median(ret)),
            }
            if label not in ("rejax", *o_rets):
                res["eval_return_per_run"] = res["eval_return"] = res["eval_return_median"] = None
            if label != "rejax":
                res["speed_ratio"] = round(res["steps_per_s"] / base_sps, 3)
                res["compile_ratio"] = round(rec["rejax"]["compile_s"] / v["compile_s"], 3)
            row["results"][label] = res
        results.append(row)
        del outs

    head = (
        f"{'row':<19}{'impl':<13}{'compile s':>10}{'run s':>9}{'steps/s':>10}{'cores':>7}{'eval ret':>10}"
        f"{'(median)':>10}{'speed x':>9}{'compile x':>11}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for row in results:
        for label, v in row["results"].items():
            ratio = f"{v['speed_ratio']:.2f}x" if "speed_ratio" in v else ""
            cratio = f"{v['compile_ratio']:.2f}x" if "compile_ratio" in v else ""
            ev = (
                f"{v['eval_return']:>10.1f}{v['eval_return_median']:>10.1f}"
                if v["eval_return"] is not None
                else f"{'-':>10}{'-':>10}"
            )
            print(
                f"{row['row'] if label == 'rejax' else '':<19}{label:<13}{v['compile_s']:>10.2f}{v['run_s_median']:>9.2f}"
                f"{fmt_k(v['steps_per_s']):>10}{v['cores_used']:>7.2f}{ev}{ratio:>9}{cratio:>11}"
            )
    print(
        "eval ret: rejax.evaluate (128 episodes, sampled actions) of the final policy; on the sweep row the best "
        "member, (median) the median member\nspeed x = ours / rejax env-steps/s; compile x = rejax / ours compile "
        "seconds; truncations: ours bootstraps, rejax does not; ours_noboot: ours with bootstrap_truncated=False, "
        "rejax's semantics (every end terminal), which skips the critic's pass over the final states"
    )
    if args.json:
        out = {
            "rows": results,
            "hardware": hw,
            "jax": jax.__version__,
            "rejax": ver,
            "shims": _rejax_shims.APPLIED,
            "args": vars(args),
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
        print(f"wrote {args.json}")
    return results


if __name__ == "__main__":
    main()
