"""The gradient of a GRU over a sequence, three ways, timed in one process on this machine.

    python benchmarks/gru_sequence.py [--batch 1] [--steps 128] [--size 128] [--iters 300] [--json OUT]

* ``flax cell in scan``: ``flax.linen.GRUCell`` applied per step in ``lax.scan`` (six matmuls a
  step), differentiated by JAX -- how PureJaxRL's ``ppo_rnn.py`` and our earlier GRU did it;
* ``fused, autodiff``: the input projections of all steps as one matmul before the loop and one
  recurrent matmul a step (:mod:`purejaxppo.agents.gru`'s forward), differentiated by JAX;
* ``purejaxppo.agents.gru``: the same forward with its hand-written backward pass (the recurrent
  kernel's gradient as one matmul after the loop).

The default shape is a minibatch of PureJaxRL's GRU CartPole (``ppo_rnn.py``: 4 envs, 4
minibatches, so ONE env sequence of 128 steps; GRU and embedding 128 wide). Prints ms per
gradient (median of 3 timings of ``--iters`` calls), ratios to the first row and the
largest gradient difference to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.agents.gru import _forward, fuse, gru_sequence, input_projection


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    t, b, g = args.steps, args.batch, args.size
    cell = nn.GRUCell(g)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    params = cell.init(keys[0], jnp.zeros((b, g)), jnp.zeros((b, g)))["params"]
    x, h0 = jax.random.normal(keys[1], (t, b, g)), jnp.zeros((b, g))
    reset = jax.random.bernoulli(keys[2], 0.02, (t, b))
    out_w = jax.random.normal(keys[3], (t, b, g))

    def flax_scan(p, xs):
        step = lambda h, xr: cell.apply({"params": p}, jnp.where(xr[1][:, None], 0.0, h), xr[0])
        return jax.lax.scan(step, h0, (xs, reset))[1]

    def fused_autodiff(p, xs):
        w = fuse(p)
        return _forward(w.wh, w.bhn, h0, input_projection(w, xs), reset)[0]

    def ours(p, xs):
        w = fuse(p)
        return gru_sequence(w, h0, input_projection(w, xs), reset)

    rows, ref = [], None
    for name, f in (
        ("flax cell in scan", flax_scan),
        ("fused, autodiff", fused_autodiff),
        ("purejaxppo.agents.gru", ours),
    ):
        grad = jax.jit(jax.grad(lambda p, xs: jnp.sum(f(p, xs) * out_w), argnums=(0, 1)))
        t0 = time.perf_counter()
        out = jax.block_until_ready(grad(params, x))
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(args.iters):
                out = grad(params, x)
            jax.block_until_ready(out)
            times.append((time.perf_counter() - t0) / args.iters * 1e3)
        ms = statistics.median(times)
        ref = ref or (ms, out)
        diff = max(float(jnp.max(jnp.abs(a - c))) for a, c in zip(jax.tree.leaves(ref[1]), jax.tree.leaves(out)))
        rows.append(
            {
                "impl": name,
                "ms_per_grad": round(ms, 3),
                "first_call_s": round(compile_s, 2),
                "speedup": round(ref[0] / ms, 2),
                "max_grad_diff": diff,
            }
        )
        print(
            f"{name:20s} {ms:8.3f} ms/grad  {ref[0] / ms:5.2f}x  (first call {compile_s:.2f} s; "
            f"max grad diff {diff:.1e})",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "batch": b,
                    "steps": t,
                    "size": g,
                    "iters": args.iters,
                    "backend": jax.default_backend(),
                    "device": str(jax.devices()[0].device_kind),
                    "jax": jax.__version__,
                    "rows": rows,
                },
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
