"""Speed levers of token-level PPO's iteration, each A/B in one process on vs_trl's setup.

The model, prompts and hyperparameters of ``benchmarks/vs_trl.py`` (its SFT GPT-2, 119k
parameters, batch 64, 4 epochs x 4 minibatches of 16; ``vs_trl.prepare()`` builds them once).
Each lever compiles both variants, then times them in interleaved rounds (the first round
dropped); medians, and ``cores`` = CPU seconds over wall seconds:

* ``query_block``: teacher-forced attention in one block vs blocks of 64 queries
  (``GPT2(query_block=...)``, :func:`purejaxppo.lm.model.attend`), EOS off;
* ``stacked``: the update's policy and critic passes as two GPT-2 passes vs one pass vmapped
  over the two stacked parameter sets (patched into ``experience.heads`` here only), EOS off;
* ``early_exit``: generation with the decode loop that ends once every row has stopped vs the
  ``lax.scan`` through all ``T`` steps (the sampler of the commit before it, read with ``git
  show``), EOS on and off. ``same tokens``: both variants drew the same tokens and masks (the scan
  sampler predates the pad cut, so a row where it drew a pad differs).

    flock /tmp/purejaxppo-timing.lock python benchmarks/lm_levers.py --lever query_block [--lengths 16,64,256] [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import vs_trl  # noqa: E402
from purejaxppo.lm import experience  # noqa: E402
from purejaxppo.lm import tokens as tk  # noqa: E402
from purejaxppo.lm.config import TokenPPOConfig  # noqa: E402
from purejaxppo.lm.gpt2 import load_gpt2  # noqa: E402
from purejaxppo.lm.model import FlaxLM  # noqa: E402
from purejaxppo.lm.tasks import make_task  # noqa: E402
from purejaxppo.lm.token_ppo import make_token_ppo  # noqa: E402

SCAN_SAMPLER = "dab496f^"  # the commit whose sampler decodes all T steps by lax.scan


def _scan_sampler():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = subprocess.run(["git", "show", f"{SCAN_SAMPLER}:purejaxppo/lm/sampling.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "scan_sampling.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("scan_sampling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.sample_response


def _stacked_heads(models, params, tokens, valid):
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), params["policy"], params["critic"])
    logits, values = jax.vmap(lambda p: models.policy.forward(p, tokens, valid))(both)
    return logits[0], tk.shift_right(values[1])


def variants(lever: str, module):
    """``{name: (lm, patch)}``: ``patch()`` installs the variant's function before building."""
    lm = FlaxLM(module)
    if lever == "query_block":
        return {"one block": (FlaxLM(module.clone(query_block=0)), None),
                "blocks of 64": (FlaxLM(module.clone(query_block=64)), None)}
    if lever == "stacked":
        heads = experience.heads
        return {"separate": (lm, lambda: setattr(experience, "heads", heads)),
                "stacked": (lm, lambda: setattr(experience, "heads", _stacked_heads))}
    sample = experience.sample_response
    scan = _scan_sampler()
    return {"scan": (lm, lambda: setattr(experience, "sample_response", scan)),
            "early exit": (lm, lambda: setattr(experience, "sample_response", sample))}


def measure(lever: str, t: int, eos: bool, rounds: int) -> None:
    info = vs_trl.prepare()
    task = make_task("reverse", **vs_trl.TASK)
    module, params = load_gpt2(info["model_dir"])
    prompt = jnp.asarray(np.load(info["prompts"]), jnp.int32)[:64]
    valid = prompt != task.pad_id
    cfg = TokenPPOConfig(batch_size=64, update_epochs=4, num_minibatches=4, max_new_tokens=t,
                         stop_ids=(1,) if eos else (), pad_id=task.pad_id, actor_lr=1e-3, critic_lr=1e-3, beta=0.1)

    def reward(_, *batch):
        return task.score(*batch)

    progs, outs = {}, {}
    for name, (lm, patch) in variants(lever, module).items():
        if patch:
            patch()
        ppo = make_token_ppo(cfg, lm, reward)
        state = ppo.init(jax.random.PRNGKey(0), params, params)
        keys = jax.random.split(jax.random.PRNGKey(1), 64)
        models = experience.Models(lm, lm, lm, reward)
        gen = jax.jit(lambda p, k: experience.sample(models, p, k, prompt, valid, cfg))
        gen = gen.lower(state.train.params, keys).compile()
        it = jax.jit(ppo.iteration).lower(state, (prompt, valid)).compile()
        progs[name] = (gen, it, state, keys)
        outs[name] = jax.block_until_ready(gen(state.train.params, keys))
    a, b = list(outs.values())
    same = bool(np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2]))
    times = {(n, s): [] for n in progs for s in ("gen", "iter")}
    cpu = {n: [] for n in progs}
    for _ in range(rounds):
        for n, (gen, it, state, keys) in progs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(gen(state.train.params, keys))
            times[(n, "gen")].append(time.perf_counter() - t0)
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(it(state, (prompt, valid)))
            times[(n, "iter")].append(time.perf_counter() - t0)
            cpu[n].append(time.process_time() - c0)
    med = lambda xs: float(np.median(xs[1:]))  # noqa: E731
    length = float(np.asarray(a[2]).sum(1).mean())
    print(f"{lever} T={t} EOS {'on ' if eos else 'off'} (mean response {length:5.1f}, same tokens {same}): " + "; ".join(
        f"{n}: generation {med(times[(n, 'gen')]) * 1e3:6.1f} ms, iteration {med(times[(n, 'iter')]):.3f} s, "
        f"cores {sum(cpu[n][1:]) / sum(times[(n, 'iter')][1:]):.2f}" for n in progs) + f"  [load {vs_trl.loadavg()}]",
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lever", choices=("query_block", "stacked", "early_exit"), required=True)
    ap.add_argument("--lengths", default="16,64,256")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    for t in [int(x) for x in args.lengths.split(",")]:
        for eos in ((True, False) if args.lever == "early_exit" else (False,)):
            measure(args.lever, t, eos, args.rounds)


if __name__ == "__main__":
    main()
