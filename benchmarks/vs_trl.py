"""Token-level PPO side by side with TRL 1.12.0's PPOTrainer: same model, weights, prompts, hyperparameters.

One-time install of the TRL side (its own virtual environment, never a project dependency; the
CPU build of torch 2.13.0 first, so that trl's requirements do not pull a CUDA build)::

    python3 -m venv /tmp/trl-venv && /tmp/trl-venv/bin/pip install torch==2.13.0 && /tmp/trl-venv/bin/pip install trl==1.12.0

(``torch==2.13.0+cpu`` where the index holds the CPU build under that name; trl 1.12.0 then pulled
transformers 5.24.0, accelerate 1.16.0 and datasets 5.2.0 on 2026-12-03, the versions of the
``lm_135m.py`` and cap-1024 rows).

Then (the lock keeps timings from overlapping with other benchmark runs on a shared machine)::

    flock /tmp/purejaxppo-timing.lock python benchmarks/vs_trl.py [--trl-python /tmp/trl-venv/bin/python]
        [--lengths 16,64,256] [--iterations 4] [--learning-iterations 20] [--betas 0.03,0.1,0.3] [--seeds 3]
        [--budget-s 2400] [--json benchmarks/results/vs_trl.json]

What is compared. The reverse task (``make_task("reverse", max_len=6, max_new=8)``, the CLI's preset,
prompts of 3..7 tokens left-padded to 7), a GPT-2-architecture model (vocab 13, n_embd 64, 2 layers,
2 heads, 288 positions; :class:`purejaxppo.lm.models.gpt2.GPT2`) after our SFT (40 steps), written in HF
layout with :func:`purejaxppo.lm.checkpoints.gpt2_hf.save_gpt2` and read by both sides (``transformers``'
``GPT2LMHeadModel`` / ``GPT2Model`` on TRL's). Both draw prompts from the same pool. Policy, frozen
reference and a separate critic (from the SFT trunk, zero value head) on both sides; the reward is
the task's exact-match score (TRL: a small ``nn.Module`` with a ``score`` head,
``benchmarks/_trl_side.py``). Each side runs in its own process (peak RSS is that process's).

Hyperparameters (ours = the ``rlhf`` CLI's defaults; TRL's set to them): batch 64, 4 epochs x 4
minibatches of 16, Adam lr 1e-3 constant (TRL: ``lr_scheduler_type="constant"``, default linear decay;
one AdamW over policy+value, weight decay 0), eps 1e-8, temperature 1.0 (TRL default 0.7), k1 KL
in the reward, beta as given (TRL ``kl_coef``, default 0.05), clip 0.2, value clip 0.2, vf_coef 0.5
(TRL default 0.1; both losses are 0.5 * squared error), gamma 1, lambda 0.95, advantages whitened,
token-mean losses, missing-EOS penalty 1.0 (TRL default None), float32 (TRL default bf16), no
gradient checkpointing (TRL default on), no entropy bonus, EOS = token 1.

Not matchable (TRL's code fixes them):
* score placement: TRL adds the score at the first PAD slot after EOS (``sequence_length + 1``;
  the value there is trained too); ours puts it on the last valid response token (the EOS);
* gradient clipping: PPOTrainer never clips (``max_grad_norm`` is unused); ours clips each network
  at 1.0;
* one optimizer: TRL has one AdamW over policy and value; ours has an Adam each (same lr here);
* response end: TRL ends a response at the first PAD token as well as at EOS (``sequence_length`` =
  first PAD - 1), and its sampler can draw PAD (token 0; about 1.6% of the SFT model's samples held
  one); ours never samples PAD (the sampler cuts its logit, and the old, new and reference log-probs
  renormalise without it) and ends a response at EOS;
* generation: both stop once every row has produced EOS (ours keeps the ``[B, T]`` shapes, masked
  after EOS, and its scoring and update still run over all ``T`` slots; TRL's batch is cut to the
  longest response). The throughput rows turn EOS off on both sides (every response is exactly ``T``
  tokens, ``stop_token_id=None`` / ``stop_ids=()``) so the work is the same; ``--eos`` keeps it on;
* old log-probs: TRL's from the sampler's logits, ours from a teacher-forced pass (equal to float
  rounding, ``logp_mismatch`` about 1e-6);
* the prompt order: both draw batches from one pool of prompts, each with its own shuffling.

What is timed. Throughput rows (``--lengths``): ``--iterations`` iterations per side; ours compiles
first (reported apart), TRL's first iteration (eager warm-up) is reported apart too; the iteration
time is the median of the rest. The split: TRL's by hooks around ``batch_generation`` and the
first forward of the update (scoring = reference, value and reward passes, rewards and GAE); ours
by three separately compiled programs on the same inputs: sampling alone, sampling + scoring (+
GAE), the whole iteration (scoring = second - first, update = third - second). Throughput = tokens
generated and trained per second: ``batch x T / iteration time`` (every response token is
generated once and trained over 4 epochs); ``best s`` is the fastest timed iteration, ``cores`` the
process's CPU seconds (all threads) over wall seconds across the timed iterations. Learning rows: ``--learning-iterations`` iterations at
``T = 16`` with EOS on, per beta and seed: the raw task score (no EOS penalty) and the KL per sequence
(k1) of each iteration's samples; ours runs all betas and seeds vmapped in one program.
torch runs with ``torch.set_num_threads(2)`` (``--trl-threads``; on a loaded 2-core machine one thread
was 4-5x faster at T = 16 and 64, see benchmarks/README.md); XLA uses the machine's 2 cores.

``--ours-only small`` times our side alone on a random-init GPT-2 small (124M parameters), random
32-token prompts, EOS off, per device layout (``--layouts single,data-parallel,fsdp``): the rows of
``benchmarks/gpu_figures.sh`` (each JSON names ``device_kind``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = "/tmp/purejaxppo-vs-trl"
MODEL = dict(n_embd=64, n_layer=2, n_head=2, n_positions=288)
TASK = dict(max_len=6, max_new=8)
SFT_STEPS, POOL = 40, 4096
HYPER = dict(
    batch_size=64,
    update_epochs=4,
    num_minibatches=4,
    lr=1e-3,
    adam_eps=1e-8,
    max_grad_norm=1.0,
    temperature=1.0,
    clip_eps=0.2,
    vf_clip_eps=0.2,
    vf_coef=0.5,
    gamma=1.0,
    gae_lambda=0.95,
    missing_eos_penalty=1.0,
)
TRL_PYTHON = "/tmp/trl-venv/bin/python"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- the shared inputs -----------------------------------------------------------------------
def prepare(work: str = WORK, model: dict = MODEL) -> dict:
    """SFT the GPT-2 (``model``: its sizes) on the reverse task and write it (HF layout) and a
    prompt pool into ``work``; cached."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import evaluate_policy, FlaxLM, GPT2, make_task, save_gpt2, train_sft

    model_dir, prompts = os.path.join(work, "sft_gpt2"), os.path.join(work, "prompts.npy")
    info_path = os.path.join(work, "sft.json")
    if os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        if info.get("model") == model and info.get("task") == TASK and info.get("sft_steps") == SFT_STEPS:
            return info
    task = make_task("reverse", **TASK)
    module = GPT2(vocab_size=task.vocab_size, **model)
    lm = FlaxLM(module)
    n = task.prompt_len + task.max_new
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, n), jnp.int32), jnp.ones((1, n), bool))
    t0 = time.perf_counter()
    params, _ = train_sft(lm, params, task, jax.random.PRNGKey(1), steps=SFT_STEPS, batch=64)
    ev_greedy = evaluate_policy(lm, params, task, jax.random.PRNGKey(7), 1024, greedy=True)
    ev_sampled = evaluate_policy(lm, params, task, jax.random.PRNGKey(7), 1024, greedy=False)
    save_gpt2(model_dir, module, params)
    pool, _ = task.prompts(jax.random.PRNGKey(2), POOL)
    os.makedirs(work, exist_ok=True)
    np.save(prompts, np.asarray(pool, np.int64))
    info = {
        "model": model,
        "task": TASK,
        "sft_steps": SFT_STEPS,
        "model_dir": model_dir,
        "prompts": prompts,
        "sft_s": time.perf_counter() - t0,
        "params": int(sum(x.size for x in jax.tree.leaves(params))),
        "sft_greedy": {k: float(v) for k, v in ev_greedy.items()},
        "sft_sampled": {k: float(v) for k, v in ev_sampled.items()},
    }
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    return info


# --- our side (a worker process) -------------------------------------------------------------
def _split_programs(cfg, models, devices: int):
    """``(gen, gen_score)``: sampling alone and sampling + scoring + GAE on a state and a prompt
    batch, laid out as ``ppo.iteration`` is: over ``devices`` (each samples and scores its share
    of the rows with the row keys one device would use, then the rows are gathered)."""
    import jax

    from purejaxppo.lm import collect_experience, DATA_AXIS as AXIS, finish_experience, prompt_mesh, sample_experience

    def rows(state, batch, share):
        keys = jax.random.split(state.key, cfg.batch_size)
        return share((keys, *batch))

    def gen_part(state, batch, share=lambda x: x):
        keys, prompt, valid = rows(state, batch, share)
        return sample_experience(models, state.train.params, keys, prompt, valid, cfg)

    def score_part(state, batch, share=lambda x: x, gather=lambda x: x):
        keys, prompt, valid = rows(state, batch, share)
        exp = collect_experience(models, state.train.params, state.reference, state.reward, keys, prompt, valid, cfg)
        return finish_experience(gather(exp), state.beta, cfg)

    if devices == 1:
        return gen_part, score_part
    n = cfg.batch_size // devices

    def share(tree):
        i = jax.lax.axis_index(AXIS)
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * n, n, 0), tree)

    def gather(tree):
        return jax.tree.map(lambda x: jax.lax.all_gather(x, AXIS, axis=0, tiled=True), tree)

    mesh, rep = prompt_mesh(devices), jax.sharding.PartitionSpec()
    gen = jax.shard_map(
        lambda s, b: gather(gen_part(s, b, share)), mesh=mesh, in_specs=(rep, rep), out_specs=rep, check_vma=False
    )
    gen_score = jax.shard_map(
        lambda s, b: score_part(s, b, share, gather), mesh=mesh, in_specs=(rep, rep), out_specs=rep, check_vma=False
    )
    return gen, gen_score


def token_config(h: dict, **fields):
    """Our ``TokenPPOConfig`` for the hyperparameters both sides share (``h``: a spec with HYPER's
    keys and the batch shape), plus this row's own ``fields`` (stop ids, pad id, LoRA, ...)."""
    from purejaxppo.lm import TokenPPOConfig

    return TokenPPOConfig(
        batch_size=h["batch_size"],
        update_epochs=h["update_epochs"],
        num_minibatches=h["num_minibatches"],
        max_new_tokens=h["response_length"],
        actor_lr=h["lr"],
        critic_lr=h["lr"],
        max_grad_norm=h["max_grad_norm"],
        adam_eps=h["adam_eps"],
        clip_eps=h["clip_eps"],
        vf_clip_eps=h["vf_clip_eps"],
        vf_coef=h["vf_coef"],
        gamma=h["gamma"],
        gae_lambda=h["gae_lambda"],
        beta=h["beta"],
        temperature=h["temperature"],
        **fields,
    )


def _ours(spec: dict) -> dict:
    devices = int(spec.get("devices", 1))
    if devices > 1:  # host CPU devices must exist before jax starts its backend
        from purejaxppo.cli.devices import set_devices

        set_devices(devices)
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxppo.lm import FlaxLM, load_gpt2, make_task, make_token_ppo, Models

    task = make_task("reverse", **TASK)
    module, params = load_gpt2(spec["model_dir"])
    lm = FlaxLM(module)
    pool = jnp.asarray(np.load(spec["prompts"]), jnp.int32)
    pool_valid = pool != task.pad_id

    def prompts(key, b):
        idx = jax.random.choice(key, pool.shape[0], (b,), replace=False)
        return pool[idx], pool_valid[idx]

    def reward(_, *batch):
        return task.score(*batch)

    stop = () if spec["stop"] is None else (spec["stop"],)
    cfg = token_config(
        spec,
        num_iterations=spec["iterations"],
        stop_ids=stop,
        pad_id=task.pad_id,
        missing_eos_penalty=spec["missing_eos_penalty"],
        micro_batches=spec.get("micro_batches", 1),
    )
    if spec["mode"] == "learning":  # the members vmapped over "runs" agree on one response width (length_buckets)
        ppo = make_token_ppo(cfg, lm, reward, prompts=prompts, runs_axis="runs")
    elif devices == 1:
        ppo = make_token_ppo(cfg, lm, reward, prompts=prompts)
    else:  # throughput rows over several devices: the prompts split, the update's minibatches too
        from purejaxppo.lm import data_parallel

        ppo = data_parallel(functools.partial(make_token_ppo, cfg, lm, reward, prompts=prompts), devices)
    rss_before = _rss_mb()
    out = {
        "side": "ours",
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "rss_before_mb": rss_before,
        "params": int(sum(x.size for x in jax.tree.leaves(params))),
    }
    if spec["mode"] == "learning":
        betas, seeds = spec["betas"], spec["seeds"]
        members = [(b, s) for b in betas for s in seeds]
        cfgs = jax.tree.map(lambda *x: jnp.stack(x), *[cfg.replace(beta=b) for b, _ in members])
        keys = jnp.stack([jax.random.PRNGKey(s) for _, s in members])
        run = jax.jit(jax.vmap(lambda k, c: ppo.train(k, params, params, None, None, c)[1], axis_name="runs"))
        t0 = time.perf_counter()
        exe = run.lower(keys, cfgs).compile()
        out["compile_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        metrics = jax.block_until_ready(exe(keys, cfgs))
        out["run_s"] = time.perf_counter() - t0
        out["runs"] = [
            {
                "beta": b,
                "seed": s,
                "score": np.asarray(metrics["score"][i]).tolist(),
                "kl": np.asarray(metrics["kl"][i]).tolist(),
            }
            for i, (b, s) in enumerate(members)
        ]
    else:
        models = Models(lm, lm, lm, reward)
        state = ppo.init(jax.random.PRNGKey(spec["seed"]), params, params)
        batch = prompts(jax.random.PRNGKey(3), cfg.batch_size)
        gen, gen_score = _split_programs(cfg, models, devices if spec["mode"] != "learning" else 1)
        out["devices"] = jax.device_count() if devices > 1 else 1
        progs, compile_s = {}, {}
        for name, fn in (("gen", gen), ("gen_score", gen_score), ("iteration", ppo.iteration)):
            t0 = time.perf_counter()
            progs[name] = jax.jit(fn).lower(state, batch).compile()
            compile_s[name] = time.perf_counter() - t0
        out["compile_s"] = compile_s
        times = {k: [] for k in progs}
        cpu = {k: [] for k in progs}  # process CPU seconds (all threads): cores used = cpu / wall
        rows = []

        def timed(name, *args):
            t0, c0 = time.perf_counter(), time.process_time()
            result = jax.block_until_ready(progs[name](*args))
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            return result

        # the iterations back to back, as TRL's run (the first warms up); the split apart after
        # them: run between iterations, the unbucketed gen_score (all P + T slots) evicted the
        # iteration's caches and made its allocator fault in fresh pages (cap 1024: 0.16 s
        # instead of 0.11 s, benchmarks/NOTES.md)
        for _ in range(spec["iterations"]):
            state, m = timed("iteration", state, batch)
            rows.append(
                {"score": float(m["score"]), "kl": float(m["kl"]), "response_length": float(m["response_length"])}
            )
        for _ in range(spec["iterations"]):
            for name in ("gen", "gen_score"):
                timed(name, state, batch)
        out["times"], out["cpu"] = times, cpu
        out["rows"] = rows
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# --- our side alone at scale (benchmarks/gpu_figures.sh) ---------------------------------------
SIZES = {
    "small": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),  # GPT-2 small
    "tiny": dict(vocab_size=64, n_positions=320, n_embd=32, n_layer=2, n_head=2),
}  # a CPU smoke size


def scale_rows(size: str, lengths, batch: int, layouts, iterations: int, bf16: bool) -> dict:
    """Our token PPO alone on a random-init GPT-2 of ``size``, random prompts of 32 tokens, EOS off
    (every response ``T`` tokens), per layout: ``single`` (one device), ``data-parallel`` (prompts
    split over every visible device, :func:`purejaxppo.lm.ppo.data_parallel.data_parallel`), ``fsdp``
    (parameters and optimizer state split over them, ``fsdp_sharding``). Compile apart; tokens
    generated and trained per second from the median of ``iterations - 1`` timed iterations."""
    import functools

    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import data_parallel, FlaxLM, fsdp_sharding, GPT2, make_token_ppo, prompt_mesh, TokenPPOConfig

    shape = SIZES[size]
    module = GPT2(**shape, dtype=jnp.bfloat16 if bf16 else jnp.float32)
    lm, p_len, n_dev = FlaxLM(module), 32, jax.device_count()
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), bool))

    def prompts(key, b):
        return jax.random.randint(key, (b, p_len), 3, shape["vocab_size"]), jnp.ones((b, p_len), bool)

    def reward(_, prompt, prompt_valid, response, mask):  # cheap and jittable: the share of even token ids
        return jnp.sum((response % 2 == 0) & mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1)

    dev = jax.devices()[0]
    out = {
        "size": size,
        "shape": shape,
        "params": int(sum(x.size for x in jax.tree.leaves(params))),
        "device_kind": dev.device_kind,
        "platform": dev.platform,
        "device_count": n_dev,
        "batch": batch,
        "prompt_len": p_len,
        "dtype": "bfloat16" if bf16 else "float32",
        "rows": [],
    }
    for t in lengths:
        cfg = TokenPPOConfig(
            batch_size=batch,
            num_iterations=iterations,
            max_new_tokens=t,
            stop_ids=(),
            actor_lr=1e-5,
            critic_lr=1e-5,
            beta=0.05,
        )
        for layout in layouts:
            build = functools.partial(make_token_ppo, cfg, lm, reward, prompts=prompts)
            tp = data_parallel(build, n_dev) if layout == "data-parallel" else build()
            state = jax.jit(tp.init)(jax.random.PRNGKey(1), params, params)
            if layout == "fsdp":
                state = jax.device_put(state, fsdp_sharding(state, prompt_mesh(n_dev)))
            step = jax.jit(tp.iteration)  # called, not AOT: under fsdp the output layout XLA picks
            t0 = time.perf_counter()  # may differ from the input's (then one more compile)
            step.lower(state).compile()
            compile_s = time.perf_counter() - t0
            times = []
            for _ in range(iterations):
                t0 = time.perf_counter()
                state, m = step(state)
                jax.block_until_ready(m)
                times.append(time.perf_counter() - t0)
            it = _median(times[2:] or times)  # the first two may compile
            stats = dev.memory_stats() or {}
            row = {
                "T": t,
                "layout": layout,
                "devices": 1 if layout == "single" else n_dev,
                "compile_s": compile_s,
                "iteration_s": it,
                "times": times,
                "tokens_per_s": batch * t / it,
                "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
                "score": float(m["score"]),
                "loadavg": loadavg(),
            }
            out["rows"].append(row)
            print(
                f"{size} T={t} {layout:>13} on {row['devices']}x {dev.device_kind}: compile {compile_s:.1f}s, "
                f"{it:.3f}s/iteration, {row['tokens_per_s']:.0f} tok/s, peak "
                f"{(row['peak_bytes_in_use'] or 0) / 2**30:.2f} GiB",
                flush=True,
            )
    return out


# --- the driver ------------------------------------------------------------------------------
def _spawn(python: str, script_args: list, spec: dict, tag: str, timeout: float) -> dict:
    os.makedirs(WORK, exist_ok=True)
    spec_path, out_path = os.path.join(WORK, f"{tag}.spec.json"), os.path.join(WORK, f"{tag}.out.json")
    spec = {**spec, "out_dir": os.path.join(WORK, f"{tag}.trl_out")}
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    if os.path.exists(out_path):
        os.remove(out_path)
    t0 = time.perf_counter()
    load0 = loadavg()
    proc = subprocess.run([python, *script_args, spec_path, out_path], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not os.path.exists(out_path):
        raise RuntimeError(f"{tag} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    with open(out_path) as f:
        out = json.load(f)
    out.update(wall_s=time.perf_counter() - t0, loadavg_before=load0, loadavg_after=loadavg())
    return out


def run_ours(spec, tag, timeout=3600):
    return _spawn(sys.executable, [os.path.abspath(__file__), "--worker"], spec, tag, timeout)


def run_trl(python, spec, tag, timeout=3600):
    return _spawn(python, [os.path.join(HERE, "_trl_side.py")], spec, tag, timeout)


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def throughput_row(t: int, ours: dict, trl: dict) -> dict:
    b = ours["spec_batch"] if "spec_batch" in ours else HYPER["batch_size"]
    tm = {k: v[1:] for k, v in ours["times"].items()}  # drop the warm-up round
    it, g, gs = _median(tm["iteration"]), _median(tm["gen"]), _median(tm["gen_score"])
    o = dict(
        iteration_s=it,
        generation_s=g,
        scoring_s=max(gs - g, 0.0),
        update_s=max(it - gs, 0.0),
        first_s=sum(ours["compile_s"].values()),
        peak_rss_mb=ours["peak_rss_mb"],
        tokens_per_s=b * t / it,
        best_iteration_s=min(tm["iteration"]),
        response_length=_median([r["response_length"] for r in ours["rows"][1:]]),
    )
    if "cpu" in ours:
        o["cores"] = sum(ours["cpu"]["iteration"][1:]) / sum(tm["iteration"])
        o["gen_cores"] = sum(ours["cpu"]["gen"][1:]) / sum(tm["gen"])
    rows = trl["rows"][1:]
    med = lambda k: _median([r[k] for r in rows])  # noqa: E731
    r = dict(
        iteration_s=med("iteration_s"),
        generation_s=med("generation_s"),
        scoring_s=med("scoring_s"),
        update_s=med("update_s"),
        first_s=trl["rows"][0]["iteration_s"],
        peak_rss_mb=trl["peak_rss_mb"],
    )
    r["tokens_per_s"] = b * t / r["iteration_s"]
    r["best_iteration_s"] = min(x["iteration_s"] for x in rows)
    if "iteration_cpu_s" in rows[0]:
        r["cores"] = sum(x["iteration_cpu_s"] for x in rows) / sum(x["iteration_s"] for x in rows)
        r["gen_cores"] = sum(x["generation_cpu_s"] for x in rows) / sum(x["generation_s"] for x in rows)
    return {
        "T": t,
        "ours": o,
        "trl": r,
        "ratio": o["tokens_per_s"] / r["tokens_per_s"],
        "loadavg": [ours["loadavg_before"], trl["loadavg_after"]],
    }


def _interval(xs):
    """``(mean, half-width of the 95% t-interval)`` over seeds."""
    import numpy as np

    xs = np.asarray(xs, float)
    if len(xs) < 2:
        return float(xs.mean()), float("nan")
    t = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}.get(len(xs), 2.0)
    return float(xs.mean()), float(t * xs.std(ddof=1) / math.sqrt(len(xs)))


def peer_grid(name: str, run_peer, spec: dict, betas, seeds, args, t_start: float, not_run: list) -> list:
    """A peer's learning runs over seeds x betas, one subprocess each (``run_peer(spec, tag) ->
    {"rows": [{"score", "kl"}], "wall_s"}``), seed-major so that a grid cut by ``args.budget_s``
    still has every beta; the cut ones are listed in ``not_run``."""
    runs = []
    for seed in seeds:
        for beta in betas:
            if time.perf_counter() - t_start > args.budget_s:
                not_run.append(f"{name} beta={beta} seed={seed} (past --budget-s {args.budget_s:.0f})")
                continue
            peer = run_peer({**spec, "beta": beta, "seed": seed}, f"{name.lower()}_learn_b{beta}_s{seed}")
            runs.append(
                {
                    "beta": beta,
                    "seed": seed,
                    "score": [r["score"] for r in peer["rows"]],
                    "kl": [r["kl"] for r in peer["rows"]],
                    "wall_s": peer["wall_s"],
                }
            )
            print(
                f"{name} beta={beta} seed={seed}: score {runs[-1]['score'][0]:.3f} -> "
                f"{sum(runs[-1]['score'][-args.tail :]) / args.tail:.3f}, "
                f"KL {sum(runs[-1]['kl'][-args.tail :]) / args.tail:.3f} ({peer['wall_s']:.0f}s)",
                flush=True,
            )
    return runs


def learning_rows(ours_runs, trl_runs, tail: int) -> list:
    import numpy as np

    out = []
    for beta in sorted({r["beta"] for r in ours_runs}):
        row = {"beta": beta}
        for side, runs in (("ours", ours_runs), ("trl", trl_runs)):
            mine = [r for r in runs if r["beta"] == beta]
            row[f"{side}_seeds"] = len(mine)
            if not mine:
                continue
            row[f"{side}_score"] = _interval([np.mean(r["score"][-tail:]) for r in mine])
            row[f"{side}_kl"] = _interval([np.mean(r["kl"][-tail:]) for r in mine])
            row[f"{side}_score_first"] = float(np.mean([r["score"][0] for r in mine]))
        out.append(row)
    return out


def print_tables(result: dict) -> None:
    eos = result.get("eos", False)
    what = "EOS on: ratio = TRL's iteration time / ours" if eos else "EOS off: every response is T tokens"
    print(f"\nthroughput (batch {HYPER['batch_size']}, {what}; medians; load avg before/after)")
    print(
        f"{'T':>4} {'side':>5} {'first s':>8} {'iter s':>8} {'best s':>7} {'gen s':>7} {'score s':>8} "
        f"{'update s':>9} {'cores':>5} {'tok/s':>8} {'peak MB':>8} {'ours/TRL':>9}  load"
    )
    for row in result["throughput"]:
        for side in ("ours", "trl"):
            s = row[side]
            ratio = f"{row['ratio']:9.2f}" if side == "ours" else " " * 9
            print(
                f"{row['T']:>4} {side:>5} {s['first_s']:8.2f} {s['iteration_s']:8.3f} "
                f"{s.get('best_iteration_s', float('nan')):7.3f} {s['generation_s']:7.3f} "
                f"{s['scoring_s']:8.3f} {s['update_s']:9.3f} {s.get('cores', float('nan')):5.2f} "
                f"{s['tokens_per_s']:8.0f} {s['peak_rss_mb']:8.0f} "
                f"{ratio}  {' / '.join(row['loadavg']) if side == 'ours' else ''}"
            )
    if result.get("learning"):
        n = result["learning_iterations"]
        print(
            f"\nlearning (T=16, EOS on, {n} iterations; mean of the last {result['tail']} iterations per seed, "
            f"mean +- 95% t-interval over seeds)"
        )
        print(f"{'beta':>5} {'side':>5} {'seeds':>5} {'score it1':>9} {'score':>15} {'KL/seq':>15}")
        for row in result["learning"]:
            for side in ("ours", "trl"):
                if f"{side}_score" not in row:
                    print(f"{row['beta']:>5} {side:>5} {0:>5}  (not run)")
                    continue
                sc, kl = row[f"{side}_score"], row[f"{side}_kl"]
                print(
                    f"{row['beta']:>5} {side:>5} {row[f'{side}_seeds']:>5} {row[f'{side}_score_first']:9.3f} "
                    f"{sc[0]:7.3f} +- {sc[1]:5.3f} {kl[0]:7.3f} +- {kl[1]:5.3f}"
                )
    for note in result.get("not_run", []):
        print("not run:", note)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trl-python", default=TRL_PYTHON, help="the TRL venv's python")
    ap.add_argument("--lengths", default="16,64,256")
    ap.add_argument("--iterations", type=int, default=4, help="iterations per throughput row (the first is warm-up)")
    ap.add_argument("--learning-iterations", type=int, default=20)
    ap.add_argument("--tail", type=int, default=5, help="learning: average the last N iterations")
    ap.add_argument("--betas", default="0.03,0.1,0.3")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=2400, help="stop starting TRL learning runs past this")
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument("--trl-threads", type=int, default=2, help="torch.set_num_threads on TRL's side (default 2)")
    ap.add_argument(
        "--eos",
        action="store_true",
        help="throughput rows with EOS on (both sides stop at it: real use); tok/s then counts batch x T "
        "response slots, so the ratio is the ratio of iteration times",
    )
    ap.add_argument(
        "--devices",
        type=int,
        default=1,
        help="throughput rows: our side data-parallel over N host devices (the rlhf CLI's --devices)",
    )
    ap.add_argument(
        "--trl-flush-denormal",
        action="store_true",
        help="a lever on TRL's side: torch.set_flush_denormal(True) (XLA:CPU flushes denormals already)",
    )
    ap.add_argument(
        "--micro-batches",
        type=int,
        default=1,
        help="our side: each minibatch in N gradient-accumulated passes (TokenPPOConfig.micro_batches)",
    )
    ap.add_argument(
        "--positions",
        type=int,
        default=MODEL["n_positions"],
        help="the GPT-2's position table (default %(default)s: caps up to 281); a cap of 1024 needs >= 1031",
    )
    ap.add_argument("--json", default=os.path.join(HERE, "results", "vs_trl.json"))
    ap.add_argument(
        "--ours-only",
        choices=sorted(SIZES),
        default=None,
        help="our side alone at this model size (random init, EOS off; the GPU rows), no TRL",
    )
    ap.add_argument("--batch", type=int, default=64, help="--ours-only: prompts per iteration")
    ap.add_argument("--layouts", default="single,data-parallel,fsdp", help="--ours-only: device layouts")
    ap.add_argument("--bf16", action="store_true", help="--ours-only: compute in bfloat16")
    ap.add_argument("--tables", metavar="JSON", default=None, help="print the tables of a saved run and exit")
    ap.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        with open(args.worker[0]) as f:
            spec = json.load(f)
        with open(args.worker[1], "w") as f:
            json.dump({**_ours(spec), "spec": spec}, f)
        return {}
    if args.tables:
        with open(args.tables) as f:
            saved = json.load(f)
        print_tables(saved)
        return saved
    if args.ours_only:
        res = scale_rows(
            args.ours_only,
            [int(x) for x in args.lengths.split(",")],
            args.batch,
            args.layouts.split(","),
            args.iterations,
            args.bf16,
        )
        from _common import hardware

        res.update(
            benchmark="vs_trl --ours-only",
            hardware=hardware(),
            command="python benchmarks/vs_trl.py " + " ".join(argv or sys.argv[1:]),
        )
        _write(args.json, res)
        return res
    model = {**MODEL, "n_positions": args.positions}
    too_long = [t for t in (int(x) for x in args.lengths.split(",") if x) if TASK["max_len"] + 1 + t > args.positions]
    if too_long:
        print(
            f"error: --lengths {args.lengths}: a cap of {max(too_long)} needs --positions >= "
            f"{TASK['max_len'] + 1 + max(too_long)} (the prompts take {TASK['max_len'] + 1} slots)",
            file=sys.stderr,
        )
        sys.exit(2)
    if not os.path.exists(args.trl_python):
        sys.exit(
            f"no TRL environment at {args.trl_python}; install it once with:\n  python3 -m venv /tmp/trl-venv && "
            "/tmp/trl-venv/bin/pip install torch==2.13.0 && /tmp/trl-venv/bin/pip install trl==1.12.0"
        )
    t_start = time.perf_counter()
    # another position table is another model: its own SFT, cached in its own folder
    info = prepare(WORK if model == MODEL else f"{WORK}_pos{args.positions}", model)
    from _common import hardware

    result = {
        "benchmark": "vs_trl",
        "hardware": hardware(),
        "sft": info,
        "hyper": HYPER,
        "model": model,
        "task": TASK,
        "command": "python benchmarks/vs_trl.py " + " ".join(argv or sys.argv[1:]),
        "loadavg_start": loadavg(),
        "throughput": [],
        "not_run": [],
        "eos": args.eos,
        "devices": args.devices,
    }
    base = {
        **HYPER,
        "model_dir": info["model_dir"],
        "prompts": info["prompts"],
        "threads": args.trl_threads,
        "seed": 0,
        "devices": args.devices,
        "flush_denormal": args.trl_flush_denormal,
        "micro_batches": args.micro_batches,
    }
    print(
        f"SFT GPT-2 ({info['params']} params): greedy exact match {info['sft_greedy']['exact_match']:.3f}, "
        f"sampled {info['sft_sampled']['exact_match']:.3f}; load avg {loadavg()}",
        flush=True,
    )
    for t in [int(x) for x in args.lengths.split(",") if x]:  # --lengths "": the learning grid alone
        spec = {
            **base,
            "mode": "throughput",
            "iterations": args.iterations,
            "response_length": t,
            "stop": 1 if args.eos else None,
            "beta": 0.1,
        }
        ours = run_ours(spec, f"ours_T{t}")
        trl = run_trl(args.trl_python, spec, f"trl_T{t}")
        row = throughput_row(t, ours, trl)
        row["raw"] = {"ours": ours, "trl": trl}
        result["throughput"].append(row)
        print(
            f"T={t}: ours {row['ours']['tokens_per_s']:.0f} tok/s (response {row['ours']['response_length']:.1f}), "
            f"TRL {row['trl']['tokens_per_s']:.0f} tok/s, "
            f"ratio {row['ratio']:.2f} (load {loadavg()})",
            flush=True,
        )
        _write(args.json, result)
    if not args.skip_learning:
        betas, seeds = [float(x) for x in args.betas.split(",")], list(range(args.seeds))
        spec = {
            **base,
            "mode": "learning",
            "iterations": args.learning_iterations,
            "response_length": 16,
            "stop": 1,
            "beta": betas[0],
            "betas": betas,
            "seeds": seeds,
        }
        ours = run_ours(spec, "ours_learning")
        print(
            f"ours learning: {len(ours['runs'])} runs vmapped, compile {ours['compile_s']:.1f}s, "
            f"run {ours['run_s']:.1f}s",
            flush=True,
        )
        trl_runs = peer_grid(
            "TRL", lambda s, tag: run_trl(args.trl_python, s, tag), spec, betas, seeds, args, t_start, result["not_run"]
        )
        result.update(
            learning_iterations=args.learning_iterations,
            tail=args.tail,
            learning=learning_rows(ours["runs"], trl_runs, args.tail),
            learning_raw={"ours": ours, "trl": trl_runs},
        )
    result["loadavg_end"] = loadavg()
    result["wall_s"] = time.perf_counter() - t_start
    _write(args.json, result)
    print_tables(result)
    return result


def _write(path, result):
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
