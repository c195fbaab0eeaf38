"""GRPO side by side with TRL's GRPOTrainer (trl >= 1.16): same model, data, reward and hyperparameters.

One-time install of the TRL side (its own virtual environment, never a project dependency; the CPU
build of torch first, so that trl's requirements do not pull a CUDA build; no vLLM)::

    python -m venv /work/trl-grpo-venv
    /work/trl-grpo-venv/bin/pip install "torch==2.13.0+cpu"
    /work/trl-grpo-venv/bin/pip install "trl>=1.16" transformers accelerate datasets peft

(on 2026-12-07 that gave trl 1.16.0, torch 2.13.0+cpu, transformers 5.25.0, accelerate 1.16.0,
datasets 5.2.0, peft 0.22.0, tokenizers 0.23.3). Then (the lock keeps timings from overlapping with
other benchmark runs on a shared machine)::

    flock /tmp/purejaxppo-cpu.lock python benchmarks/vs_trl_grpo.py --quick      # a smoke run: ~1 min idle, 2 under load
    flock /tmp/purejaxppo-cpu.lock python benchmarks/vs_trl_grpo.py              # both shapes (see README)
        [--shapes learning,135m] [--seeds 3] [--iterations 20] [--trl-python /work/trl-grpo-venv/bin/python]
        [--json benchmarks/results/vs_trl_grpo.json]

What is compared. Both sides run GRPO on the same Hugging Face folder (a Llama-architecture model with
a byte-level BPE tokenizer trained here on the data's text; nothing is downloaded), the same JSONL rows
``{"prompt": "3+7=", "answer": "10"}`` (a + b for a, b in 0..9) and the same Python reward,
``_trl_grpo_side.arithmetic_reward`` (1 where the decoded completion is the gold answer): ours through
``purejaxppo.lm`` (``make_text_task`` + ``TextReward`` + ``make_token_ppo`` with ``advantage="grpo"``), TRL
through ``GRPOTrainer(reward_funcs=[fn])``. Each side runs in its own process (peak RSS is that process's).

Two shapes:

* ``learning``: a small Llama (hidden 64, 2 layers, 4 heads / 2 key-value heads) after a short SFT on
  the sums (ours, :func:`purejaxppo.lm.train_sft`; the SFT model is the starting point of both),
  (60 steps: about 15% of sampled answers right), EOS on, 8-token budget, batch 128 = 16 prompts x 8
  completions, 2 minibatches x 1 epoch, lr 1e-3, 50 iterations:
  the reward of each iteration's samples (the curve) and seconds per iteration, over ``--seeds``.
* ``135m``: SmolLM2-135M's shape (``lm_135m.SHAPES``; random weights, vocabulary 49152 of which the
  tokenizer uses its first few hundred ids), LoRA rank 16 (alpha 32) on q/k/v/o/gate/up/down on both
  sides, every completion exactly 512 tokens (ours: no stop ids; TRL: ``min_new_tokens = 512``, EOS
  banned), batch 8 = 1 prompt x 8 completions, 1 minibatch x 1 epoch (TRL's defaults: 8 per device,
  ``num_generations`` 8, ``num_iterations`` 1): seconds per iteration and peak RSS. Ours runs each
  minibatch in 2 accumulated passes (``micro_batches=2``: the same update, half the activations;
  ``--micro-batches``): the whole batch at once did not fit next to other jobs on a 24 GB machine.

Hyperparameters (TRL 1.16's GRPOConfig defaults where they exist, checked and printed from the run):
``beta`` 0.0 (TRL's default: no KL term; ours ``kl_in="loss"``, ``kl_estimator="k3"``, ``beta=0``, the
form TRL's KL term takes when beta > 0; ``--beta`` sets it on both), ``loss_type="dapo"`` (token-level
loss normalised by the active tokens: ours ``aggregation="token-mean"``), ``scale_rewards="group"``
(ours ``advantage="grpo"``: (r - group mean) / (group std, ddof 1, + 1e-4)), epsilon 0.2 both ways,
token-level importance ratio, temperature 1.0, top-p 1, top-k 0, ``mask_truncated_completions`` off
(ours ``missing_eos_penalty=0``), max_grad_norm 1.0, Adam(W) eps 1e-8, weight decay 0. Set on TRL's side
to match ours: ``lr_scheduler_type="constant"`` (default linear decay), ``bf16=False`` (default True:
float32 on both), ``gradient_checkpointing=False`` (default True: ours keeps the activations too), PAD
never sampled (``suppress_tokens``; ours cuts its logit).

Not matchable (each side's code fixes it):
* teacher-forced passes: both sides now skip the same ones (ours since issue 52's change: with one gradient step
  per generation the update's own log-probs, gradient stopped, are the old ones, and at beta 0 there is no
  reference pass); ours runs the old-log-prob pass when ``M x E > 1`` and the reference pass when beta > 0, as
  TRL does (``scoring_passes`` reads ours from the metrics; before the change ours always ran both);
* TRL computes the entropy of every token in its loss pass (for its logs);
* dapo's normaliser is the generation batch's active tokens / steps_per_generation; ours divides each
  minibatch by its own active tokens (the same when every completion has the same length);
* prompts: ours left-pads to the data's widest prompt, TRL to the batch's; each side shuffles its own.

What is timed. Ours: the whole iteration is one compiled program (compile reported apart); the
iterations run back to back. TRL: ``trainer.train()`` for ``iterations x M x E`` optimizer steps; its
first iteration (eager warm-up) is reported apart. s/iteration = the median of the iterations after
the first, on both sides (also printed: the fastest iteration and the CPU seconds per iteration, which
held steady under other jobs' load where wall times did not). The phases: TRL's by wrapping ``_generate_single_turn`` (generation),
``_generate_and_score_completions`` (its rest = scoring: decoding, the reward, the teacher-forced
passes it runs, advantages) and ``on_step_end`` (update = the optimizer steps to the iteration's last);
ours by three more compiled programs on the final state (``sample_phase``; ``score_phase`` +
``finish_phase``; ``update_phase``), each run once to warm up, then timed at least twice and until a
second has passed (at most 10 times), the median counts (TRL: the median over the iterations after
the first); the reward function's host time (inside ours' sampling program, a ``jax.pure_callback``)
is counted in scoring on both sides. torch runs with ``torch.set_num_threads(2)``; XLA uses the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = "/tmp/purejaxppo-vs-trl-grpo"
TRL_PYTHON = "/work/trl-grpo-venv/bin/python"
EOS, PAD = "<|endoftext|>", "<pad>"
N_MAX = 10  # the sums a + b for a, b in 0..N_MAX-1
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SMALL = dict(
    model_type="llama",
    hidden_size=64,
    intermediate_size=172,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
    tie_word_embeddings=True,
)
#: the shapes' settings; ``iterations`` is the full run's (``--quick`` and ``--iterations`` change it)
SETTINGS = {
    "learning": dict(
        batch_size=128,
        group_size=8,
        num_minibatches=2,
        update_epochs=1,
        max_new_tokens=8,
        force_length=False,
        lr=1e-3,
        iterations=50,
        lora_rank=0,
        sft_steps=60,
    ),
    "135m": dict(
        batch_size=8,
        group_size=8,
        num_minibatches=1,
        update_epochs=1,
        max_new_tokens=512,
        force_length=True,
        lr=1e-6,  # TRL's default (throughput only)
        iterations=3,
        lora_rank=16,
        micro_batches=2,  # ours: each minibatch in 2 accumulated passes (the same update, half the activations)
    ),
}
QUICK = {"learning": dict(iterations=3), "135m": dict(iterations=2, max_new_tokens=32, layers=2)}


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


WINDOW = 10  # the learning curves print as means over this many iterations


def windows(xs, n: int = WINDOW) -> list:
    """``xs`` as means over consecutive runs of ``n`` (as they are when there are few)."""
    if len(xs) <= 2 * n:
        return list(xs)
    return [sum(xs[i : i + n]) / len(xs[i : i + n]) for i in range(0, len(xs), n)]


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


# --- the shared inputs -----------------------------------------------------------------------
def prepare_data(work: str = WORK) -> dict:
    """The sums a + b (a, b below :data:`N_MAX`) as ``train.jsonl`` (prompt, answer) and ``sft.jsonl`` (prompt,
    response), and a byte-level BPE tokenizer trained on their text; cached."""
    data = os.path.join(work, "data")
    paths = {k: os.path.join(data, f"{k}.jsonl") for k in ("train", "sft")}
    paths["tokenizer"] = os.path.join(data, "tokenizer.json")
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(data, exist_ok=True)
    rows = [(f"{a}+{b}=", str(a + b)) for a in range(N_MAX) for b in range(N_MAX)]
    with open(paths["train"], "w") as f:
        f.writelines(json.dumps({"prompt": p, "answer": r}) + "\n" for p, r in rows)
    with open(paths["sft"], "w") as f:
        f.writelines(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in rows)
    from tokenizers import decoders, models, pre_tokenizers, Tokenizer, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([p + r for p, r in rows], trainer)
    tok.save(paths["tokenizer"])
    return paths


def write_model(folder: str, hf: dict, data: dict, seed: int = 0) -> str:
    """A random Llama of the HF config ``hf`` (its EOS/BOS/PAD the tokenizer's) and the tokenizer,
    in HF layout in ``folder``; cached."""
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return folder
    import jax
    import jax.numpy as jnp
    from tokenizers import Tokenizer

    from purejaxppo.lm import FlaxLM, Llama, llama_config_from_hf, save_pretrained

    tok = Tokenizer.from_file(data["tokenizer"])
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    hf = {"vocab_size": tok.get_vocab_size(), **hf, "eos_token_id": eos, "bos_token_id": eos, "pad_token_id": pad}
    hf.setdefault("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    module = Llama(llama_config_from_hf(hf))
    params = jax.jit(module.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"eos_token": EOS, "bos_token": EOS, "pad_token": PAD, "tokenizer_class": "PreTrainedTokenizerFast"}, f
        )
    save_pretrained(folder, FlaxLM(module), params)
    return folder


def prepare_small(data: dict, sft_steps: int, work: str = WORK) -> dict:
    """The small Llama after ``sft_steps`` of our SFT on the sums (the learning shape's start); cached."""
    out = os.path.join(work, f"small_sft{sft_steps}")
    info_path = os.path.join(out, "sft_info.json")
    if os.path.exists(info_path):
        with open(info_path) as f:
            return json.load(f)
    import jax
    import numpy as np

    from purejaxppo.lm import evaluate_policy, load_pretrained, make_text_task, save_pretrained, TextReward, train_sft
    from _trl_grpo_side import arithmetic_reward

    init = write_model(os.path.join(work, "small_init"), SMALL, data)
    task, _ = make_text_task(
        init,
        data["train"],
        lambda tok: TextReward(arithmetic_reward, "arithmetic_reward", tok),
        max_new=SETTINGS["learning"]["max_new_tokens"],
        sft_data=data["sft"],
    )
    lm, params = load_pretrained(init)
    t0 = time.perf_counter()
    params, losses = train_sft(lm, params, task, jax.random.PRNGKey(1), steps=sft_steps, batch=64, learning_rate=3e-3)
    sft_s = time.perf_counter() - t0
    ev = evaluate_policy(lm, params, task, jax.random.PRNGKey(7), 512)
    greedy = evaluate_policy(lm, params, task, jax.random.PRNGKey(7), 512, greedy=True)
    save_pretrained(out, lm, jax.tree.map(np.asarray, params), copy_from=init)
    losses = np.asarray(losses)
    info = {
        "model_dir": out,
        "sft_steps": sft_steps,
        "sft_s": sft_s,
        "sft_loss_first": float(losses[:10].mean()),
        "sft_loss_last": float(losses[-10:].mean()),
        "sft_sampled_accuracy": float(ev["score"]),
        "sft_greedy_accuracy": float(greedy["score"]),
    }
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    return info


def model_shape(shape: str, layers=None) -> dict:
    """The HF config of a shape: ``learning`` -> :data:`SMALL`; ``135m`` -> SmolLM2-135M's
    (``lm_135m.SHAPES``), optionally with fewer layers (``--quick``)."""
    if shape == "learning":
        return dict(SMALL)
    from lm_135m import SHAPES

    hf = dict(SHAPES["smollm2-135m"])
    if layers:
        hf["num_hidden_layers"] = layers
    return hf


# --- our side (a worker process) -------------------------------------------------------------
def grpo_config(spec: dict, task):
    """Our ``TokenPPOConfig`` for a spec: GRPO as TRL 1.16's GRPOConfig defaults run it (module docstring)."""
    from purejaxppo.lm import TokenPPOConfig

    lora = (
        dict(
            lora_rank=spec["lora_rank"],
            lora_alpha=float(spec["lora_alpha"]),
            lora_targets=tuple(spec["lora_targets"]),
            lora_base_dtype="float32",
        )
        if spec["lora_rank"]
        else {}
    )
    return TokenPPOConfig(
        batch_size=spec["batch_size"],
        group_size=spec["group_size"],
        advantage="grpo",
        kl_in="loss",
        kl_estimator="k3",
        beta=spec["beta"],
        num_iterations=spec["iterations"],
        update_epochs=spec["update_epochs"],
        num_minibatches=spec["num_minibatches"],
        max_new_tokens=spec["max_new_tokens"],
        stop_ids=() if spec["force_length"] else tuple(task.stop_ids),
        pad_id=task.pad_id,
        actor_lr=spec["lr"],
        critic_lr=spec["lr"],
        max_grad_norm=1.0,
        adam_eps=1e-8,
        clip_eps=0.2,
        aggregation="token-mean",
        temperature=spec["temperature"],
        missing_eos_penalty=0.0,
        micro_batches=spec.get("micro_batches", 1),
        **lora,
    )


def _ours(spec: dict) -> dict:
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm import (
        count_params,
        Devices,
        finish_phase,
        load_pretrained,
        make_text_task,
        make_token_ppo,
        Models,
        repeat_prompts,
        sample_phase,
        score_phase,
        TextReward,
        trained_params,
        update_phase,
    )
    from _trl_grpo_side import arithmetic_reward

    t0 = time.perf_counter()
    lm, params = load_pretrained(spec["model_dir"])
    made = []

    def reward_for(tok):
        made.append(TextReward(arithmetic_reward, "arithmetic_reward", tok))
        return made[-1]

    task, _ = make_text_task(spec["model_dir"], spec["data"], reward_for, max_new=spec["max_new_tokens"])
    text_reward = made[-1]
    cfg = grpo_config(spec, task)
    tp = make_token_ppo(cfg, lm, task.reward_fn, prompts=task.row_prompts)
    lora = cfg.lora_rank > 0
    state = jax.jit(lambda k, p: tp.init(k, p, None if lora else p))(jax.random.PRNGKey(spec["seed"]), params)
    n_params = int(sum(x.size for x in jax.tree.leaves(params)))
    del params
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = jax.jit(tp.iteration, donate_argnums=0).lower(state).compile()
    compile_s = time.perf_counter() - t0
    iters = []
    for _ in range(spec["iterations"]):
        r0, t0, c0 = text_reward.seconds, time.perf_counter(), time.process_time()
        state, m = compiled(state)
        jax.block_until_ready(m)
        dt = time.perf_counter() - t0
        text_reward.raise_if_failed()
        iters.append(
            {
                "iteration_s": dt,
                "cores": (time.process_time() - c0) / dt,
                "reward": float(m["score"]),
                "response_length": float(m["response_length"]),
                "reward_fn_s": text_reward.seconds - r0,
            }
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the iterations' process, phases apart
    del compiled  # the phases' programs below need the memory
    out = {
        "side": "ours",
        "jax": jax.__version__,
        "library": os.path.dirname(os.path.dirname(os.path.abspath(__import__("purejaxppo").__file__))),
        "params": n_params,
        "trainable": count_params(state.train.params),
        "load_s": load_s,
        "compile_s": compile_s,
        "peak_rss_mb": peak,
        "iterations": iters,
        "prompt_width": int(task.prompt_len),
        "metric_names": sorted(m),  # which teacher-forced passes ran: logp_mismatch (policy), kl (reference)
    }
    if spec.get("phases", True):  # the split: three more programs on the final state
        models = Models(lm, lm, None, task.reward_fn, values=False)
        g, b, t = cfg.group_size, cfg.batch_size, cfg.max_new_tokens
        prompt, valid, rows = task.row_prompts(jax.random.PRNGKey(5), b // g)
        prompt, valid = repeat_prompts(prompt, valid, g)
        rows = jnp.repeat(rows, g)
        first = prompt.shape[1] - 1

        def gen(s):
            p = trained_params(s.train.params, s.reference, models)
            return sample_phase(models, p, None, jax.random.PRNGKey(6), prompt, valid, cfg, Devices(), rows=rows)

        def score(s, sampled):
            p = trained_params(s.train.params, s.reference, models)
            exp = score_phase(models, p, s.reference, sampled, t, cfg)
            return finish_phase(exp, s.beta, cfg, Devices())[0]

        def update(s, data):
            return update_phase(
                models, s.train, data, jax.random.PRNGKey(7), s.beta, cfg, Devices(), s.reference, first
            )

        phases, compile_phase = {}, {}
        args = (state,)
        for name, fn in (("generation", gen), ("scoring", score), ("update", update)):
            t0 = time.perf_counter()
            prog = jax.jit(fn).lower(*args).compile()
            compile_phase[name] = time.perf_counter() - t0
            res = jax.block_until_ready(prog(*args))  # a warm-up run, then rounds until a second has passed
            times, host, cpu = [], [], []
            while len(times) < 2 or (sum(times) < 1.0 and len(times) < 10):
                r0, t0, c0 = text_reward.seconds, time.perf_counter(), time.process_time()
                res = jax.block_until_ready(prog(*args))
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                host.append(text_reward.seconds - r0)
            phases[name], phases[f"{name}_reward_fn_s"] = _median(times), _median(host)
            phases[f"{name}_rounds"], phases[f"{name}_cores"] = len(times), sum(cpu) / sum(times)
            if name == "generation":
                args = (state, res)
            elif name == "scoring":
                args = (state, res)
            del prog
        # the reward's host time moves from sampling (where ours calls it) to scoring (where TRL does)
        r = phases.pop("generation_reward_fn_s")
        phases["generation"] -= r
        phases["scoring"] += r
        phases["reward_fn_s"] = r
        phases.pop("scoring_reward_fn_s"), phases.pop("update_reward_fn_s")
        extra = ("_rounds", "_cores")
        phases = {k: v for k, v in phases.items() if not k.endswith(extra)} | {
            e[1:]: {k[: -len(e)]: v for k, v in phases.items() if k.endswith(e)} for e in extra
        }
        out.update(phases=phases, phase_compile_s=compile_phase)
    return out


# --- the driver ------------------------------------------------------------------------------
def _spawn(python: str, script: list, spec: dict, tag: str, timeout: float) -> dict:
    os.makedirs(WORK, exist_ok=True)
    spec_path, out_path = os.path.join(WORK, f"{tag}.spec.json"), os.path.join(WORK, f"{tag}.out.json")
    spec = {**spec, "out_dir": os.path.join(WORK, f"{tag}.trl_out")}
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    if os.path.exists(out_path):
        os.remove(out_path)
    t0, load0 = time.perf_counter(), loadavg()
    proc = subprocess.run([python, *script, spec_path, out_path], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not os.path.exists(out_path):
        raise RuntimeError(f"{tag} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    with open(out_path) as f:
        out = json.load(f)
    out.update(wall_s=time.perf_counter() - t0, loadavg_before=load0, loadavg_after=loadavg())
    return out


def run_ours(spec, tag, timeout=7200):
    return _spawn(sys.executable, [os.path.abspath(__file__), "--worker"], spec, tag, timeout)


def run_trl(python, spec, tag, timeout=7200):
    return _spawn(python, [os.path.join(HERE, "_trl_grpo_side.py")], spec, tag, timeout)


def summary(side: dict) -> dict:
    """s/iteration (median after the first), the first iteration (ours: compile), phases, peak RSS."""
    its = side["iterations"]
    timed = its[1:] or its
    s = {
        "iteration_s": _median([r["iteration_s"] for r in timed]),
        "best_iteration_s": min(r["iteration_s"] for r in timed),
        "cpu_s": _median([r["cores"] * r["iteration_s"] for r in timed]),
        "first_s": side["compile_s"] if side["side"] == "ours" else its[0]["iteration_s"],
        "peak_rss_mb": side["peak_rss_mb"],
        "cores": sum(r["cores"] * r["iteration_s"] for r in timed) / sum(r["iteration_s"] for r in timed),
        "curve": [r["reward"] for r in its],
        "response_length": _median([r["response_length"] for r in timed]),
        "trainable": side["trainable"],
    }
    if side["side"] == "ours":
        s["first_iteration_s"] = its[0]["iteration_s"]
        s["phases"] = side.get("phases", {})
    else:
        s["phases"] = {
            k: _median([r[f"{k}_s"] for r in timed]) for k in ("generation", "scoring", "update", "reward_fn")
        }
        s["phases"]["reward_fn_s"] = s["phases"].pop("reward_fn")
    return s


def scoring_passes(spec: dict, ours: dict = None) -> dict:
    """The teacher-forced forward passes each side's scoring runs (for matmul_peak.py's FLOP counts): TRL's by
    its rule; ours as its metrics show them (``logp_mismatch``: the policy's pass ran; ``kl``: the reference's;
    before the library skipped either, both always ran)."""
    m_e = spec["num_minibatches"] * spec["update_epochs"]
    names = (ours or {}).get("metric_names")
    mine = 2 if names is None else int("logp_mismatch" in names) + int("kl" in names)
    return {"ours": mine, "trl": int(m_e > 1) + int(spec["beta"] != 0)}


def run_shape(shape: str, args, data: dict) -> dict:
    st = {**SETTINGS[shape], **(QUICK[shape] if args.quick else {})}
    if args.iterations:
        st["iterations"] = args.iterations
    if args.micro_batches:
        st["micro_batches"] = args.micro_batches
    hf = model_shape(shape, st.get("layers"))
    if shape == "learning":
        info = prepare_small(data, st["sft_steps"])
        model_dir = info["model_dir"]
        print(
            f"learning: small Llama after {info['sft_steps']} SFT steps ({info['sft_s']:.0f}s): sampled accuracy "
            f"{info['sft_sampled_accuracy']:.3f}, greedy {info['sft_greedy_accuracy']:.3f}",
            flush=True,
        )
    else:
        name = "smollm2-135m" + (f"-{hf['num_hidden_layers']}layers" if st.get("layers") else "")
        model_dir, info = write_model(os.path.join(WORK, name), hf, data), {}
    spec = {
        **st,
        "model_dir": model_dir,
        "data": data["train"],
        "beta": args.beta,
        "temperature": 1.0,
        "lora_alpha": 2 * st["lora_rank"],
        "lora_targets": list(LORA_TARGETS),
        "threads": args.trl_threads,
        "phases": True,
    }
    seeds = list(range(args.seeds if shape == "learning" else 1))
    with open(os.path.join(model_dir, "config.json")) as f:  # the folder's HF config (vocabulary included)
        hf = {k: v for k, v in json.load(f).items() if k in SMALL or k in ("vocab_size", "rope_theta")}
    res = {"shape": shape, "settings": st, "model": hf, "sft": info, "spec": spec, "runs": []}
    recorded = _recorded_trl(args.trl_from, shape) if not args.trl else None
    for seed in seeds:
        s = {**spec, "seed": seed, "phases": seed == seeds[0]}
        ours = run_ours(s, f"ours_{shape}_s{seed}")
        print(f"  ours seed {seed}: compile {ours['compile_s']:.1f}s, wall {ours['wall_s']:.0f}s (load {loadavg()})")
        if args.trl:
            trl = run_trl(args.trl_python, s, f"trl_{shape}_s{seed}")
            print(f"  TRL  seed {seed}: wall {trl['wall_s']:.0f}s (load {loadavg()})", flush=True)
            run = {"seed": seed, "ours": ours, "trl": trl, "summary": {"ours": summary(ours), "trl": summary(trl)}}
        else:  # TRL's row of a recorded run (its seed's, else its first)
            old = next((r for r in recorded["runs"] if r["seed"] == seed), recorded["runs"][0])
            run = {
                "seed": seed,
                "ours": ours,
                "trl": old["trl"],
                "summary": {"ours": summary(ours), "trl": old["summary"]["trl"]},
            }
        res["runs"].append(run)
    first = res["runs"][0]
    res["scoring_passes"] = scoring_passes(spec, first["ours"])
    res["trl_config"] = first["trl"]["config"]
    res["versions"] = first["trl"]["versions"]
    res["trl_recorded_from"] = None if args.trl else args.trl_from
    res["prompt_width"] = {"ours": first["ours"]["prompt_width"]}
    it = {side: _median([r["summary"][side]["iteration_s"] for r in res["runs"]]) for side in ("ours", "trl")}
    best = {side: min(r["summary"][side]["best_iteration_s"] for r in res["runs"]) for side in ("ours", "trl")}
    res["iteration_s"], res["best_iteration_s"] = it, best
    res["ratio"] = it["trl"] / it["ours"]  # throughput ours / TRL (same samples per iteration)
    res["ratio_best"] = best["trl"] / best["ours"]
    res["loadavg_end"] = loadavg()
    return res


def _recorded_trl(path: str, shape: str) -> dict:
    """The ``shape`` of a saved run (``--trl-from``), for its TRL rows: exits with one line if it has none."""
    try:
        with open(path) as f:
            return json.load(f)["shapes"][shape]
    except (OSError, KeyError, ValueError) as e:
        print(f"error: --trl-from {path}: no {shape!r} shape with TRL's rows there ({e!r})", file=sys.stderr)
        sys.exit(2)


def print_shape(res: dict) -> None:
    shape, st = res["shape"], res["settings"]
    hf = res["model"]
    print(
        f"\n== {shape}: Llama hidden {hf['hidden_size']} x {hf['num_hidden_layers']} layers, vocab {hf.get('vocab_size')}"
        f"; batch {st['batch_size']} = {st['batch_size'] // st['group_size']} prompts x {st['group_size']}, "
        f"{st['num_minibatches']} minibatch(es) x {st['update_epochs']} epoch(s), T {st['max_new_tokens']} "
        f"({'forced' if st['force_length'] else 'EOS on'}), lr {st['lr']}, "
        f"{'LoRA r' + str(st['lora_rank']) if st['lora_rank'] else 'full fine-tuning'}"
    )
    cfg = res["trl_config"]
    print(
        "TRL GRPOConfig as run: "
        + ", ".join(
            f"{k}={cfg[k]}"
            for k in (
                "beta",
                "loss_type",
                "scale_rewards",
                "epsilon",
                "epsilon_high",
                "importance_sampling_level",
                "num_iterations",
                "steps_per_generation",
                "temperature",
                "top_p",
                "top_k",
                "mask_truncated_completions",
            )
        )
        + f"; reference model loaded: {cfg['ref_model_loaded']}"
    )
    print(f"ours: advantage=grpo, aggregation=token-mean, kl_in=loss, kl_estimator=k3, beta={res['spec']['beta']}")
    n = len(res["runs"][0]["summary"]["ours"]["curve"])
    per = f" (means of {WINDOW})" if n > 2 * WINDOW else ""
    print(
        f"{'seed':>4} {'side':>5} {'first s':>8} {'s/iter':>8} {'best s':>8} {'CPU s':>8} {'gen s':>7} {'score s':>8} {'update s':>9} "
        f"{'reward s':>8} {'cores':>5} {'peak MB':>8} {'len':>5}  reward per iteration{per}"
    )
    for run in res["runs"]:
        for side in ("ours", "trl"):
            s = run["summary"][side]
            ph = s["phases"]
            curve = " ".join(f"{x:.2f}" for x in windows(s["curve"]))
            print(
                f"{run['seed']:>4} {side:>5} {s['first_s']:8.1f} {s['iteration_s']:8.3f} "
                f"{s.get('best_iteration_s', float('nan')):8.3f} {s.get('cpu_s', float('nan')):8.3f} "
                f"{ph.get('generation', float('nan')):7.3f} {ph.get('scoring', float('nan')):8.3f} "
                f"{ph.get('update', float('nan')):9.3f} {ph.get('reward_fn_s', float('nan')):8.4f} "
                f"{s['cores']:5.2f} {s['peak_rss_mb']:8.0f} {s['response_length']:5.1f}  {curve}"
            )
    if n > 2 * WINDOW:
        for side in ("ours", "trl"):
            first = [sum(r["summary"][side]["curve"][:WINDOW]) / WINDOW for r in res["runs"]]
            last = [sum(r["summary"][side]["curve"][-WINDOW:]) / WINDOW for r in res["runs"]]
            print(
                f"{side:>5}: reward over the first {WINDOW} iterations {sum(first) / len(first):.3f}, over the last "
                f"{WINDOW} {sum(last) / len(last):.3f} (mean of {len(last)} seeds: {', '.join(f'{x:.3f}' for x in last)})"
            )
    it, best = res["iteration_s"], res.get("best_iteration_s")
    print(
        f"{shape}: s/iteration ours {it['ours']:.3f}, TRL {it['trl']:.3f}: ours/TRL throughput {res['ratio']:.2f}x"
        + (f"; fastest iterations {best['ours']:.3f} / {best['trl']:.3f} s: {res['ratio_best']:.2f}x" if best else "")
        + f" (load at end {res['loadavg_end']})"
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: 3 learning iterations, the 135m shape at 2 layers and T 32"
    )
    ap.add_argument("--shapes", default="learning,135m", help="a comma list of learning, 135m")
    ap.add_argument("--iterations", type=int, default=0, help="iterations per run (default: the shape's)")
    ap.add_argument("--seeds", type=int, default=3, help="learning shape: seeds per side (the 135m shape runs one)")
    ap.add_argument(
        "--micro-batches",
        type=int,
        default=0,
        help="ours: each minibatch in N accumulated passes (default: the shape's, 2 at 135m; the same update)",
    )
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient on both sides (TRL 1.16's default 0.0)")
    ap.add_argument("--trl-python", default=TRL_PYTHON, help="the TRL venv's python")
    ap.add_argument(
        "--sides",
        default="ours,trl",
        help="ours,trl (both), or ours: TRL is not run, its rows are taken from --trl-from (a recorded run)",
    )
    ap.add_argument(
        "--trl-from",
        default=os.path.join(HERE, "results", "vs_trl_grpo.json"),
        help="with --sides ours: the saved run whose TRL rows the ratios use",
    )
    ap.add_argument("--trl-threads", type=int, default=2, help="torch.set_num_threads on TRL's side")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/vs_trl_grpo[_quick].json")
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
        for res in saved["shapes"].values():
            print_shape(res)
        return saved
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SETTINGS]
    if bad:
        print(f"error: --shapes {args.shapes}: {bad[0]!r} is not one of {', '.join(SETTINGS)}", file=sys.stderr)
        sys.exit(2)
    sides = set(args.sides.split(","))
    if not sides <= {"ours", "trl"} or "ours" not in sides:
        print(f"error: --sides {args.sides}: give ours,trl or ours", file=sys.stderr)
        sys.exit(2)
    args.trl = "trl" in sides
    if args.trl and not os.path.exists(args.trl_python):
        print(
            f"error: --trl-python {args.trl_python} does not exist (install: this script's docstring)", file=sys.stderr
        )
        sys.exit(2)
    if args.quick:
        args.seeds = min(args.seeds, 1)
    path = args.json or os.path.join(HERE, "results", "vs_trl_grpo_quick.json" if args.quick else "vs_trl_grpo.json")
    from _common import hardware

    t_start = time.perf_counter()
    data = prepare_data()
    result = {
        "benchmark": "vs_trl_grpo",
        "hardware": hardware(),
        "command": "python benchmarks/vs_trl_grpo.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "loadavg_start": loadavg(),
        "shapes": {},
    }
    for shape in shapes:
        result["shapes"][shape] = run_shape(shape, args, data)
        print_shape(result["shapes"][shape])
        _write(path, result)
    result["wall_s"] = time.perf_counter() - t_start
    result["loadavg_end"] = loadavg()
    _write(path, result)
    print(f"\nwall {result['wall_s']:.0f}s; JSON: {path}")
    return result


def _write(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
