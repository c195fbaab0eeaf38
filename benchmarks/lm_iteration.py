"""Where a token-level PPO iteration's time goes: generation, scoring, update.

One iteration of :func:`purejaxppo.lm.ppo.token_ppo.make_token_ppo` is timed whole and in its three
stages, each stage compiled on its own from the library's functions (nothing of the iteration
is copied here):

* ``generation``: :func:`purejaxppo.lm.ppo.experience.sample` (the KV-cache sampler, one prefill and
  ``T`` single-token decodes);
* ``scoring``: :func:`purejaxppo.lm.ppo.experience.score` then :func:`~purejaxppo.lm.ppo.experience.finish`:
  the teacher-forced passes of the policy, the reference and the critic over ``[B, P + T]``,
  the reward, the KL-shaped rewards, GAE and whitening;
* ``update``: ``TokenPPO.update``, ``epochs`` x ``minibatches`` gradient steps of the policy
  and the (separate) critic.

The model is :mod:`lm_generation`'s TinyLM (about 1M parameters, vocab 256, d 128, 4 layers) with
the same ragged prompts of at most 16 tokens; stop ids are empty, so every response is exactly
``T`` tokens long. Compile time is reported apart; each figure is the best of ``--rounds`` runs,
the stages' rounds interleaved. The stages run as separate programs, so their sum is close to,
not equal to, the whole iteration's time (one program, XLA schedules across the stages).

    python benchmarks/lm_iteration.py [--lengths 16,64,256] [--long] [--batch 8] [--rounds 2] [--json OUT]

``--long`` adds length 1024.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from _common import hardware  # noqa: E402
from lm_generation import MAX_LONG, setup  # noqa: E402
from purejaxppo.lm import (
    finish_experience,
    FlaxLM,
    make_token_ppo,
    Models,
    sample_experience,
    score_experience,
    TokenPPOConfig,
)  # noqa: E402

STAGES = ("generation", "scoring", "update", "iteration")


def reward(_, prompt, prompt_valid, response, mask):
    """A cheap score (the fraction of even tokens): the benchmark times the model passes, not a reward model."""
    return jnp.sum(mask & (response % 2 == 0), axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1)


def stages(model, params, prompt, valid, cfg):
    """``{stage: (run() -> output, compile seconds)}`` on one iteration's inputs; each stage
    takes the previous stage's real output."""
    lm = FlaxLM(model)
    tp = make_token_ppo(cfg, lm, reward)
    models = Models(lm, lm, lm, reward)
    state = tp.init(jax.random.PRNGKey(0), params, params)
    row_keys = jax.random.split(jax.random.PRNGKey(1), cfg.batch_size)
    fns = {
        "generation": (
            jax.jit(lambda p, k: sample_experience(models, p, k, prompt, valid, cfg)),
            (state.train.params, row_keys),
        ),
        "scoring": (
            jax.jit(
                lambda p, ref, resp: finish_experience(
                    score_experience(models, p, ref, None, prompt, valid, *resp, cfg), state.beta, cfg
                )[0]
            ),
            None,
        ),
        "update": (jax.jit(tp.update), None),
        "iteration": (jax.jit(tp.iteration), (state, (prompt, valid))),
    }
    out = {}
    for name in STAGES:
        fn, args = fns[name]
        if name == "scoring":
            args = (state.train.params, state.reference, jax.block_until_ready(out["generation"][0]()))
        elif name == "update":
            args = (state.train, jax.block_until_ready(out["scoring"][0]()), jax.random.PRNGKey(2))
        t0 = time.perf_counter()
        exe = fn.lower(*args).compile()
        out[name] = ((lambda e=exe, a=args: e(*a)), time.perf_counter() - t0)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="16,64,256", help="response lengths, comma-separated")
    ap.add_argument("--long", action="store_true", help=f"add length {MAX_LONG}")
    ap.add_argument("--batch", type=int, default=8, help="prompts per iteration")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")] + ([MAX_LONG] if args.long else [])
    if max(lengths) > MAX_LONG:
        raise SystemExit(f"lengths up to {MAX_LONG} (the model's position table)")
    model, params, prompt, valid = setup(args.batch)
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    print(
        f"TinyLM {n_params / 1e6:.2f}M params, batch {args.batch}, prompts <= {prompt.shape[1]} tokens, "
        f"{args.epochs} epochs x {args.minibatches} minibatches, separate critic, {jax.default_backend()}"
    )
    print(f"{'T':>5} {'stage':>11} {'compile s':>10} {'run s':>8} {'share':>6}")
    rows = []
    for t in lengths:
        cfg = TokenPPOConfig(
            batch_size=args.batch,
            update_epochs=args.epochs,
            num_minibatches=args.minibatches,
            max_new_tokens=t,
            stop_ids=(),
            pad_id=0,
        )
        runs = stages(model, params, prompt, valid, cfg)
        best = dict.fromkeys(STAGES, float("inf"))
        for _ in range(args.rounds):  # interleaved; the first round also warms up
            for name in STAGES:
                t0 = time.perf_counter()
                jax.block_until_ready(runs[name][0]())
                best[name] = min(best[name], time.perf_counter() - t0)
        parts = sum(best[s] for s in STAGES[:3])
        for name in STAGES:
            share = best[name] / parts if name != "iteration" else float("nan")
            print(f"{t:>5} {name:>11} {runs[name][1]:>10.2f} {best[name]:>8.3f} {share:>6.1%}")
            rows.append({"T": t, "stage": name, "compile_s": runs[name][1], "best_s": best[name]})
        print(f"{t:>5} {'sum of 3':>11} {'':>10} {parts:>8.3f}")
    out = {
        "hardware": hardware(),
        "params": int(n_params),
        "batch": args.batch,
        "epochs": args.epochs,
        "minibatches": args.minibatches,
        "rows": rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
