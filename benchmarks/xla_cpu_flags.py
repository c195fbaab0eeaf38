"""XLA:CPU flags as levers (issue 11): compile and run time of default CartPole (1 seed) under
the ``XLA_FLAGS`` this process was started with, and a hash of the final training state (equal
hashes: the flag did not change a number).

    for f in "" "--xla_llvm_disable_expensive_passes=true" "--xla_cpu_use_onednn=true"; do
        XLA_FLAGS="$f" python benchmarks/xla_cpu_flags.py [gru]; done

One process per flag (XLA reads them at start-up); run the rounds interleaved on an idle machine.
Measured 2026-12-01 on the 2-core CPU (round-to-round noise about 15%): no flag tried gave a gain
beyond noise without changing numbers; ``--xla_cpu_use_fusion_emitters=false`` cut compile by a
quarter and slowed the run by 37%; backend optimisation level 0 cut compile by about a third and
ran 3.4x slower (both change the numbers).
"""

import hashlib
import os
import sys
import time

import jax
import numpy as np

from purejaxppo import PPOConfig, make_ppo

net = sys.argv[1] if len(sys.argv) > 1 else "mlp"
cfg = (PPOConfig(env_name="CartPole-v1") if net == "mlp"
       else PPOConfig(env_name="CartPole-v1", network=net, total_timesteps=100_000))
train = jax.jit(make_ppo(cfg).train)
key = jax.random.PRNGKey(0)
t = time.perf_counter()
compiled = train.lower(key).compile()
compile_s = time.perf_counter() - t
times = []
for _ in range(2):
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(key))
    times.append(time.perf_counter() - t)
digest = hashlib.sha1(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(out))).hexdigest()[:12]
print(f"{os.environ.get('XLA_FLAGS', '') or 'default':60s} compile {compile_s:5.1f}s run {min(times):5.2f}s "
      f"hash {digest}")
