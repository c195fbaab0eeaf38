"""Where one training run's time goes: rollout (+ values and GAE) versus the update.

Times compiled programs over the same number of updates as ``train`` (median of
``--repeats``, after compile): the whole ``run`` (rollout, targets, update: the real
step), the rollout-and-targets part alone (the same step with ``update_epochs`` worth of
minibatch steps removed: params stay at init), and the update alone (``update_epochs`` x
``num_minibatches`` steps on one fixed batch, repeated ``num_updates`` times). The two
parts need not add up exactly to the whole (XLA schedules the step as one program, and
runs independent ops of it concurrently: ``cores`` is CPU seconds over wall seconds).

For the MLP, a fourth program is the update's matrix products ALONE: every minibatch step's
forward ``x @ W``, weight gradient ``x.T @ dy`` and input gradient ``dy @ W.T`` (none for
the first layer) at the real shapes, chained so that XLA can neither hoist nor drop them,
and nothing else (no activations, loss, clipping or Adam). Its time is the floor that XLA's
own matmuls put under the update; the rest of the update is everything else.

With ``--seeds S`` every program is vmapped over ``S`` seeds (as ``jax.vmap(ppo.train)``).

    python benchmarks/profile_step.py --env CartPole-v1
    python benchmarks/profile_step.py --env CartPole-v1 --seeds 16 --total-timesteps 125000
    python benchmarks/profile_step.py --network gru
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import compile_timed, interleaved_rounds, rollout_targets, rollouts_alone  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--network", default="mlp", choices=("mlp", "gru"))
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seeds", type=int, default=1, help="vmap every program over this many seeds")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import jax

    from purejaxppo import PPOConfig, make_ppo
    from purejaxppo.stages.update import make_optimizer, update_epochs

    kw = dict(gru_size=128, hidden_sizes=(128,), activation="relu") if args.network == "gru" else {}
    cfg = PPOConfig(env_name=args.env, network=args.network, total_timesteps=args.total_timesteps, **kw)
    ppo = make_ppo(cfg)
    agent = ppo.agent
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    runner = jax.jit(jax.vmap(ppo.init))(keys) if args.seeds > 1 else jax.jit(ppo.init)(keys[0])

    def rollout_part(runner):
        return rollouts_alone(ppo, runner, cfg.num_updates)

    from purejaxppo.stages import losses
    from purejaxppo.step.train import ppo_loss_fn

    def update_part(runner):
        _, batch, resets = rollout_targets(ppo)(runner, runner.rng)
        data = agent.units(batch, runner.carry, resets)

        def loss(p, mb):
            return ppo_loss_fn(agent, p, mb._replace(advantage=losses.normalize(mb.advantage)), cfg)

        def body(state, key):
            state, m = update_epochs(
                key,
                state,
                data,
                loss_fn=loss,
                optimizer=make_optimizer(cfg.max_grad_norm, cfg.adam_eps, cfg.lr),
                num_epochs=cfg.update_epochs,
                num_minibatches=cfg.num_minibatches,
            )
            return state, m["grad_norm"]

        return jax.lax.scan(body, runner.train, jax.random.split(runner.rng, cfg.num_updates))

    steps = cfg.num_updates * cfg.update_epochs * cfg.num_minibatches  # minibatch gradient steps per seed

    def update_matmuls(runner):
        """The update's matrix products alone, at its shapes (see the module docstring)."""
        # actor and critic: each a chain of Dense layers (torso in key order, then its head)
        p = runner.train.params["params"]
        kernels = lambda sub: [
            leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(sub)
            if getattr(path[-1], "key", None) == "kernel"
        ]
        chains = [
            kernels(p["actor_torso"]) + kernels(p["policy_head"]),
            kernels(p["critic_torso"]) + kernels(p["value_head"]),
        ]
        x0 = runner.obs.reshape(-1, runner.obs.shape[-1])[:1].repeat(cfg.minibatch_size, 0)

        def body(chains, _):
            new = []
            for ws in chains:
                acts, h = [], x0
                for w in ws:  # forward
                    acts.append(h)
                    h = h @ w
                dy, grads = h, []
                for i in reversed(range(len(ws))):  # backward
                    grads.append(acts[i].T @ dy)
                    if i:
                        dy = dy @ ws[i].T
                new.append([w - 1e-6 * g for w, g in zip(ws, reversed(grads))])
            return new, None

        return jax.lax.scan(body, chains, None, length=steps)[0]

    programs = {"whole_run": lambda r: ppo.run(r), "rollout_targets": rollout_part, "update": update_part}
    if args.network == "mlp" and not cfg.shared_torso:
        programs["update_matmuls"] = update_matmuls
    res = {
        "env": args.env,
        "network": args.network,
        "seeds": args.seeds,
        "num_updates": cfg.num_updates,
        "batch": cfg.batch_size,
    }
    for name, fn in programs.items():
        compiled, seconds = compile_timed(jax.jit(jax.vmap(fn) if args.seeds > 1 else fn), runner)
        res[f"{name}_compile_s"] = round(seconds, 2)
        last = {}
        rounds = interleaved_rounds(
            {name: functools.partial(compiled, runner)}, args.repeats, lambda r, label, t: last.update(out=t.out)
        )[name]
        times, cores, out = rounds.times, rounds.cores, last["out"]
        if name == "update_matmuls":  # its weights must stay finite and normal, or it times other arithmetic
            mags = [float(abs(w).max()) for w in jax.tree.leaves(out)]
            res["update_matmuls_weight_range"] = [min(mags), max(mags)]
        res[f"{name}_s"] = round(statistics.median(times), 3)
        res[f"{name}_cores"] = round(statistics.median(cores), 2)
    res["rollout_share"] = round(res["rollout_targets_s"] / res["whole_run_s"], 3)
    res["update_share"] = round(res["update_s"] / res["whole_run_s"], 3)
    res["ms_per_minibatch_step"] = round(1e3 * res["update_s"] / steps, 3)
    if "update_matmuls_s" in res:
        res["matmuls_share_of_update"] = round(res["update_matmuls_s"] / res["update_s"], 3)
        res["ms_per_minibatch_step_matmuls"] = round(1e3 * res["update_matmuls_s"] / steps, 3)
    for k, v in res.items():
        print(f"{k:<26} {v}")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=2)
    return res


if __name__ == "__main__":
    main()
