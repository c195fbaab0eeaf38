"""The guessing game compiled whole against the same game driven from the host, and the time per
turn at SmolLM2-135M's shape.

Side by side (one process, same model, batch, turns and keys): ``run_episode`` under ``jax.jit``
(the whole episode one program: a ``while_loop`` over turns, each sampling with the KV cache and
stepping the game vmapped) against ``host_jax_episode`` (one Python iteration per turn: the
jitted sampler, the jitted vmapped ``step``, the buffers in NumPy). Each side is called once to
compile (apart), then ``--repeats`` interleaved rounds; the figure is the median. The two sides'
episodes are checked equal (tokens, turns) before anything is timed.

The model: a random tiny Llama (``--width``, ``--layers``) over the character tokenizer; the
game: a secret in 1..``--hi``, ``--turns`` guesses of up to ``--turn-tokens`` tokens. Random
weights rarely guess right, so nearly every episode runs all its turns on both sides.

``--smollm``: a random-weight Llama with SmolLM2-135M's config (30 layers, hidden 576, 9 heads /
3 key/value heads, MLP 1536, vocabulary 49152, tied head; built here, nothing downloaded) runs a
short compiled episode (``--smollm-batch`` rows, ``--smollm-turns`` turns of
``--turn-tokens`` tokens): the seconds per turn. Skipped, with the reason printed, when its
estimated time (``--smollm-budget-s``) is exceeded by the compile of the first call.

    flock /tmp/timing.lock python benchmarks/multiturn_speed.py [--batch 32] [--turns 8] [--repeats 5] \\
        [--smollm] [--json benchmarks/results/multiturn_speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import hardware, interleaved_rounds, loadavg_now, timed  # noqa: E402

SMOLLM2_135M = dict(
    model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
    max_position_embeddings=8192, tie_word_embeddings=True,
)  # fmt: skip
ALPHABET = "0123456789 abcdefghilmnorstuwGN.\n"


def tiny_setup(args):
    """``(lm, params, env, cfg, inputs)`` of the side-by-side rows."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import CharTokenizer, EpisodeConfig, FlaxLM, GuessNumber, Llama, LlamaConfig

    tok = CharTokenizer(ALPHABET)
    env = GuessNumber.from_tokenizer(tok, lo=1, hi=args.hi, max_turns=args.turns, intro=f"Guess 1 to {args.hi}.\n")
    budget = env.obs_width + args.turns * (args.turn_tokens + env.obs_width)
    heads = max(2, args.width // 16)
    cfg = LlamaConfig(
        model_type="llama", vocab_size=tok.vocab_size, hidden_size=args.width, intermediate_size=2 * args.width,
        num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
        head_dim=args.width // heads, max_position_embeddings=1 + budget, tie_word_embeddings=True,
    )  # fmt: skip
    module = Llama(cfg)
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), bool))
    ecfg = EpisodeConfig(args.turns, args.turn_tokens, budget, tok.stop_ids, tok.pad_id)
    b = args.batch
    prompt = jnp.full((b, 1), tok.encode("\n")[0], jnp.int32)
    inputs = (
        jax.random.split(jax.random.PRNGKey(1), b),
        prompt,
        jnp.ones((b, 1), bool),
        jnp.arange(b, dtype=jnp.int32),
    )
    return FlaxLM(module), params, env, ecfg, inputs


def side_by_side(args) -> dict:
    import jax
    import numpy as np

    from purejaxppo.lm import host_jax_episode, run_episode

    lm, params, env, ecfg, (keys, prompt, valid, rows) = tiny_setup(args)
    compiled = jax.jit(run_episode, static_argnums=(0, 2, 7))
    sides = {
        "compiled": lambda: compiled(lm, params, env, keys, prompt, valid, rows, ecfg),
        "host": lambda: host_jax_episode(lm, params, env, keys, prompt, valid, rows, ecfg),
    }
    first = {k: timed(f) for k, f in sides.items()}  # compiles (and the host side's first dispatches)
    a, h = first["compiled"].out, first["host"].out
    same = bool(np.array_equal(np.asarray(a.tokens), np.asarray(h.tokens)))
    same &= bool(np.array_equal(np.asarray(a.turns), np.asarray(h.turns)))
    if not same:
        raise SystemExit("the compiled and host episodes differ: a bug, not a timing; see tests/test_episodes.py")
    rec = interleaved_rounds(sides, args.repeats)
    turns = int(np.asarray(a.turns).max())
    row = {"first_call_s": {k: round(t.wall_s, 2) for k, t in first.items()}, "turns": turns}
    for k, r in rec.items():
        med = statistics.median(r.times)
        row[k] = {"median_s": round(med, 4), "episodes_per_s": round(args.batch / med, 1), "times_s": r.times,
                  "cores": round(statistics.median(r.cores), 2), "s_per_turn": round(med / turns, 5)}  # fmt: skip
    row["ratio_compiled_over_host"] = round(row["compiled"]["episodes_per_s"] / row["host"]["episodes_per_s"], 2)
    row["episodes_equal"] = same
    return row


def smollm_row(args) -> dict:
    """Seconds per turn of a compiled episode at SmolLM2-135M's shape (random weights)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import EpisodeConfig, FlaxLM, GuessNumber, Llama, LlamaConfig, run_episode

    digits = tuple(range(15, 25))  # the ten digit ids; any ten ids do for a timing
    env = GuessNumber(digits, tuple(range(100, 112)), tuple((30 + i, 31 + i, 32 + i) for i in range(4)), 1, 100,
                      max_turns=args.smollm_turns, pad_id=0)  # fmt: skip
    budget = env.obs_width + args.smollm_turns * (args.turn_tokens + env.obs_width)
    b, p = args.smollm_batch, 16
    module = Llama(LlamaConfig(**SMOLLM2_135M))
    t0 = time.perf_counter()
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), bool))
    jax.block_until_ready(params)
    init_s = time.perf_counter() - t0
    ecfg = EpisodeConfig(args.smollm_turns, args.turn_tokens, budget, (2,), 0)
    keys = jax.random.split(jax.random.PRNGKey(1), b)
    prompt = jax.random.randint(jax.random.PRNGKey(2), (b, p), 3, 49152)
    run = jax.jit(run_episode, static_argnums=(0, 2, 7))
    lm = FlaxLM(module)
    call = lambda: run(lm, params, env, keys, prompt, jnp.ones((b, p), bool), jnp.arange(b, dtype=jnp.int32), ecfg)  # noqa: E731
    first = timed(call)
    if first.wall_s > args.smollm_budget_s:
        return {"skipped": f"the first call took {first.wall_s:.0f} s > --smollm-budget-s {args.smollm_budget_s}"}
    times = [timed(call).wall_s for _ in range(args.smollm_repeats)]
    turns = int(np.asarray(first.out.turns).max())
    med = statistics.median(times)
    return {
        "config": SMOLLM2_135M, "batch": b, "prompt": p, "turns": turns, "turn_tokens": args.turn_tokens,
        "budget": budget, "init_s": round(init_s, 1), "first_call_s": round(first.wall_s, 1), "times_s": times,
        "median_episode_s": round(med, 3), "s_per_turn": round(med / turns, 3),
        "tokens_per_s": round(b * args.turn_tokens * turns / med, 1),
    }  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--turn-tokens", type=int, default=4)
    ap.add_argument("--hi", type=int, default=100)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smollm", action="store_true", help="add the SmolLM2-135M-shape row")
    ap.add_argument("--smollm-batch", type=int, default=4)
    ap.add_argument("--smollm-turns", type=int, default=3)
    ap.add_argument("--smollm-repeats", type=int, default=3)
    ap.add_argument("--smollm-budget-s", type=float, default=180.0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    out = {"hardware": hardware(), "args": vars(args), "side_by_side": side_by_side(args)}
    s = out["side_by_side"]
    print(
        f"guessing game, batch {args.batch}, {s['turns']} turns: compiled {s['compiled']['episodes_per_s']} "
        f"episodes/s, host loop {s['host']['episodes_per_s']} episodes/s: {s['ratio_compiled_over_host']}x"
    )
    if args.smollm:
        out["smollm2_135m"] = smollm_row(args)
        r = out["smollm2_135m"]
        print("SmolLM2-135M shape: " + (f"skipped: {r['skipped']}" if "skipped" in r else
              f"{r['s_per_turn']} s per turn (batch {r['batch']}, {r['turn_tokens']} tokens a turn)"))  # fmt: skip
    else:
        print("SmolLM2-135M shape: skipped (run with --smollm)")
    out["loadavg_after"] = loadavg_now()
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
