"""The update of ``vs_trl.py``'s fixed-length row (T = 256, EOS off) alone, and levers on it, A/B.

``vs_trl.py``'s setup (its SFT GPT-2, prompts and hyperparameters: batch 64, 4 epochs x 4 minibatches
of 16 sequences of 263 slots, separate critic): one experience batch is sampled and scored once, then
``TokenPPO.update`` (the iteration's update stage, the library's own function) is compiled per
variant and timed on the same batch, the variants' rounds interleaved (medians of the rounds after
the first). The phases of the baseline iteration (generation, scoring, update) are timed the same
way first (``--phases``). Variants (``--levers``):

* ``base``: the library as is;
* ``micro2`` / ``micro4``: ``micro_batches=2`` / ``4`` (each minibatch of 16 in passes of 8 / 4
  sequences, gradients accumulated: the same update to float rounding);
* ``bf16``: the GPT-2's compute dtype bfloat16 (matmuls in bf16; parameters, softmax, loss float32);
* ``remat``: every teacher-forced pass under ``jax.checkpoint`` (activations recomputed in the
  backward pass instead of kept);
* ``one_softmax``: ``filtered_logprobs`` reading the token log-probs out of the one
  ``log_softmax`` it computes for the entropy (the library computes ``log_softmax`` twice: once in
  ``tokens.token_logprobs``, once for the entropy) -- patched in for the measurement;
* ``qb32`` / ``qb128``: teacher-forced attention in query blocks of 32 / 128 (the default is 64).

    flock /tmp/purejaxppo-cpu.lock python benchmarks/lm_update_levers.py [--levers base,micro2,bf16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LEVERS = ("base", "micro2", "micro4", "bf16", "remat", "one_softmax", "qb32", "qb128")


def one_softmax_logprobs(logits, tokens, cfg):
    """``filtered_logprobs`` with ONE ``log_softmax``: the token log-probs gathered
    from the array the entropy reads (the same numbers to float rounding)."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import filter_logits, shift_right

    x = filter_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p, cfg.pad_id)
    logp_all = jax.nn.log_softmax(x, axis=-1)
    finite = jnp.isfinite(logp_all)
    plogp = jnp.where(finite, jnp.exp(logp_all) * jnp.where(finite, logp_all, 0.0), 0.0)
    picked = jnp.take_along_axis(logp_all[:, :-1], tokens[:, 1:, None].astype(jnp.int32), axis=-1)[..., 0]
    logp = jnp.concatenate([jnp.zeros_like(picked[:, :1]), picked], axis=1)
    return logp, shift_right(-jnp.sum(plogp, axis=-1))


@dataclasses.dataclass(frozen=True)
class Remat:
    """A CausalLM whose teacher-forced passes run under ``jax.checkpoint``."""

    lm: object

    def logits(self, params, tokens, valid):
        import jax

        return jax.checkpoint(self.lm.logits)(params, tokens, valid)

    def values(self, params, tokens, valid):
        import jax

        return jax.checkpoint(self.lm.values)(params, tokens, valid)

    def forward(self, params, tokens, valid):
        import jax

        return jax.checkpoint(self.lm.forward)(params, tokens, valid)

    def __getattr__(self, name):  # prefill, decode, model
        return getattr(self.lm, name)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levers", default=",".join(LEVERS), help=f"a comma list of {', '.join(LEVERS)}")
    ap.add_argument("--length", type=int, default=256, help="the response length T (EOS off)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phases", action="store_true", help="first time the baseline's generation / scoring / update")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    levers = [x for x in args.levers.split(",") if x]
    bad = [x for x in levers if x not in LEVERS]
    if bad:
        print(f"error: --levers {args.levers}: {bad[0]!r} is not one of {', '.join(LEVERS)}", file=sys.stderr)
        sys.exit(2)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from _common import hardware, loadavg_now
    from purejaxppo.lm import (
        filtered_logprobs,
        finish_experience,
        FlaxLM,
        load_gpt2,
        make_task,
        make_token_ppo,
        Models,
        sample_experience,
        score_experience,
        TokenPPOConfig,
    )
    from vs_trl import HYPER, TASK, _median, prepare

    info = prepare()
    task = make_task("reverse", **TASK)
    module, params = load_gpt2(info["model_dir"])
    pool = jnp.asarray(np.load(info["prompts"]), jnp.int32)
    prompt = pool[: HYPER["batch_size"]]
    valid = prompt != task.pad_id

    def reward(_, *batch):
        return task.score(*batch)

    keys = ("batch_size", "update_epochs", "num_minibatches", "max_grad_norm", "adam_eps", "clip_eps")
    cfg = TokenPPOConfig(
        **{k: HYPER[k] for k in keys},
        actor_lr=HYPER["lr"],
        critic_lr=HYPER["lr"],
        vf_clip_eps=HYPER["vf_clip_eps"],
        vf_coef=HYPER["vf_coef"],
        gae_lambda=HYPER["gae_lambda"],
        max_new_tokens=args.length,
        stop_ids=(),
        pad_id=task.pad_id,
        beta=0.1,
    )
    base_lm = FlaxLM(module)
    tp = make_token_ppo(cfg, base_lm, reward)
    state = tp.init(jax.random.PRNGKey(0), params, params)
    models = Models(base_lm, base_lm, base_lm, reward)
    row_keys = jax.random.split(jax.random.PRNGKey(1), cfg.batch_size)
    gen = jax.jit(lambda p, k: sample_experience(models, p, k, prompt, valid, cfg))
    score = jax.jit(
        lambda p, ref, resp: finish_experience(
            score_experience(models, p, ref, None, prompt, valid, *resp, cfg), state.beta, cfg
        )[0]
    )
    resp = jax.block_until_ready(gen(state.train.params, row_keys))
    data = jax.block_until_ready(score(state.train.params, state.reference, resp))
    key = jax.random.PRNGKey(2)
    out = {
        "hardware": hardware(),
        "T": args.length,
        "command": "python benchmarks/lm_update_levers.py " + " ".join(argv or sys.argv[1:]),
    }

    def timed(fn, *a):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*a))
        return time.perf_counter() - t0

    if args.phases:
        progs = {
            "generation": (gen, (state.train.params, row_keys)),
            "scoring": (score, (state.train.params, state.reference, resp)),
            "update": (jax.jit(tp.update), (state.train, data, key)),
            "iteration": (jax.jit(tp.iteration), (state, (prompt, valid))),
        }
        runs = {k: [] for k in progs}
        for _ in range(args.rounds):
            for k, (fn, a) in progs.items():
                runs[k].append(timed(fn, *a))
        out["phases"] = {k: _median(v[1:]) for k, v in runs.items()}
        print(
            "phases (medians):", {k: round(v, 3) for k, v in out["phases"].items()}, "load", loadavg_now(), flush=True
        )

    def variant(name):
        lm, c = base_lm, cfg
        if name in ("micro2", "micro4"):
            c = dataclasses.replace(cfg, micro_batches=int(name[5:]))
        elif name == "bf16":
            lm = FlaxLM(module.clone(dtype=jnp.bfloat16))
        elif name == "remat":
            lm = Remat(base_lm)
        elif name in ("qb32", "qb128"):
            lm = FlaxLM(module.clone(query_block=int(name[2:])))
        return make_token_ppo(c, lm, reward).update

    exes, compile_s = {}, {}
    for name in levers:
        if (
            name == "one_softmax"
        ):  # patched while tracing (where the iteration looks it up): the compiled program keeps it
            home = sys.modules[filtered_logprobs.__module__]
            orig, home.filtered_logprobs = home.filtered_logprobs, one_softmax_logprobs
        try:
            t0 = time.perf_counter()
            exes[name] = jax.jit(variant(name)).lower(state.train, data, key).compile()
            compile_s[name] = time.perf_counter() - t0
        finally:
            if name == "one_softmax":
                home.filtered_logprobs = orig
    results = {k: [] for k in exes}
    finals = {}
    for _ in range(args.rounds):
        for name, exe in exes.items():
            results[name].append(timed(exe, state.train, data, key))
    for name, exe in exes.items():
        train, _ = exe(state.train, data, key)  # a checksum of the updated parameters (equal to rounding)
        finals[name] = float(
            sum(jnp.sum(jnp.abs(x - y)) for x, y in zip(*map(jax.tree.leaves, (train.params, state.train.params))))
        )
    out["levers"] = {
        k: {"update_s": _median(v[1:]), "times": v, "compile_s": compile_s[k], "param_change_l1": finals[k]}
        for k, v in results.items()
    }
    out["loadavg_after"] = loadavg_now()
    base = out["levers"].get("base", {}).get("update_s")
    print(f"T={args.length}: update alone, medians of {args.rounds - 1} rounds (load after {out['loadavg_after']})")
    for k, r in out["levers"].items():
        rel = f"{base / r['update_s']:.2f}x base" if base else ""
        print(
            f"{k:>12}: {r['update_s']:.3f} s  compile {r['compile_s']:.1f} s  |dparams|_1 {r['param_change_l1']:.6g}  {rel}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
