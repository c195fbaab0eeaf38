"""This CPU's matmul peak in JAX (float32, bfloat16), and the fraction of it each GRPO phase reaches on
each side of ``benchmarks/vs_trl_grpo.py``.

Peak: ``jnp.dot`` of large square products (``--square``, default 2048^3) and of the model's own shapes
at a phase's row count: the projections of one decoder layer (q, k, v, o, gate, up: ``[R, D] x [D, F]``;
down: ``[R, F] x [F, D]``) and the tied head (``[R, D] x [D, V]``), with ``R`` = the rows a phase feeds
them: generation ``B`` (one new token per row per step), scoring and update ``B x (P + T)`` (the head
``B x T``). Each product is jitted alone on random inputs and timed ``--reps`` times after a warm-up;
the best time counts (a peak). A shape set's rate = its products' FLOPs / the sum of their best times.
``--torch-python`` times torch's ``@`` at the same shapes in float32 (the TRL side's library), for
reference.

Fractions (``--from`` a ``vs_trl_grpo.py`` JSON): for each shape and side, the phase's FLOPs divided by
its measured time (the medians the JSON holds), over the float32 peaks (both sides compute in float32):

* a forward pass over ``N`` tokens: ``2 x N x`` (the decoder's matmul weights + LoRA's factors) plus the
  head ``2 x D x V`` per position whose logits are taken, plus attention ``4 x heads x head_dim x
  context`` per token and layer (QK^T and AV; causal: the mean context is half the sequence);
* generation: every row's ``P + T`` positions once through the decoder (prefill and the KV-cache
  decode), the head at the ``T`` positions that sample;
* scoring: the teacher-forced passes the side runs (the JSON's ``scoring_passes``; on both sides 0, 1 or 2:
  old log-probs when ``M x E > 1``, reference when beta > 0; ours ran 2 always before issue 52's change),
  each over ``B x (P + T)`` tokens, the head over ``B x T``;
* update: ``E`` epochs over the batch, forward + backward: weight matmuls x3 under full fine-tuning
  (forward, input gradient, weight gradient) and x2 under LoRA (the frozen base's weight gradient is not
  computed; the factors' are counted x3), attention x3.

    python benchmarks/matmul_peak.py [--from benchmarks/results/vs_trl_grpo.json] [--dtypes float32,bfloat16]
        [--square 2048] [--reps 5] [--torch-python /work/trl-grpo-venv/bin/python] [--json OUT]
    python benchmarks/matmul_peak.py --from RUN.json --peaks-from benchmarks/results/matmul_peak.json --json OUT
        # the fractions against the saved (idle-machine) peaks: nothing timed, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
TRL_PYTHON = "/work/trl-grpo-venv/bin/python"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def dims(hf: dict) -> dict:
    """The sizes a FLOP count needs from an HF Llama config."""
    h, kv = hf["num_attention_heads"], hf.get("num_key_value_heads", hf["num_attention_heads"])
    hd = hf.get("head_dim") or hf["hidden_size"] // h
    return dict(
        d=hf["hidden_size"],
        f=hf["intermediate_size"],
        layers=hf["num_hidden_layers"],
        h=h,
        kv=kv,
        hd=hd,
        v=hf["vocab_size"],
    )


def layer_products(m: dict, rows: int) -> list:
    """``(name, (R, K), (K, N))`` of one decoder layer's projections at ``rows`` rows."""
    d, f, h, kv, hd = m["d"], m["f"], m["h"], m["kv"], m["hd"]
    return [
        ("q_proj", (rows, d), (d, h * hd)),
        ("k_proj", (rows, d), (d, kv * hd)),
        ("v_proj", (rows, d), (d, kv * hd)),
        ("o_proj", (rows, h * hd), (h * hd, d)),
        ("gate_proj", (rows, d), (d, f)),
        ("up_proj", (rows, d), (d, f)),
        ("down_proj", (rows, f), (f, d)),
    ]


def time_products(products: list, dtype: str, reps: int) -> list:
    """Best wall seconds of each ``x @ w`` (jitted alone), with its FLOPs."""
    import jax
    import jax.numpy as jnp

    out = []
    for name, a, b in products:
        kx, kw = jax.random.split(jax.random.PRNGKey(len(out)))
        x = jax.random.normal(kx, a, jnp.float32).astype(dtype)
        w = jax.random.normal(kw, b, jnp.float32).astype(dtype)
        f = jax.jit(jnp.dot).lower(x, w).compile()
        jax.block_until_ready(f(x, w))
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(f(x, w))
            best = min(best, time.perf_counter() - t0)
        flops = 2 * a[0] * a[1] * b[1]
        out.append(
            {"name": name, "x": list(a), "w": list(b), "best_s": best, "gflops": flops / best / 1e9, "flops": flops}
        )
    return out


def set_rate(rows: list) -> float:
    """GFLOP/s of a set of products: their FLOPs over the sum of their best times."""
    return sum(r["flops"] for r in rows) / sum(r["best_s"] for r in rows) / 1e9


TORCH_SNIPPET = """
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
res = []
for name, a, b in json.loads(sys.argv[1]):
    x, w = torch.randn(*a), torch.randn(*b)
    x @ w
    best = float("inf")
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter(); x @ w; best = min(best, time.perf_counter() - t0)
    res.append({"name": name, "x": a, "w": b, "best_s": best, "flops": 2 * a[0] * a[1] * b[1]})
print(json.dumps(res))
"""


def torch_products(python: str, products: list, reps: int, threads: int) -> list:
    proc = subprocess.run(
        [python, "-c", TORCH_SNIPPET, json.dumps(products), str(threads), str(reps)], capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    rows = json.loads(proc.stdout)
    for r in rows:
        r["gflops"] = r["flops"] / r["best_s"] / 1e9
    return rows


# --- FLOPs of the phases ------------------------------------------------------------------------
def weights(m: dict) -> int:
    """The decoder's matmul weights (all layers), the head apart."""
    d, f, h, kv, hd = m["d"], m["f"], m["h"], m["kv"], m["hd"]
    return m["layers"] * (d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f)


def lora_factors(m: dict, rank: int) -> int:
    """LoRA's factor weights on every projection of every layer (rank ``rank``)."""
    if not rank:
        return 0
    d, f, h, kv, hd = m["d"], m["f"], m["h"], m["kv"], m["hd"]
    per = (d + h * hd) * 2 + (d + kv * hd) * 2 + 2 * (d + f) + (f + d)
    return m["layers"] * rank * per


def attention(m: dict, rows: int, length: int) -> float:
    """Causal attention's QK^T and AV over ``rows`` sequences of ``length`` positions."""
    return 4 * m["h"] * m["hd"] * m["layers"] * rows * length * (length + 1) / 2


def forward(m: dict, rank: int, rows: int, length: int, head_positions: int) -> float:
    return (
        2 * rows * length * (weights(m) + lora_factors(m, rank))
        + 2 * rows * head_positions * m["d"] * m["v"]
        + attention(m, rows, length)
    )


def phase_flops(m: dict, b: int, p: int, t: int, rank: int, passes: int, epochs: int) -> dict:
    n = p + t
    fwd = forward(m, rank, b, n, t)
    # backward: the input gradient of every matmul (x1), the weight gradient of what trains (x1), attention x2
    w_grad = (weights(m) * b * n * 2 + 2 * b * t * m["d"] * m["v"]) if not rank else 2 * b * n * lora_factors(m, rank)
    bwd = fwd + w_grad + attention(m, b, n)
    return {"generation": forward(m, rank, b, n, t), "scoring": passes * fwd, "update": epochs * (fwd + bwd)}


def fractions(grpo: dict, peaks: dict) -> list:
    """Per shape, side and phase: GFLOP/s reached and its fraction of the float32 peaks."""
    out = []
    for shape, res in grpo["shapes"].items():
        m = dims(res["model"])
        st = res["settings"]
        p = res["prompt_width"]["ours"]
        rank = st["lora_rank"]
        pk = peaks["shapes"][shape]["float32"]
        for side in ("ours", "trl"):
            s = res["runs"][0]["summary"][side]
            t = s["response_length"]  # the mean response length (== T when forced)
            fl = phase_flops(m, st["batch_size"], p, round(t), rank, res["scoring_passes"][side], st["update_epochs"])
            for phase in ("generation", "scoring", "update"):
                sec = s["phases"].get(phase)
                if not sec or fl[phase] == 0:
                    out.append({"shape": shape, "side": side, "phase": phase, "gflop": fl[phase] / 1e9, "s": sec})
                    continue
                rate = fl[phase] / sec / 1e9
                own = pk["generation_set"] if phase == "generation" else pk["sequence_set"]
                out.append(
                    {
                        "shape": shape,
                        "side": side,
                        "phase": phase,
                        "gflop": fl[phase] / 1e9,
                        "s": sec,
                        "gflops": rate,
                        "of_square": rate / peaks["square"]["float32"]["gflops"],
                        "of_own_shapes": rate / own,
                    }
                )
    return out


def print_fractions(res: dict) -> None:
    print(
        f"\nphase FLOPs / phase time, against the float32 peaks (square {res['square']['float32']['gflops']:.1f} "
        f"GFLOP/s; own shapes: the phase's products at its rows)"
    )
    print(f"{'shape':>9} {'side':>5} {'phase':>10} {'GFLOP':>9} {'s':>8} {'GFLOP/s':>8} {'of square':>9} {'of own':>7}")
    for r in res["fractions"]:
        if "gflops" not in r:
            s = "-" if r["s"] is None else format(r["s"], "8.3f")
            print(f"{r['shape']:>9} {r['side']:>5} {r['phase']:>10} {r['gflop']:9.2f} {s:>8}   (no model pass)")
            continue
        print(
            f"{r['shape']:>9} {r['side']:>5} {r['phase']:>10} {r['gflop']:9.2f} {r['s']:8.3f} {r['gflops']:8.2f} "
            f"{r['of_square']:9.1%} {r['of_own_shapes']:7.1%}"
        )


def _fractions_only(args) -> dict:
    """``--peaks-from``: the fractions of ``--from``'s phases against a saved run's peaks (a loaded machine
    times no peak worth keeping; the idle machine's stand)."""
    if not args.src:
        print("error: --peaks-from needs --from (the phases whose fractions to compute)", file=sys.stderr)
        sys.exit(2)
    with open(args.peaks_from) as f:
        peaks = json.load(f)
    grpo = {"shapes": {}}
    for path in args.src.split(","):
        with open(path) as f:
            grpo["shapes"].update(json.load(f)["shapes"])
    res = {
        "benchmark": "matmul_peak",
        "command": "python benchmarks/matmul_peak.py " + " ".join(sys.argv[1:]),
        "peaks_from": args.peaks_from,
        "source": args.src,
        "square": peaks["square"],
        "shapes": peaks["shapes"],
    }
    res["fractions"] = fractions(grpo, res)
    print_fractions(res)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--from",
        dest="src",
        default=None,
        help="vs_trl_grpo.py JSON files, comma-separated: the phases' shapes and times (a shape in a later file wins)",
    )
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--square", type=int, default=2048, help="the square product's size")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per product (the best counts)")
    ap.add_argument("--torch-python", default=TRL_PYTHON, help="time torch at the same shapes ('' to skip)")
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument(
        "--peaks-from",
        default=None,
        help="a saved matmul_peak.py JSON: its peaks are reused (nothing is timed) for --from's fractions",
    )
    ap.add_argument("--json", default=os.path.join(HERE, "results", "matmul_peak.json"))
    args = ap.parse_args(argv)
    if args.peaks_from:
        return _fractions_only(args)
    import jax

    dtypes = [d for d in args.dtypes.split(",") if d]
    grpo = None
    if args.src:
        grpo = {"shapes": {}}
        for path in args.src.split(","):
            with open(path) as f:
                grpo["shapes"].update(json.load(f)["shapes"])
    n = args.square
    res = {
        "benchmark": "matmul_peak",
        "command": "python benchmarks/matmul_peak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
        "loadavg_start": loadavg(),
        "square": {},
        "shapes": {},
    }
    square = [("square", (n, n), (n, n))]
    for dt in dtypes:
        r = time_products(square, dt, args.reps)[0]
        res["square"][dt] = r
        print(
            f"{dt:>9} [{n}, {n}] x [{n}, {n}]: {r['gflops']:7.1f} GFLOP/s (best of {args.reps}; load {loadavg()})",
            flush=True,
        )
    if args.torch_python and os.path.exists(args.torch_python):
        r = torch_products(args.torch_python, [("square", [n, n], [n, n])], args.reps, args.torch_threads)[0]
        res["square"]["torch_float32"] = r
        print(f"torch float32 [{n}, {n}] x [{n}, {n}]: {r['gflops']:7.1f} GFLOP/s ({args.torch_threads} threads)")
    if grpo is None:
        from vs_trl_grpo import model_shape, SETTINGS

        grpo = {"shapes": {}}
        for shape, st in SETTINGS.items():
            grpo["shapes"][shape] = {"model": model_shape(shape), "settings": st, "prompt_width": {"ours": 4}}
    for shape, g in grpo["shapes"].items():
        m, st = dims(g["model"]), g["settings"]
        b, p, t = st["batch_size"], g["prompt_width"]["ours"], st["max_new_tokens"]
        seq = b * (p + t)
        sets = {
            "generation_set": layer_products(m, b) + [("head", (b, m["d"]), (m["d"], m["v"]))],
            "sequence_set": layer_products(m, seq) + [("head", (b * t, m["d"]), (m["d"], m["v"]))],
        }
        res["shapes"][shape] = {"rows": {"generation": b, "sequence": seq, "head": b * t}}
        for dt in dtypes:
            one = {}
            for name, prods in sets.items():
                rows = time_products(prods, dt, args.reps)
                one[name] = set_rate(rows)
                one[name + "_products"] = rows
            res["shapes"][shape][dt] = one
            print(
                f"{dt:>9} {shape}: generation shapes [{b}, D] x [D, F]: {one['generation_set']:6.1f} GFLOP/s; "
                f"sequence shapes [{seq}, D] x [D, F]: {one['sequence_set']:6.1f} GFLOP/s",
                flush=True,
            )
            for name in ("generation_set", "sequence_set"):
                print("          " + ", ".join(f"{r['name']} {r['gflops']:.0f}" for r in one[name + "_products"]))
        if args.torch_python and os.path.exists(args.torch_python):
            tor = {}
            for name, prods in sets.items():
                rows = torch_products(
                    args.torch_python, [(a, list(x), list(w)) for a, x, w in prods], args.reps, args.torch_threads
                )
                tor[name] = set_rate(rows)
            res["shapes"][shape]["torch_float32"] = tor
            print(
                f"torch float32 {shape}: generation shapes {tor['generation_set']:6.1f} GFLOP/s; sequence shapes "
                f"{tor['sequence_set']:6.1f} GFLOP/s"
            )
    if args.src:
        res["source"] = args.src
        res["fractions"] = fractions(grpo, res)
        print_fractions(res)
    res["loadavg_end"] = loadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
