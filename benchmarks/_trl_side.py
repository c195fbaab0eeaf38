"""The TRL side of ``benchmarks/vs_trl.py``: runs in the TRL virtual environment (torch, trl 1.12.0),
never in the project's. It imports neither jax nor purejaxppo.

    /tmp/trl-venv/bin/python benchmarks/_trl_side.py SPEC.json OUT.json

SPEC (written by vs_trl.py or lm_135m.py): ``model_dir`` (an HF-layout folder: our SFT GPT-2, or a
Llama-family model), ``reward`` (``reverse``, the default, or ``even``), ``prompts`` (a ``.npy`` pool
of left-padded prompts, PAD 0), ``mode`` (``throughput`` | ``learning``), ``iterations``, ``seed``,
``beta``, ``response_length``, ``stop`` (EOS id or None), and the shared hyperparameters. OUT: per
iteration wall time split into generation / scoring / update, the raw task score and the KL per
sequence, and the process's peak RSS.

The reward model is :class:`ReverseReward`, an ``nn.Module`` with TRL's reward-model interface
(``base_model_prefix``, a backbone returning ``hidden_states``, a ``score`` head) that computes the
reverse task's exact-match score of the whole sequence at every position, so TRL's pick of the last
non-PAD position reads the task score. The value model is :class:`ValueModel`: a GPT-2 trunk loaded
from the same SFT files and a zero-initialised ``score`` head with a bias (the shape of our value head).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

PAD, EOS, SEP = 0, 1, 2


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _Hidden(nn.Module):
    """The reward's "backbone": passes the token ids and the mask through as its last hidden state."""

    def forward(self, input_ids=None, attention_mask=None, **_):
        h = torch.stack([input_ids.float(), attention_mask.float()], dim=-1)
        return types.SimpleNamespace(hidden_states=(h,))


class ReverseReward(nn.Module):
    """The reverse task's exact-match score (purejaxppo.lm.tasks.builtin_tasks.ReverseTask.score, written for torch)
    behind TRL's reward-model interface: ``score(hidden [B, L, 2]) -> [B, L, 1]``, the sequence's
    score repeated at every position. ``prompt_len``: the prompts' (left-padded) width."""

    base_model_prefix = "backbone"

    def __init__(self, prompt_len: int):
        super().__init__()
        self.prompt_len = prompt_len
        self.backbone = _Hidden()
        self.last_raw = None  # the raw scores of the last call (no missing-EOS penalty)

    def score(self, hidden):
        tokens, valid = hidden[..., 0].long(), hidden[..., 1] > 0.5
        p = self.prompt_len
        prompt, prompt_valid, response = tokens[:, :p], valid[:, :p], tokens[:, p:]
        t = response.shape[1]
        j = torch.arange(t)[None, :]
        is_eos = response == EOS
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full_like(is_eos[:, 0], t, dtype=torch.long))
        mask = j <= first[:, None]  # up to and including the first EOS (our sampler's mask)
        length = prompt_valid.sum(1) - 1
        mirrored = torch.gather(prompt, 1, (p - 2 - j).clamp(0, p - 1).expand(tokens.shape[0], t))
        target = torch.where(j < length[:, None], mirrored, torch.full_like(mirrored, EOS))
        target_mask = j <= length[:, None]
        correct = (response == target) & mask & target_mask
        exact = torch.where(target_mask, correct, ~mask).all(1).float()
        self.last_raw = exact.detach().clone()
        return exact[:, None, None].expand(-1, tokens.shape[1], 1)


class EvenShare(nn.Module):
    """A cheap reward any vocabulary has (the 135M-shape rows, ``benchmarks/lm_135m.py``): the share
    of even token ids among the response's valid tokens (those before the first PAD), repeated at
    every position. ``prompt_len``: the prompts' width."""

    base_model_prefix = "backbone"

    def __init__(self, prompt_len: int):
        super().__init__()
        self.prompt_len = prompt_len
        self.backbone = _Hidden()
        self.last_raw = None

    def score(self, hidden):
        tokens, valid = hidden[..., 0].long(), hidden[..., 1] > 0.5
        response, mask = tokens[:, self.prompt_len :], valid[:, self.prompt_len :]
        even = ((response % 2 == 0) & mask).sum(1).float() / mask.sum(1).clamp(min=1).float()
        self.last_raw = even.detach().clone()
        return even[:, None, None].expand(-1, tokens.shape[1], 1)


REWARDS = {"reverse": ReverseReward, "even": EvenShare}


class ValueModel(nn.Module):
    """TRL's value-model interface over a trunk (GPT-2 or a Llama-family model): ``transformer`` and a ``score`` head."""

    base_model_prefix = "transformer"

    def __init__(self, trunk, d: int):
        super().__init__()
        self.transformer = trunk
        self.score = nn.Linear(d, 1, bias=True)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)


class _Tok:
    """The little of a tokenizer PPOTrainer reads."""

    pad_token_id = PAD
    eos_token_id = EOS
    padding_side = "left"

    def save_pretrained(self, *a, **k):
        return ()


def main(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    torch.set_num_threads(spec.get("threads", 2))
    if spec.get("flush_denormal"):  # a lever, off by default: x86 flush-to-zero / denormals-are-zero
        torch.set_flush_denormal(True)
    torch.manual_seed(spec["seed"])
    t_import = time.perf_counter()
    import datasets
    from transformers import AutoModel, AutoModelForCausalLM, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as pt

    # GPT2LMHeadModel / GPT2Model for vs_trl.py's folder, LlamaForCausalLM / LlamaModel for lm_135m.py's
    policy = AutoModelForCausalLM.from_pretrained(spec["model_dir"], local_files_only=True, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(spec["model_dir"], local_files_only=True, dtype=torch.float32)
    trunk = AutoModel.from_pretrained(spec["model_dir"], local_files_only=True, dtype=torch.float32)
    value = ValueModel(trunk, policy.config.hidden_size)
    stop = spec["stop"]
    for m in (policy, ref):
        m.generation_config.pad_token_id = PAD
        m.generation_config.eos_token_id = stop
        m.generation_config.bos_token_id = None
    pool = np.load(spec["prompts"])
    reward = REWARDS[spec.get("reward", "reverse")](pool.shape[1])
    b, iters = spec["batch_size"], spec["iterations"]
    train = datasets.Dataset.from_dict({"input_ids": pool.tolist()})
    evals = datasets.Dataset.from_dict({"input_ids": pool[:b].tolist()})

    def collate(features):
        return {"input_ids": torch.tensor([f["input_ids"] for f in features], dtype=torch.long)}

    args = PPOConfig(
        output_dir=spec["out_dir"],
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        seed=spec["seed"],
        data_seed=spec["seed"],
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=spec["adam_eps"],
        max_grad_norm=spec["max_grad_norm"],
        per_device_train_batch_size=b,
        gradient_accumulation_steps=1,
        num_mini_batches=spec["num_minibatches"],
        num_ppo_epochs=spec["update_epochs"],
        local_rollout_forward_batch_size=b,
        total_episodes=b * iters,
        response_length=spec["response_length"],
        temperature=spec["temperature"],
        stop_token_id=stop,
        missing_eos_penalty=spec["missing_eos_penalty"],
        kl_coef=spec["beta"],
        kl_estimator="k1",
        cliprange=spec["clip_eps"],
        cliprange_value=spec["vf_clip_eps"],
        vf_coef=spec["vf_coef"],
        gamma=spec["gamma"],
        lam=spec["gae_lambda"],
        whiten_rewards=False,
        num_sample_generations=0,
        dataloader_num_workers=0,
        eval_strategy="no",
    )

    marks: dict = {"gen": [], "update_start": [], "end": [], "start": None, "gen_cpu": [], "cpu": []}
    rows: list = []
    orig_gen, orig_fwd = pt.batch_generation, pt.forward

    def timed_gen(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        out = orig_gen(*a, **k)
        marks["gen"].append((t0, time.perf_counter()))
        marks["gen_cpu"].append(time.process_time() - c0)
        return out

    def timed_forward(model, *a, **k):
        if isinstance(model, pt.PolicyAndValueWrapper) and len(marks["update_start"]) < len(marks["gen"]):
            marks["update_start"].append(time.perf_counter())
        return orig_fwd(model, *a, **k)

    pt.batch_generation, pt.forward = timed_gen, timed_forward

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            marks["start"] = time.perf_counter()
            marks["cpu"].append(time.process_time())

        def on_log(self, args_, state, control, logs=None, **k):
            if logs and "objective/kl" in logs:
                rows.append(
                    {
                        "kl": logs["objective/kl"],
                        "score_with_penalty": logs["objective/scores"],
                        "score": float(reward.last_raw.mean()),
                        "entropy": logs["objective/entropy"],
                        "approxkl": logs["policy/approxkl_avg"],
                        "clipfrac": logs["policy/clipfrac_avg"],
                    }
                )

        def on_step_end(self, *a, **k):
            marks["end"].append(time.perf_counter())
            marks["cpu"].append(time.process_time())

    trainer = PPOTrainer(
        args=args,
        processing_class=_Tok(),
        model=policy,
        ref_model=ref,
        reward_model=reward,
        train_dataset=train,
        value_model=value,
        data_collator=collate,
        eval_dataset=evals,
        callbacks=[Clock()],
    )
    setup_s = time.perf_counter() - t_import
    rss_before = rss_mb()
    trainer.train()
    starts = [marks["start"]] + marks["end"][:-1]
    for i, row in enumerate(rows):
        g0, g1 = marks["gen"][i]
        u0, end = marks["update_start"][i], marks["end"][i]
        row.update(
            iteration_s=end - starts[i],
            generation_s=g1 - g0,
            scoring_s=u0 - g1,
            update_s=end - u0,
            other_s=(g0 - starts[i]),
            iteration_cpu_s=marks["cpu"][i + 1] - marks["cpu"][i],
            generation_cpu_s=marks["gen_cpu"][i],
        )
    out = {
        "side": "trl",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "flush_denormal": bool(spec.get("flush_denormal")),
        "setup_s": setup_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "params": sum(p.numel() for p in policy.parameters()),
        "rows": rows,
        "spec": spec,
    }
    import trl

    out["trl"] = trl.__version__
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
