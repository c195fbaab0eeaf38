"""Where one token-level PPO iteration at ``lm_135m.py``'s shape goes: generation, scoring and the
update, each compiled and timed as its own program (the library's phase functions), in float32
and in bfloat16 compute, optionally with fewer layers (``--layers``: the per-layer cost scales).

Each phase runs ``--rounds`` times after compile (median of the rounds after the first). Full
fine-tuning, float32 parameters, ``lm_135m.py``'s batch (8 x 64-token prompts, 64-token
responses, 1 epoch x 2 minibatches). Prints one line per (dtype, phase) and writes JSON.

    flock /tmp/purejaxppo-cpu.lock python benchmarks/lm_135m_phases.py [--layers 6] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lm_135m import PAD, SHAPES, prepare  # noqa: E402
from vs_trl import HYPER, _median, loadavg, token_config  # noqa: E402


def _time(fn, args, rounds: int) -> tuple[float, float]:
    """``(compile s, median run s)`` of ``jax.jit(fn)`` on ``args``."""
    import jax

    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, _median(times[1:] or times)


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def phases(
    shape: str,
    dtype: str,
    rounds: int,
    batch: int,
    prompt: int,
    response: int,
    lora_rank: int,
    layers="unrolled",
    micro_batches: int = 1,
) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import (
        Devices,
        finish_phase,
        load_pretrained,
        make_token_ppo,
        Models,
        sample_phase,
        score_phase,
        trained_params,
    )

    info = prepare(shape, prompt)
    lm, params = load_pretrained(info["model_dir"], dtype=jnp.dtype(dtype))
    lm = type(lm)(lm.model.clone(scan_layers=layers != "unrolled", remat_layers=layers == "remat"))
    pool = jnp.asarray(np.load(info["prompts"]), jnp.int32)
    p, pv = pool[:batch], pool[:batch] != PAD

    def reward(_, pp, ppv, r, m):
        return jnp.sum((r % 2 == 0) & m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1)

    spec = {**HYPER, "batch_size": batch, "update_epochs": 1, "num_minibatches": 2, "response_length": response}
    spec.update(lr=1e-5, beta=0.05)
    lora = dict(lora_rank=lora_rank, lora_alpha=2.0 * lora_rank, lora_base_dtype="bfloat16") if lora_rank else {}
    cfg = token_config(spec, stop_ids=(), pad_id=PAD, missing_eos_penalty=0.0, micro_batches=micro_batches, **lora)
    tp = make_token_ppo(cfg, lm, reward)
    state = jax.jit(lambda k, q: tp.init(k, q, None if lora_rank else q))(jax.random.PRNGKey(0), params)
    models = Models(lm, lm, lm, reward)
    keys = jax.random.split(jax.random.PRNGKey(1), batch)

    def gen(s, k):
        return sample_phase(
            models, trained_params(s.train.params, s.reference, models), None, k[0], p, pv, cfg, Devices()
        )

    sampled = jax.jit(gen)(state, keys)

    def score(s, sm):
        return finish_phase(
            score_phase(models, trained_params(s.train.params, s.reference, models), s.reference, sm, response, cfg),
            s.beta,
            cfg,
            Devices(),
        )[0]

    data = jax.jit(score)(state, sampled)

    def update(s, d):
        return tp.update(s.train, d, jax.random.PRNGKey(2), base=s.reference)

    out = {}
    for name, fn, args in (
        ("generation", gen, (state, keys)),
        ("scoring", score, (state, sampled)),
        ("update", update, (state, data)),
    ):
        c, t = _time(fn, args, rounds)
        out[name] = {"compile_s": c, "run_s": t, "peak_rss_mb": _peak_mb()}
        print(
            f"{dtype:>9} {layers:>8} {name:>10}: compile {c:6.1f} s, run {t:7.3f} s, peak RSS so far "
            f"{_peak_mb():.0f} MB; load {loadavg()}",
            flush=True,
        )
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=30, help="decoder layers (30: SmolLM2-135M's)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="compute dtypes, a comma list")
    ap.add_argument(
        "--lora-rank", type=int, default=0, help="> 0: LoRA of this rank (alpha 2 x rank) over a bfloat16 base"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--layers-as",
        default="unrolled",
        choices=("unrolled", "scan", "remat"),
        help="the trunk: Llama's scan_layers / remat_layers",
    )
    ap.add_argument("--micro-batches", type=int, default=1, help="each minibatch in N accumulated passes")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    shape = "smollm2-135m" if args.layers == 30 else f"smollm2-135m-{args.layers}layers"
    SHAPES.setdefault(shape, {**SHAPES["smollm2-135m"], "num_hidden_layers": args.layers})
    res = {"command": "python benchmarks/lm_135m_phases.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    for dtype in [d for d in args.dtypes.split(",") if d]:
        res[dtype] = phases(shape, dtype, args.rounds, 8, 64, 64, args.lora_rank, args.layers_as, args.micro_batches)
    res["loadavg_end"] = loadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
