"""The TRL side of ``benchmarks/vs_trl_grpo.py``: TRL's ``GRPOTrainer`` in its own virtual environment
(torch, trl >= 1.16, transformers, peft), never in the project's; it imports neither jax nor purejaxppo.

    /work/trl-grpo-venv/bin/python benchmarks/_trl_grpo_side.py SPEC.json OUT.json

It also holds :func:`arithmetic_reward`, the reward both sides call (plain Python, no import of torch
at module level: ``vs_trl_grpo.py`` imports it from here for our side).

SPEC (written by ``vs_trl_grpo.py``): ``model_dir`` (an HF-layout Llama folder with its tokenizer),
``data`` (a JSONL file of ``{"prompt", "answer"}`` rows), ``batch_size`` (completions per iteration),
``group_size``, ``num_minibatches``, ``update_epochs``, ``iterations``, ``max_new_tokens``,
``force_length`` (every completion exactly ``max_new_tokens`` long: ``min_new_tokens``), ``lr``,
``beta``, ``temperature``, ``lora_rank`` / ``lora_alpha`` / ``lora_targets`` (rank 0: full fine-tuning),
``threads``, ``seed``, ``out_dir``.

How the batch maps onto GRPOConfig: ``per_device_train_batch_size = B / M``, ``steps_per_generation = M``,
``gradient_accumulation_steps = 1``, ``num_iterations = E``: one generation of ``B`` completions
(``B / G`` prompts x ``G``) feeds ``M x E`` optimizer steps, as one of our iterations does;
``max_steps = iterations x M x E``.

OUT: per iteration the wall time split into generation (``_generate_single_turn``: ``model.generate``
and the EOS mask), scoring (the rest of ``_generate_and_score_completions``: decoding, the reward
function, the teacher-forced old-log-prob pass when TRL needs one, the reference pass when
``beta != 0``, the group advantages), the reward function's own time, and the update (the optimizer
steps: from the end of scoring to the last ``on_step_end`` of the iteration); the mean reward of each
generation (the curve); the GRPOConfig values the run used; the process's peak RSS.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: the GRPOConfig fields the comparison matches and prints (their values come from the run)
CHECKED = (
    "beta",
    "loss_type",
    "scale_rewards",
    "epsilon",
    "epsilon_high",
    "delta",
    "importance_sampling_level",
    "num_iterations",
    "num_generations",
    "steps_per_generation",
    "generation_batch_size",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
    "mask_truncated_completions",
    "top_entropy_quantile",
    "learning_rate",
    "lr_scheduler_type",
    "weight_decay",
    "adam_epsilon",
    "max_grad_norm",
    "gradient_checkpointing",
    "bf16",
    "optim",
)


def arithmetic_reward(prompts, completions, answer, **kwargs):
    """1.0 where the completion, stripped of surrounding whitespace, is the gold answer, else 0.0.

    Both sides call it with the decoded prompts and completions (the stop token and padding
    dropped) and the data's ``answer`` column: TRL as ``fn(prompts=..., completions=...,
    completion_ids=..., answer=..., **more)``, ours (``purejaxppo.lm.TextReward``) as
    ``fn(prompts, responses, answer=..., completion_ids=...)``."""
    return [1.0 if c.strip() == str(a) else 0.0 for c, a in zip(completions, answer)]


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    import torch

    torch.set_num_threads(spec.get("threads", 2))
    t_import = time.perf_counter()
    import datasets
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    with open(spec["data"]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    train = datasets.Dataset.from_list([{"prompt": r["prompt"], "answer": str(r["answer"])} for r in rows])
    tok = AutoTokenizer.from_pretrained(spec["model_dir"], local_files_only=True, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], local_files_only=True, dtype=torch.float32)
    b, g, m, e, t = (
        spec[k] for k in ("batch_size", "group_size", "num_minibatches", "update_epochs", "max_new_tokens")
    )
    # PAD is never sampled on our side (its logit is cut): the same here
    gen_kwargs = {"suppress_tokens": [tok.pad_token_id]}
    if spec["force_length"]:  # EOS banned until the budget: every completion is max_new_tokens long
        gen_kwargs["min_new_tokens"] = t
    args = GRPOConfig(
        output_dir=spec["out_dir"],
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        use_cpu=True,
        bf16=False,  # default True; float32 on both sides
        fp16=False,
        gradient_checkpointing=False,  # default True; ours keeps activations too
        seed=spec["seed"],
        data_seed=spec["seed"],
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",  # default linear decay; ours is constant
        warmup_steps=0,
        weight_decay=0.0,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        per_device_train_batch_size=b // m,
        gradient_accumulation_steps=1,
        steps_per_generation=m,
        num_iterations=e,
        num_generations=g,
        max_completion_length=t,
        temperature=spec["temperature"],
        beta=spec["beta"],
        max_steps=spec["iterations"] * m * e,
        generation_kwargs=gen_kwargs,
        dataloader_num_workers=0,
        eval_strategy="no",
        log_completions=False,
    )
    peft_config = None
    if spec.get("lora_rank"):
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=spec["lora_rank"],
            lora_alpha=spec["lora_alpha"],
            lora_dropout=0.0,
            target_modules=list(spec["lora_targets"]),
            bias="none",
            task_type="CAUSAL_LM",
        )

    curve: list = []  # the mean reward of each generation

    def reward(prompts, completions, answer, **kwargs):
        t0 = time.perf_counter()
        out = arithmetic_reward(prompts, completions, answer)
        marks["reward"].append(time.perf_counter() - t0)
        curve.append(sum(out) / len(out))
        return out

    reward.__name__ = "arithmetic_reward"
    marks: dict = {"gen": [], "gen_score": [], "reward": [], "steps": [], "start": None, "lengths": []}

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            marks["start"] = time.perf_counter()

        def on_step_end(self, *a, **k):
            marks["steps"].append((time.perf_counter(), time.process_time()))

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=train,
        processing_class=tok,
        callbacks=[Clock()],
        peft_config=peft_config,
    )
    orig_gen, orig_gs = trainer._generate_single_turn, trainer._generate_and_score_completions

    def timed_gen(*a, **k):
        t0 = time.perf_counter()
        out = orig_gen(*a, **k)
        marks["gen"].append((t0, time.perf_counter()))
        marks["lengths"].append(sum(len(c) for c in out[0]) / len(out[0]))
        return out

    def timed_gen_score(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        out = orig_gs(*a, **k)
        marks["gen_score"].append((t0, time.perf_counter(), c0))
        return out

    trainer._generate_single_turn, trainer._generate_and_score_completions = timed_gen, timed_gen_score
    setup_s = time.perf_counter() - t_import
    trainer.train()
    per = m * e  # optimizer steps per iteration
    iters = []
    for i, (g0, g1) in enumerate(marks["gen"]):
        s0, s1, c0 = marks["gen_score"][i]
        end, c_end = marks["steps"][(i + 1) * per - 1]
        iters.append(
            {
                "iteration_s": end - s0,
                "generation_s": g1 - g0,
                "scoring_s": s1 - s0 - (g1 - g0),
                "reward_fn_s": marks["reward"][i],
                "update_s": end - s1,
                "cores": (c_end - c0) / (end - s0),
                "reward": curve[i],
                "response_length": marks["lengths"][i],
            }
        )
    cfg = {k: getattr(args, k, None) for k in CHECKED}
    cfg["optim"] = str(cfg["optim"])
    cfg["lr_scheduler_type"] = str(cfg["lr_scheduler_type"])
    cfg["generation_kwargs"] = gen_kwargs
    cfg["ref_model_loaded"] = trainer.ref_model is not None
    import peft
    import transformers

    out = {
        "side": "trl",
        "versions": {
            "trl": trl.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "datasets": datasets.__version__,
        },
        "threads": torch.get_num_threads(),
        "setup_s": setup_s,
        "peak_rss_mb": rss_peak_mb(),
        "params": sum(p.numel() for p in trainer.model.parameters()),
        "trainable": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "config": cfg,
        "iterations": iters,
        "spec": spec,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
