"""Where compile time goes, ours next to PureJaxRL's: tracing + lowering vs XLA's compile.

    python benchmarks/compile_parts.py --purejaxrl-dir DIR [--rows cartpole_1seed,cartpole_16seeds] [--rounds 2]

For each row of ``benchmarks/vs_purejaxrl.py`` (same configs, same shims), both sides'
``jax.jit(train)`` (vmapped over the row's seeds) are lowered and compiled with JAX's
in-memory caches cleared before each (persistent cache off): prints the seconds of
``lower`` (tracing to StableHLO) and of ``compile`` (XLA), the StableHLO size in lines and
the optimised HLO's instruction count and its kernels (fusions and library calls: what XLA:CPU
compiles to machine code). With ``--phases`` each side is compiled once more under
``jax.profiler.trace`` and XLA's own trace events split that compile: HLO passes, the fusion
emitters (HLO -> MLIR -> LLVM IR) and LLVM's code generation. ``ours_nometrics`` is ours
returning only the final params, so that XLA drops the code of the per-update metrics
(``episode_return``, ``approx_kl``, ... ; PureJaxRL returns its raw per-step ``info`` instead):
its compile next to ``ours`` is what those metrics cost.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--purejaxrl-dir", required=True)
    ap.add_argument("--rows", default="cartpole_1seed,cartpole_16seeds")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phases", action="store_true", help="also split XLA's compile by its trace events")
    args = ap.parse_args(argv)

    import jax

    import _purejaxrl_shims
    from vs_purejaxrl import build_row

    from purejaxppo import make_ppo

    pjr = _purejaxrl_shims.load(args.purejaxrl_dir)
    jax.jit(lambda x: x + 1)(1.0)  # JAX's own first-compile cost, outside the timings
    for row in args.rows.split(","):
        cfg, script, theirs, seeds = build_row(row, pjr, 1.0)
        keys = jax.random.split(jax.random.PRNGKey(0), seeds)
        train = make_ppo(cfg).train
        fns = {
            "ours": train,
            "purejaxrl": getattr(pjr, script).make_train(dict(theirs)),
            # ours returning only the final params: XLA drops the per-update metrics' code
            "ours_nometrics": lambda key: train(key)[0].train.params,
        }
        for _ in range(args.rounds):
            for name, f in fns.items():
                jax.clear_caches()
                jitted, call = jit_over_seeds(f, keys)
                t0 = time.perf_counter()
                lowered = jitted.lower(*call)
                t1 = time.perf_counter()
                compiled = lowered.compile()
                t2 = time.perf_counter()
                text = compiled.as_text()
                hlo = len(re.findall(r"^\s+(?:ROOT )?%\S+ = ", text, re.M))
                kernels = len(re.findall(r"= \S+ (?:fusion|dot|custom-call|convolution)\(", text))
                print(
                    f"{row:22s} {name:14s} lower {t1 - t0:5.2f} s   XLA compile {t2 - t1:5.2f} s   "
                    f"StableHLO {lowered.as_text().count(chr(10)):6d} lines   optimised HLO {hlo:6d} instructions, "
                    f"{kernels:4d} kernels",
                    flush=True,
                )
        if args.phases:
            for name, f in fns.items():
                jax.clear_caches()
                jitted, call = jit_over_seeds(f, keys)
                phases = xla_phases(jitted.lower(*call))
                print(f"{row:22s} {name:14s} " + "   ".join(f"{k} {v:5.2f} s" for k, v in phases.items()), flush=True)


def jit_over_seeds(f, keys):
    """``(jax.jit(f), (key,))`` for one seed, ``(jax.jit(jax.vmap(f)), (keys,))`` for several."""
    import jax

    return (jax.jit(f), (keys[0],)) if len(keys) == 1 else (jax.jit(jax.vmap(f)), (keys,))


# XLA:CPU's trace events (jax 0.10 / XLA 2026) that split one compile, and how they are named here
PHASES = {
    "HLO passes through layout assignment": "HLO passes (to layout)",
    "HLO passes after layout assignment": "HLO passes (after layout)",
    "FusionCompiler::Compile": "fusion emitters",
    "JitCompiler::Compile": "LLVM codegen",
    "CpuCompiler::RunBackend": "backend total",
}


def xla_phases(lowered) -> dict:
    """Seconds of XLA's compile phases (:data:`PHASES`), from a profiler trace of ``lowered.compile()``.
    Events nest and may run on several threads, so the phases need not add up to the wall time."""
    import glob
    import tempfile

    import jax
    from jax.profiler import ProfileData

    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            lowered.compile()
        data = ProfileData.from_file(glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)[0])
        total = {}
        for plane in data.planes:
            for line in plane.lines:
                for ev in line.events:
                    key = next((v for k, v in PHASES.items() if ev.name.startswith(k)), None)
                    if key:
                        total[key] = total.get(key, 0.0) + ev.duration_ns / 1e9
    return {v: total.get(v, float("nan")) for v in PHASES.values()}


if __name__ == "__main__":
    main()
