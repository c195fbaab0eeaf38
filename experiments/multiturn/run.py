"""Multi-turn RL on the guessing game, end to end on a CPU, in one command:

1. transcripts of the game (``data/sft.jsonl``: a share bisection, the rest guesses drawn from
   the interval still possible, so well-formed and consistent but not the fastest), a tiny
   random Llama over the character tokenizer, and a short SFT on the transcripts' guesses;
2. ``make_episode_ppo`` from the SFT model, each whole episode one compiled program: PPO with a
   critic (GAE over the model's tokens across turns) against GRPO (the group baseline), the
   seeds of a method vmapped in one program, equal episodes per seed;
3. every ``eval_every`` iterations, held-out episodes with fixed keys (every secret equally
   often): the solve rate and the mean turns to solve; the tables (mean and 95% t-interval over
   seeds), ``eval.csv``, ``training.csv``, ``summary.json`` and plots.

Usage::

    python experiments/multiturn/run.py           # the full experiment, into runs/multiturn
    python experiments/multiturn/run.py --quick   # every stage, tiny (~2 min), into runs/multiturn-quick

``--set KEY=VALUE`` changes one size of :data:`FULL` / :data:`QUICK`. The results: RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

import multiturn_report as report  # noqa: E402  (this folder's modules, through the path just set)
import multiturn_world as world  # noqa: E402

FULL = dict(
    hi=15, max_turns=4, width=32, layers=2, sft_traces=2000, sft_steps=800, sft_lr=3e-3, bisect_share=0.0,
    methods="ppo,grpo", seeds=4, iterations=120, episodes=64, group=8, lr=1e-3, epochs=2, minibatches=2,
    eval_every=20, eval_episodes=240,
)  # fmt: skip
QUICK = dict(
    FULL, sft_traces=400, sft_steps=60, iterations=4, episodes=16, group=4, eval_every=2, eval_episodes=30, seeds=2
)
#: method -> (advantage, uses the group)
METHODS = {"ppo": ("gae", False), "grpo": ("grpo", True)}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def apply_sets(ap, sizes: dict, items) -> dict:
    """``sizes`` with each ``--set KEY=VALUE`` applied (the type of its default); an unknown key
    is a usage error naming the sizes."""
    for item in items:
        k, _, v = item.partition("=")
        if k not in sizes:
            ap.error(f"--set {item}: no size {k!r}; one of {', '.join(sizes)}")
        sizes[k] = type(sizes[k])(v)
    return sizes


def write_traces(path: str, data: tuple, n: int) -> None:
    """The first ``n`` SFT transcripts as JSON lines: text and the model's share of it."""
    toks, valid, action = data
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for i in range(min(n, len(toks))):
            ids = [int(t) for t in toks[i][valid[i]]]
            f.write(
                json.dumps({"text": world.TOK.decode(ids), "action": [bool(a) for a in action[i][valid[i]]]}) + "\n"
            )


def ppo_config(method: str, p: dict, budget: int):
    from purejaxppo.lm import TokenPPOConfig

    advantage, grouped = METHODS[method]
    return TokenPPOConfig(
        batch_size=p["episodes"], group_size=p["group"] if grouped else 1, advantage=advantage,
        max_new_tokens=budget, stop_ids=world.TOK.stop_ids, pad_id=world.TOK.pad_id,
        update_epochs=p["epochs"], num_minibatches=p["minibatches"], actor_lr=p["lr"], critic_lr=p["lr"],
        missing_eos_penalty=0.0, beta=0.0 if grouped else 0.01, gamma=1.0,
    )  # fmt: skip


def train_method(method: str, lm, params, env, p: dict, evaluator, seed: int) -> tuple:
    """One method's seeds, vmapped: ``(eval rows, training rows, seconds)``."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import make_episode_ppo, policy_params

    budget = world.budget(env, p["max_turns"], p["hi"])
    hi = p["hi"]

    def prompts(key, n):
        prompt, valid = world.prompt_batch(n)
        return prompt, valid, jax.random.randint(key, (n,), 0, hi)  # row r plays the secret 1 + r

    cfg = ppo_config(method, p, budget)
    ppo = make_episode_ppo(cfg, lm, env, max_turns=p["max_turns"], turn_tokens=world.turn_tokens(hi), prompts=prompts)
    keys = jax.random.split(jax.random.PRNGKey(1000 * seed + 7), p["seeds"])
    states = jax.jit(jax.vmap(lambda k: ppo.init(k, params, params, params)))(keys)
    step = jax.jit(jax.vmap(ppo.iteration))
    evaluate = jax.jit(jax.vmap(evaluator))
    evals, training, t0 = [], [], time.time()

    def record(it):
        solve, turns, invalid = (jnp.asarray(x) for x in evaluate(policy_params(states)))
        for s in range(p["seeds"]):
            evals.append(
                {"method": method, "seed": s, "iteration": it, "episodes": it * p["episodes"],
                 "solve_rate": float(solve[s]), "turns_to_solve": float(turns[s]), "invalid_rate": float(invalid[s])}
            )  # fmt: skip

    record(0)
    for it in range(1, p["iterations"] + 1):
        states, m = step(states)
        for s in range(p["seeds"]):
            training.append(
                {"method": method, "seed": s, "iteration": it, "score": float(m["score"][s]),
                 "turns": float(m["turns"][s]), "solved": float(m["terminated"][s])}
            )  # fmt: skip
        if it % p["eval_every"] == 0 or it == p["iterations"]:
            record(it)
            last = evals[-p["seeds"] :]
            log(f"{method} it {it}: held-out solve {[round(r['solve_rate'], 2) for r in last]}")
    return evals, training, time.time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output folder (default runs/multiturn, runs/multiturn-quick with --quick)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a size (seeds=2)")
    args = ap.parse_args(argv)
    p = apply_sets(ap, dict(QUICK if args.quick else FULL), args.set)
    for m in p["methods"].split(","):
        if m not in METHODS:
            ap.error(f"--set methods={p['methods']}: unknown method {m!r}; choose from {', '.join(METHODS)}")
    out = os.path.abspath(args.out or os.path.join("runs", "multiturn-quick" if args.quick else "multiturn"))
    os.makedirs(out, exist_ok=True)
    t0 = time.time()

    import jax

    from purejaxppo.lm import EpisodeConfig

    env = world.make_env(p["hi"], p["max_turns"])
    budget = world.budget(env, p["max_turns"], p["hi"])
    lm, params = world.make_model(p["width"], p["layers"], 1 + budget, jax.random.PRNGKey(args.seed))
    data = world.sft_batch(p["sft_traces"], p["hi"], p["max_turns"], budget, args.seed, p["bisect_share"])
    write_traces(os.path.join(out, "data", "sft.jsonl"), data, p["sft_traces"])
    ecfg = EpisodeConfig(p["max_turns"], world.turn_tokens(p["hi"]), budget, world.TOK.stop_ids, world.TOK.pad_id)
    evaluator = world.make_evaluator(lm, env, ecfg, p["eval_episodes"], seed=12345)
    before = world.evaluate(evaluator, params)
    log(f"SFT on {p['sft_traces']} transcripts, {p['sft_steps']} steps ...")
    ts = time.time()
    params, losses = world.train_sft(lm, params, data, p["sft_steps"], 64, p["sft_lr"], args.seed)
    sft = {
        "wall_s": round(time.time() - ts, 1), "loss_first": float(losses[0]), "loss_last": float(losses[-1]),
        "random_init": before._asdict(), "after_sft": world.evaluate(evaluator, params)._asdict(),
    }  # fmt: skip
    log(f"SFT: {json.dumps(sft)}")
    evals, training, walls = [], [], {}
    methods = p["methods"].split(",")
    for method in methods:
        log(f"{method}: {p['seeds']} seeds x {p['iterations']} iterations x {p['episodes']} episodes ...")
        e, t, wall = train_method(method, lm, params, env, p, evaluator, args.seed)
        evals, training, walls[method] = evals + e, training + t, round(wall, 1)
    records = report.write_all(out, p, sft, evals, training, walls, methods, time.time() - t0, args)
    print(report.markdown_table(records["table"], records["comparison"]))
    log(f"done in {records['wall_s']:.0f}s: {out}/summary.json, eval.csv, training.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
