"""Per-token generation time of the tiny LM with and without its KV cache.

Both sides run :func:`purejaxppo.lm.models.sampling.sample_response` (the same decode loop, the same
sampling) on a TinyLM of about 1M parameters and left-padded ragged prompts: ``cached`` is
:class:`purejaxppo.lm.models.adapters.FlaxLM` (one prefill, then one single-token decode per token),
``full`` is :class:`purejaxppo.lm.models.adapters.FullRecompute` (one causal pass over all ``P + T`` slots
per token, the cost without a cache). Compile time is reported apart; the per-token time is
the best of ``--rounds`` runs over the response length. Rounds of the two sides are interleaved.

    python benchmarks/lm_generation.py [--lengths 16,64,256] [--long] [--sides cached,full] [--batch 8] [--rounds 3] [--json OUT]

``--long`` adds length 1024 (the full side then runs a [B, P+1024] pass per token: about an hour on a
2-core CPU; ``--sides cached`` times the cache alone).
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
from purejaxppo.lm import FlaxLM, FullRecompute, sample_response, TinyLM  # noqa: E402

VOCAB, D_MODEL, LAYERS, HEADS, PROMPT, MAX_LONG = 256, 128, 4, 4, 16, 1024


def setup(batch: int):
    """``(model, params, prompt [B, P], valid [B, P])``; the position table fits the longest
    run, so the model (and its size) is the same at every length."""
    model = TinyLM(VOCAB, D_MODEL, LAYERS, HEADS, max_len=PROMPT + MAX_LONG)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), bool))
    lens = jax.random.randint(jax.random.PRNGKey(1), (batch,), 1, PROMPT + 1)
    valid = jnp.arange(PROMPT)[None] >= (PROMPT - lens)[:, None]
    prompt = jnp.where(valid, jax.random.randint(jax.random.PRNGKey(2), (batch, PROMPT), 1, VOCAB), 0)
    return model, params, prompt, valid


def compiled(lm, params, prompt, valid, max_new: int):
    """``(run(key) -> tokens, compile seconds)``."""
    fn = jax.jit(lambda p, k: sample_response(lm, p, k, prompt, valid, max_new, jnp.array([], jnp.int32), 0))
    t0 = time.perf_counter()
    exe = fn.lower(params, jax.random.PRNGKey(0)).compile()
    return (lambda k: exe(params, k)[0]), time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="16,64,256", help="response lengths, comma-separated")
    ap.add_argument("--long", action="store_true", help="add length 1024")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--sides", default="cached,full", help="which sides to time (full at 1024 takes about an hour)")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")] + ([MAX_LONG] if args.long else [])
    assert max(lengths) <= MAX_LONG, f"lengths up to {MAX_LONG}"
    model, params, prompt, valid = setup(args.batch)
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    sides = {"cached": FlaxLM(model), "full": FullRecompute(lambda p, t, v: model.apply(p, t, v)[0])}
    sides = {k: v for k, v in sides.items() if k in args.sides.split(",")}
    print(
        f"TinyLM {n_params / 1e6:.2f}M params (vocab {VOCAB}, d {D_MODEL}, {LAYERS} layers, {HEADS} heads), "
        f"batch {args.batch}, prompts <= {PROMPT} tokens, {jax.default_backend()}"
    )
    print(f"{'T':>5} {'side':>7} {'compile s':>10} {'ms/token':>10} {'speedup':>8}")
    rows = []
    for t in lengths:
        runs, res = {}, {}
        for name, lm in sides.items():
            runs[name], compile_s = compiled(lm, params, prompt, valid, t)
            res[name] = {"T": t, "side": name, "compile_s": compile_s, "best_s": float("inf")}
        for r in range(args.rounds):  # interleaved rounds; the first also warms up
            for name, run in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(run(jax.random.PRNGKey(r + 1)))
                res[name]["best_s"] = min(res[name]["best_s"], time.perf_counter() - t0)
        for name in sides:
            row = res[name] | {"ms_per_token": 1e3 * res[name]["best_s"] / t}
            speed = res["full"]["best_s"] / res[name]["best_s"] if "full" in res else float("nan")
            print(f"{t:>5} {name:>7} {row['compile_s']:>10.2f} {row['ms_per_token']:>10.3f} {speed:>7.2f}x")
            rows.append(row)
    out = {"hardware": hardware(), "params": int(n_params), "batch": args.batch, "prompt": PROMPT, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
