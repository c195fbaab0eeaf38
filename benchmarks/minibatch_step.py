"""The update phase alone, ours next to rejax's, on the vs_rejax CartPole config: per minibatch step
time and the compiled program's op counts (where the per-op overhead of issue 31 lives).

Each side collects one rollout with its own code (params at init), computes its targets, then a
compiled program runs ``--iters`` updates (``epochs x minibatches`` steps each) on that fixed batch,
the train state carried from one to the next: ours :func:`purejaxppo.step.phases.update_params`
(the library's update, metrics included), rejax's its ``train_iteration``'s epoch loop
(``shuffle_and_split`` + ``PPO.update``, no metrics). Rounds interleave (ours, rejax, ...), median.

Op counts are read from the optimized HLO of each program: instructions in the computations that
run once per minibatch step (the innermost loop body and what it calls), and the kernels XLA:CPU
emits for them (fusions, dots, and the unfused ops left outside any fusion).

    flock /tmp/purejaxppo-timing.lock python benchmarks/minibatch_step.py [--row cartpole] [--iters 400]
        [--rounds 5] [--sweep 8] [--json OUT]

``--sweep N`` vmaps both programs over N learning rates (rejax: its algorithm stacked, one shared
key; ours: ``stack_configs`` over the same rates, the key unbatched as on rejax's side; ``--ours-keys per-run``: one key per run, as the CLI lays runs out).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def hlo_counts(compiled) -> dict:
    """Op counts of the minibatch step in an optimized HLO module: the while body with the most
    ``dot`` instructions (the forward and backward matmuls of one step), its instructions, and the
    kernels among them (everything but parameters, tuples, constants and bitcasts)."""
    text = compiled.as_text()
    comps, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if m:
            cur = m.group(1)
            comps[cur] = []
        elif cur and line.startswith("  ") and " = " in line:
            comps[cur].append(line.strip())
    bodies = {b for ls in comps.values() for ln in ls for b in re.findall(r"body=%?([\w.\-]+)", ln)}

    def opcode(ln):
        m = re.search(r" = [^(]*?([a-z][\w\-]*)\(", ln)
        return m.group(1) if m else "?"

    step = max(bodies, key=lambda b: sum(opcode(ln) == "dot" for ln in comps[b]))
    ops = [opcode(ln) for ln in comps[step]]
    kernels = [o for o in ops if o not in ("parameter", "get-tuple-element", "tuple", "constant", "bitcast")]
    by_op = {o: kernels.count(o) for o in sorted(set(kernels))}
    return {
        "step_instructions": len(ops),
        "step_kernels": len(kernels),
        "step_kernels_by_op": by_op,
        "module_instructions": sum(len(v) for v in comps.values()),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--row", default="cartpole", choices=("cartpole", "breakout_minatar"))
    p.add_argument("--iters", type=int, default=400, help="updates per timed program")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sweep", type=int, default=0, help="vmap both sides over this many learning rates")
    p.add_argument(
        "--ours-keys",
        default="shared",
        choices=("shared", "per-run"),
        help="sweep: ours with one unbatched key (as rejax) or a key per run (the CLI's layout)",
    )
    p.add_argument("--hlo-out", default=None, help="write both optimized HLO modules to this prefix")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)
    from _common import compile_timed, hardware, interleaved_rounds, loadavg_now
    from vs_rejax import SWEEP_LRS, make_rejax, ours_config, rejax_settings
    from purejaxppo.agents.registry import build_agent
    from purejaxppo.parallel.runs_axis import runs
    from purejaxppo.step import phases
    from purejaxppo.step.device_split import DeviceSplit
    from purejaxppo.step.environment import make_env

    s = rejax_settings(args.row)
    cfg = ours_config(s)
    venv = make_env(cfg, None, 1)
    parts = phases.StepParts(
        cfg, venv, build_agent(cfg, venv.spec), phases.ppo_loss_fn, DeviceSplit(None, 1, venv.num_envs, cfg.num_envs)
    )
    algo = make_rejax(s)
    key = jax.random.PRNGKey(0)

    def ours(key, c):
        runner = phases.init_runner(parts, key, c)
        params = runner.train.params
        _, traj = phases.collect_rollout(parts, params, runner, key)
        batch, resets, _, _ = phases.compute_targets(parts, params, traj, runner.reward_scale, c)

        def body(train, k):
            train, m = phases.update_params(parts, runner._replace(train=train), batch, resets, k, c)
            return train, m["actor_loss"]

        return jax.lax.scan(body, runner.train, jax.random.split(key, args.iters))

    def theirs(key, al):
        from rejax.algos.ppo import AdvantageMinibatch

        ts = al.init_state(key)
        ts, traj = al.collect_trajectories(ts)
        last_val = jnp.where(ts.last_done, 0, al.critic.apply(ts.critic_ts.params, ts.last_obs))
        adv, tgt = al.calculate_gae(traj, last_val)
        data = AdvantageMinibatch(traj, adv, tgt)

        def epoch(ts, _):
            rng, mb_rng = jax.random.split(ts.rng)
            mbs = al.shuffle_and_split(data, mb_rng)
            return jax.lax.scan(lambda t, mb: (al.update(t, mb), None), ts.replace(rng=rng), mbs)[0], None

        def body(ts, _):
            return jax.lax.scan(epoch, ts, None, al.num_epochs)[0], None

        return jax.lax.scan(body, ts, None, args.iters)[0]

    if args.sweep:
        lrs = SWEEP_LRS[: args.sweep]
        algos = [algo.replace(learning_rate=lr) for lr in lrs]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *algos)
        _, configs = runs(cfg, [{"lr": lr} for lr in lrs], 1, 0)
        ours_keys = jnp.broadcast_to(key, (len(lrs),) + key.shape)
        sides = {
            "ours": (
                (jax.vmap(ours, in_axes=(None, 0)), (key, configs))
                if args.ours_keys == "shared"
                else (jax.vmap(ours), (ours_keys, configs))
            ),
            "rejax": (jax.vmap(theirs, in_axes=(None, 0)), (key, stacked)),
        }
    else:
        sides = {"ours": (ours, (key, cfg)), "rejax": (theirs, (key, algo))}
    steps = args.iters * cfg.update_epochs * cfg.num_minibatches * max(1, args.sweep)
    hw = hardware()
    print(
        f"{args.row}: {args.iters} updates x {cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches of "
        f"{cfg.minibatch_size}"
        + (f", vmapped over {args.sweep} lrs" if args.sweep else "")
        + f"; load {hw.get('loadavg_at_start')}"
    )
    rec = {}
    for label, (fn, a) in sides.items():
        c, seconds = compile_timed(jax.jit(fn), *a, clear=True)
        rec[label] = {"compiled": c, "args": a, "compile_s": round(seconds, 2), "hlo": hlo_counts(c)}
        if args.hlo_out:
            with open(f"{args.hlo_out}_{label}.txt", "w") as f:
                f.write(c.as_text())
        print(f"  {label:<6} compile {rec[label]['compile_s']} s  {rec[label]['hlo']}", flush=True)
    calls = {label: functools.partial(v["compiled"], *v["args"]) for label, v in rec.items()}
    for label, t in interleaved_rounds(calls, args.rounds).items():
        rec[label]["times"], rec[label]["cores"] = t.times, t.cores
    out = {
        "row": args.row,
        "iters": args.iters,
        "sweep": args.sweep,
        "minibatch_steps": steps,
        "hardware": hw,
        "loadavg_after": loadavg_now(),
    }
    for label, v in rec.items():
        med = statistics.median(v["times"])
        out[label] = {
            "compile_s": v["compile_s"],
            "run_s": [round(t, 3) for t in v["times"]],
            "ms_per_minibatch_step": round(1e3 * med / steps, 4),
            "cores": round(statistics.median(v["cores"]), 2),
            "hlo": v["hlo"],
        }
        print(
            f"  {label:<6} {out[label]['ms_per_minibatch_step']:.4f} ms per minibatch step (median of "
            f"{[round(t, 2) for t in v['times']]} s), {out[label]['cores']} cores"
        )
    out["ratio_rejax_over_ours_time"] = round(
        out["rejax"]["ms_per_minibatch_step"] / out["ours"]["ms_per_minibatch_step"], 3
    )
    print(f"  speed ours / rejax: {out['ratio_rejax_over_ours_time']:.3f}x; load after {out['loadavg_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
