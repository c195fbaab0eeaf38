"""One token-level PPO iteration at a real model's shape: ours (full fine-tune and LoRA, float32 and
bfloat16 parameters) next to TRL 1.12.0's PPOTrainer on the same model folder and prompts.

The model: a Llama-family architecture at SmolLM2-135M's shape (``--shape smollm2-135m``: hidden 576,
30 layers, 9 heads, 3 key/value heads, MLP 1536, vocabulary 49152, tied head) or Qwen2.5-0.5B's
(``qwen2.5-0.5b``), random weights (``normal(0.02)``) written once in Hugging Face layout with
:func:`purejaxppo.lm.checkpoints.pretrained.save_pretrained`; nothing is downloaded. Both sides load that folder
(ours :func:`~purejaxppo.lm.checkpoints.pretrained.load_pretrained`, TRL ``AutoModelForCausalLM``) and draw
batches from one pool of random prompts (``--prompt`` tokens, no padding). EOS off: every response
is ``--response`` tokens, so both sides do the same work. Reward: the share of even token ids in
the response (``_trl_side.EvenShare`` on TRL's side). Separate critic from the policy's weights
(TRL: the trunk with a zero ``score`` head), the frozen reference, k1 KL in the reward, Adam
(TRL: AdamW, weight decay 0), float32 compute (ours: ``--compute bfloat16`` makes bfloat16 the models'
compute dtype: matmul inputs and activations bfloat16; the logits, the attention softmax, the norms, the
values and the loss float32; TRL stays float32);
the other settings as ``vs_trl.py``'s ``HYPER``
except ``--epochs`` x ``--minibatches``.

Modes (ours), one process each so that peak RSS is that mode's alone:

* ``full``: full fine-tuning, float32 parameters (policy, critic, reference, two Adam moments each);
* ``full-bf16``: the same with every matrix kept in bfloat16 (``load_pretrained(param_dtype=bf16)``;
  norms and value head float32; Adam's moments follow the parameters' dtype), compute float32;
* ``lora``: LoRA rank ``--rank`` on every projection of policy and critic, base float32 (one copy:
  it is also the reference);
* ``lora-bf16``: the same over a bfloat16 base (read from the folder in bfloat16: no float32 copy).

Timed: the whole iteration (one compiled program: sampling with the KV cache, the teacher-forced
passes, GAE, the update), compile apart, ``--iterations`` iterations (the first reported apart);
tokens/s = batch x response / iteration s. TRL's first iteration (eager warm-up) is apart too.
Peak RSS = the process's peak resident memory (loading, compile and the iterations included);
the iterations' own peak = ``VmHWM`` over the iterations alone (after ``malloc_trim`` hands compile's
freed scratch back and ``VmHWM`` is reset): what the running program holds.

    flock /tmp/purejaxppo-cpu.lock python benchmarks/lm_135m.py --trl-python /work/trl-venv/bin/python
        [--modes full,full-bf16,lora,lora-bf16] [--iterations 2] [--json benchmarks/results/lm_135m.json]
    python benchmarks/lm_135m.py --shape qwen2.5-0.5b --skip-trl --batch 64 --response 256   # a GPU row

``--devices N``: ours data-parallel over N forced host devices (the rlhf CLI's ``--devices``; on the
2-core CPU slower than one device, benchmarks/NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vs_trl import HYPER, TRL_PYTHON, _median, _spawn, _write, loadavg, run_trl, token_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = "/tmp/purejaxppo-lm-shapes"
SHAPES = {
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        model_type="llama",
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        model_type="qwen2",
    ),
    "tiny": dict(  # a smoke size (tests)
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        model_type="llama",
    ),
}
MODES = ("full", "full-bf16", "lora", "lora-bf16")
PAD = 0


def prepare(shape: str, prompt: int, pool: int = 64, work: str = WORK) -> dict:
    """The random model in HF layout and a ``[pool, prompt]`` prompt pool (ids 3..vocab); cached."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import Llama, llama_config_from_hf, save_pretrained

    folder = os.path.join(work, shape)
    prompts = os.path.join(work, f"{shape}_prompts_{prompt}.npy")
    hf = {**SHAPES[shape], "head_dim": SHAPES[shape]["hidden_size"] // SHAPES[shape]["num_attention_heads"]}
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        module = Llama(llama_config_from_hf(hf))
        params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
        save_pretrained(folder, module, params)
    if not os.path.exists(prompts):
        rng = np.random.default_rng(2)
        np.save(prompts, rng.integers(3, hf["vocab_size"], (pool, prompt)).astype(np.int64))
    return {"model_dir": folder, "prompts": prompts, "shape": hf}


def _ours(spec: dict) -> dict:
    """One mode's compile and iterations (a worker process)."""
    devices = int(spec.get("devices", 1))
    if devices > 1:  # host CPU devices must exist before jax starts its backend
        from purejaxppo.cli.devices import set_devices

        set_devices(devices)
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import load_pretrained, make_token_ppo

    mode, t0 = spec["mode"], time.perf_counter()
    # LoRA over a bfloat16 base reads the base in bfloat16 (no float32 copy is ever made)
    param_dtype = jnp.bfloat16 if mode in ("full-bf16", "lora-bf16") else jnp.float32
    lm, params = load_pretrained(
        spec["model_dir"], dtype=jnp.dtype(spec.get("compute", "float32")), param_dtype=param_dtype
    )
    layers_as = spec.get("layers_as", "default")
    if layers_as != "default":
        lm = type(lm)(lm.model.clone(scan_layers=layers_as != "unrolled", remat_layers=layers_as == "remat"))
    n_params = int(sum(x.size for x in jax.tree.leaves(params)))
    load_s = time.perf_counter() - t0
    pool = jnp.asarray(np.load(spec["prompts"]), jnp.int32)

    def prompts(key, b):
        idx = jax.random.choice(key, pool.shape[0], (b,), replace=False)
        return pool[idx], pool[idx] != PAD

    def reward(_, p, pv, r, m):  # the share of even token ids among the response's valid tokens
        return jnp.sum((r % 2 == 0) & m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1)

    lora = mode.startswith("lora")
    lora_fields = dict(
        lora_rank=spec["rank"],
        lora_alpha=2.0 * spec["rank"],
        lora_base_dtype="bfloat16" if "bf16" in mode else "float32",
    )
    cfg = token_config(
        spec,
        stop_ids=(),
        pad_id=PAD,
        missing_eos_penalty=0.0,
        micro_batches=spec.get("micro_batches", 1),
        length_buckets=spec.get("length_buckets", 16),
        **(lora_fields if lora else {}),
    )
    if devices == 1:
        tp = make_token_ppo(cfg, lm, reward, prompts=prompts)
    else:  # the rlhf CLI's --devices layout: each device samples and scores B / D prompts
        from purejaxppo.lm import data_parallel

        tp = data_parallel(functools.partial(make_token_ppo, cfg, lm, reward, prompts=prompts), devices)
    init = jax.jit(lambda k, p: tp.init(k, p, None if lora else p))
    state = init(jax.random.PRNGKey(spec["seed"]), params)
    del params  # the state holds what the run needs
    marks = {"after_init": _hwm_mb()}
    t0 = time.perf_counter()
    compiled = jax.jit(tp.iteration, donate_argnums=0).lower(state).compile(spec.get("compile_options") or None)
    compile_s = time.perf_counter() - t0
    marks["after_compile"] = _hwm_mb()
    mem = compiled.memory_analysis()
    gen_times = []
    if spec.get("split"):  # generation alone (the policy's KV-cache sampler on the state's params)
        from purejaxppo.lm import Models, sample_experience, trained_params

        models = Models(lm, lm, lm, reward)
        batch = prompts(jax.random.PRNGKey(5), cfg.batch_size)
        keys = jax.random.split(jax.random.PRNGKey(6), cfg.batch_size)
        gen = jax.jit(
            lambda s, k: sample_experience(models, trained_params(s.train.params, s.reference, models), k, *batch, cfg)
        )
        gen = gen.lower(state, keys).compile()
        for _ in range(2):
            t0 = time.perf_counter()
            jax.block_until_ready(gen(state, keys))
            gen_times.append(time.perf_counter() - t0)
        marks["after_generation"] = _hwm_mb()
    times, cpu = [], []
    _reset_hwm()  # from here VmHWM is the iterations' own peak (compile and loading apart)
    for _ in range(spec["iterations"]):
        t0, c0 = time.perf_counter(), time.process_time()
        state, m = compiled(state)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    from purejaxppo.lm import count_params

    return {
        "side": "ours",
        "mode": mode,
        "jax": jax.__version__,
        "params": n_params,
        "trainable": count_params(state.train.params),
        "load_s": load_s,
        "compile_s": compile_s,
        "times": times,
        "cores": [c / t for c, t in zip(cpu, times)],
        "state_MiB": sum(x.nbytes for x in jax.tree.leaves(state)) / 2**20,
        "xla_arguments_MiB": mem.argument_size_in_bytes / 2**20 if mem else None,
        "xla_temp_MiB": mem.temp_size_in_bytes / 2**20 if mem else None,
        # the whole process's peak: the marks hold it up to the reset after compile
        "peak_rss_mb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, *marks.values()),
        "peak_rss_marks_mb": marks,
        "iterations_peak_rss_mb": _hwm_mb(),  # VmHWM reset after compile: the running program's peak  # the process's peak so far: after init, after compile (, after generation)
        "generation_s": gen_times,
        "score": float(m["score"]),
        "kl": float(m["kl"]),
    }


def _hwm_mb() -> float:
    """The process's peak resident memory so far (``VmHWM``), MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def _reset_hwm() -> None:
    """Hand the allocator's free pages back (``malloc_trim``: compile's scratch memory stays
    resident otherwise), then reset the process's ``VmHWM`` to its current RSS (Linux: ``5``
    into ``clear_refs``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _summary(side: dict, b: int, t: int) -> dict:
    if side["side"] == "trl":
        times = [r["iteration_s"] for r in side["rows"]]
        first = times[0]
    else:
        times, first = side["times"], side["compile_s"]
    timed = times[1:] or times  # the first iteration warms up
    it = _median(timed)
    return {
        "first_s": first,
        "iteration_s": it,
        "tokens_per_s": b * t / it,
        "peak_rss_mb": side["peak_rss_mb"],
        "iterations_peak_rss_mb": side.get("iterations_peak_rss_mb"),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"ours: a comma list of {', '.join(MODES)}, each optionally :float32 or :bfloat16 (its compute dtype; "
        "default --compute)",
    )
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1, help="PPO epochs per iteration")
    ap.add_argument("--minibatches", type=int, default=2, help="minibatches per epoch")
    ap.add_argument(
        "--micro-batches", type=int, default=1, help="ours: each minibatch in N accumulated passes (same update)"
    )
    ap.add_argument(
        "--devices", type=int, default=1, help="ours: data-parallel over N host devices (the rlhf CLI's --devices)"
    )
    ap.add_argument(
        "--length-buckets", type=int, default=16, help="ours: the sampler's smallest cache rung (0: one cache width)"
    )
    ap.add_argument(
        "--xla-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="ours: an XLA compiler option for the iteration's program (repeatable)",
    )
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha = 2 x rank)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--iterations", type=int, default=2, help="per side (the first is reported apart)")
    ap.add_argument("--trl-python", default=TRL_PYTHON, help="the TRL venv's python")
    ap.add_argument("--trl-threads", type=int, default=2)
    ap.add_argument("--skip-trl", action="store_true", help="ours alone (e.g. on a GPU)")
    ap.add_argument("--compute", choices=("float32", "bfloat16"), default="float32", help="ours: the compute dtype")
    ap.add_argument("--split", action="store_true", help="ours: also time generation alone (its own program)")
    ap.add_argument(
        "--layers-as",
        choices=("default", "unrolled", "scan", "remat"),
        default="default",
        help="ours: the trunk's layers unrolled, under one lax.scan, or scanned with remat (default: Llama's)",
    )
    ap.add_argument("--json", default=os.path.join(HERE, "results", "lm_135m.json"))
    ap.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        with open(args.worker[0]) as f:
            spec = json.load(f)
        with open(args.worker[1], "w") as f:
            json.dump({**_ours(spec), "spec": spec}, f)
        return {}
    modes = [m for m in args.modes.split(",") if m]
    computes = {m: m.partition(":")[2] or args.compute for m in modes}
    bad = [m for m in modes if m.partition(":")[0] not in MODES or computes[m] not in ("float32", "bfloat16")]
    if bad:
        print(
            f"error: --modes {args.modes}: {bad[0]!r} is not one of {', '.join(MODES)} "
            "(optionally :float32 or :bfloat16)",
            file=sys.stderr,
        )
        sys.exit(2)
    if not args.skip_trl and not os.path.exists(args.trl_python):
        print(f"error: --trl-python {args.trl_python} does not exist (install: vs_trl.py's docstring)", file=sys.stderr)
        sys.exit(2)
    info = prepare(args.shape, args.prompt)
    from _common import hardware

    spec = {
        **HYPER,
        **info,
        "batch_size": args.batch,
        "update_epochs": args.epochs,
        "num_minibatches": args.minibatches,
        "micro_batches": args.micro_batches,
        "devices": args.devices,
        "length_buckets": args.length_buckets,
        "compile_options": dict(o.split("=", 1) for o in args.xla_option),
        "response_length": args.response,
        "lr": args.lr,
        "missing_eos_penalty": 0.0,
        "rank": args.rank,
        "iterations": args.iterations,
        "stop": None,
        "beta": 0.05,
        "seed": 0,
        "reward": "even",
        "threads": args.trl_threads,
        "split": args.split,
        "compute": args.compute,
        "layers_as": args.layers_as,
    }
    res = {
        "benchmark": "lm_135m",
        "hardware": hardware(),
        "command": "python benchmarks/lm_135m.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "spec": spec,
        "rows": {},
    }
    b, t = args.batch, args.response
    script = [os.path.abspath(__file__), "--worker"]
    for mode in modes:
        run = {**spec, "mode": mode.partition(":")[0], "compute": computes[mode]}
        out = _spawn(sys.executable, script, run, f"{args.shape}_{mode.replace(':', '_')}", 7200)
        res["rows"][mode] = {**_summary(out, b, t), "raw": out}
        r = res["rows"][mode]
        print(
            f"ours {mode:>9}: compile {r['first_s']:.1f}s, {r['iteration_s']:.2f}s/iteration "
            f"({r['tokens_per_s']:.1f} tok/s), peak RSS {r['peak_rss_mb']:.0f} MB, "
            f"XLA temp {out['xla_temp_MiB'] or 0:.0f} MiB, peak after init / compile {out['peak_rss_marks_mb']}, "
            f"iterations' own peak {out['iterations_peak_rss_mb']:.0f} MB, "
            f"generation alone {[round(x, 2) for x in out['generation_s']]} s; load {loadavg()}",
            flush=True,
        )
        _write(args.json, res)
    if not args.skip_trl:
        out = run_trl(args.trl_python, spec, f"{args.shape}_trl", 7200)
        res["rows"]["trl"] = {**_summary(out, b, t), "raw": out}
        r = res["rows"]["trl"]
        print(
            f"TRL {out.get('trl')}: first iteration {r['first_s']:.1f}s, {r['iteration_s']:.2f}s/iteration "
            f"({r['tokens_per_s']:.1f} tok/s), peak RSS {r['peak_rss_mb']:.0f} MB; load {loadavg()}",
            flush=True,
        )
    rows = res["rows"]
    # the memory baseline: full fine-tuning in float32 compute (else the first full row)
    fulls = [m for m in modes if m.partition(":")[0] == "full"]
    base = next((m for m in fulls if computes[m] == "float32"), fulls[0] if fulls else None)
    res["memory_baseline"] = base
    full = rows[base]["peak_rss_mb"] if base else None
    for mode, r in rows.items():
        if "trl" in rows and mode != "trl":
            r["ratio_vs_trl"] = r["tokens_per_s"] / rows["trl"]["tokens_per_s"]
        if full and mode != "trl":
            r["peak_vs_full"] = r["peak_rss_mb"] / full
            own = rows[base].get("iterations_peak_rss_mb")
            if own and r.get("iterations_peak_rss_mb"):
                r["iterations_peak_vs_full"] = r["iterations_peak_rss_mb"] / own
    print(
        f"\n{args.shape}: batch {b}, prompt {args.prompt}, response {t}; /full: against {base}; load at end {loadavg()}"
    )
    head = f"{'side':>18} {'first s':>8} {'iter s':>8} {'tok/s':>8} {'xTRL':>6} {'peak MB':>8} {'/full':>6}"
    print(head + f" {'iter peak MB':>12} {'/full':>6}")
    nan = float("nan")
    for mode, r in rows.items():
        print(
            f"{mode:>18} {r['first_s']:8.1f} {r['iteration_s']:8.2f} {r['tokens_per_s']:8.1f} "
            f"{r.get('ratio_vs_trl', nan):6.2f} {r['peak_rss_mb']:8.0f} {r.get('peak_vs_full', nan):6.2f} "
            f"{r.get('iterations_peak_rss_mb') or nan:12.0f} {r.get('iterations_peak_vs_full', nan):6.2f}"
        )
    res["loadavg_end"] = loadavg()
    _write(args.json, res)
    return res


if __name__ == "__main__":
    main()
