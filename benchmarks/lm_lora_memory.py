"""Memory of one token-level PPO iteration: full fine-tuning against LoRA (fp32 and bf16 base).

One process per mode (so peak RSS is that mode's alone): a random GPT-2 in HF layout's shape,
one compiled iteration (separate critic), then two figures:

* XLA's own accounting of the compiled iteration (``memory_analysis``): the state it takes
  (arguments: parameters, optimizer moments, reference) and the temporaries it needs;
* the process's peak resident memory (``ru_maxrss``) after init, compile and two iterations.

    python benchmarks/lm_lora_memory.py            # all modes, one subprocess each
    python benchmarks/lm_lora_memory.py --mode lora-bf16 --d 512 --layers 8
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

MODES = ("full", "lora", "lora-bf16")


def one(mode: str, d: int, layers: int, vocab: int, batch: int, prompt: int, response: int, rank: int) -> dict:
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import count_params, FlaxLM, GPT2, make_token_ppo, TokenPPOConfig

    module = GPT2(vocab, prompt + response, d, layers, max(1, d // 64))
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))

    def prompts(key, b):
        return jax.random.randint(key, (b, prompt), 2, vocab), jnp.ones((b, prompt), bool)

    def reward(_, p, pv, r, m):
        return jnp.sum((r == 3) & m, axis=1).astype(jnp.float32)

    lora_kw = (
        {}
        if mode == "full"
        else dict(
            lora_rank=rank, lora_alpha=2.0 * rank, lora_base_dtype="bfloat16" if mode == "lora-bf16" else "float32"
        )
    )
    cfg = TokenPPOConfig(
        batch_size=batch, num_minibatches=2, update_epochs=1, max_new_tokens=response, stop_ids=(1,), **lora_kw
    )
    tp = make_token_ppo(cfg, FlaxLM(module), reward, prompts=prompts)
    state = jax.jit(lambda k, p: tp.init(k, p, p))(jax.random.PRNGKey(1), params)
    del params  # the state holds what the run needs (full: policy, critic, reference; LoRA: the base once)
    t = time.perf_counter()
    compiled = jax.jit(tp.iteration, donate_argnums=0).lower(state).compile()
    compile_s = time.perf_counter() - t
    mem = compiled.memory_analysis()
    t = time.perf_counter()
    for _ in range(2):
        state, metrics = compiled(state)
    jax.block_until_ready(metrics)
    trainable = count_params(state.train.params)
    return {
        "mode": mode,
        "state_MiB": round(sum(x.nbytes for x in jax.tree.leaves(state)) / 2**20, 1),
        "trainable": trainable,
        "arguments_MiB": round(mem.argument_size_in_bytes / 2**20, 1),
        "temp_MiB": round(mem.temp_size_in_bytes / 2**20, 1),
        "compile_s": round(compile_s, 1),
        "iteration_s": round((time.perf_counter() - t) / 2, 2),
        "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default=None, help="one mode in this process (default: all, one each)")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--response", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    a = p.parse_args(argv)
    sizes = dict(
        d=a.d, layers=a.layers, vocab=a.vocab, batch=a.batch, prompt=a.prompt, response=a.response, rank=a.rank
    )
    if a.mode:
        print(json.dumps(one(a.mode, **sizes)), flush=True)
        return
    print(json.dumps(sizes))
    for mode in MODES:
        flags = [f"--{k}={v}" for k, v in sizes.items()]
        out = subprocess.run(
            [sys.executable, __file__, "--mode", mode, *flags], capture_output=True, text=True, check=True
        ).stdout
        print(out.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
