"""Where compile time goes, ours next to PureJaxRL's: tracing + lowering vs XLA's compile.

    python benchmarks/compile_parts.py --purejaxrl-dir DIR [--rows cartpole_1seed,cartpole_16seeds] [--rounds 2]

For each row of ``benchmarks/vs_purejaxrl.py`` (same configs, same shims), both sides'
``jax.jit(train)`` (vmapped over the row's seeds) are lowered and compiled with JAX's
in-memory caches cleared before each (persistent cache off): prints the seconds of
``lower`` (tracing to StableHLO) and of ``compile`` (XLA), the StableHLO size in lines and
the optimised HLO's instruction count.
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
        fns = {"ours": make_ppo(cfg).train, "purejaxrl": getattr(pjr, script).make_train(dict(theirs))}
        for _ in range(args.rounds):
            for name, f in fns.items():
                jax.clear_caches()
                jitted, call = (jax.jit(f), (keys[0],)) if seeds == 1 else (jax.jit(jax.vmap(f)), (keys,))
                t0 = time.perf_counter()
                lowered = jitted.lower(*call)
                t1 = time.perf_counter()
                compiled = lowered.compile()
                t2 = time.perf_counter()
                hlo = len(re.findall(r"^\s+(?:ROOT )?%\S+ = ", compiled.as_text(), re.M))
                print(f"{row:22s} {name:10s} lower {t1 - t0:5.2f} s   XLA compile {t2 - t1:5.2f} s   "
                      f"StableHLO {lowered.as_text().count(chr(10)):6d} lines   optimised HLO {hlo:6d} instructions",
                      flush=True)


if __name__ == "__main__":
    main()
