"""Stages 1-2 of the RLVR demonstration: the data (reasoning-gym rows, a held-out set disjoint
from the training set, worked solutions written from each row's metadata), a byte-level BPE
tokenizer and a random Llama in a Hugging Face folder (``init_model/``), and the SFT model
(``sft_model/``), supervised just enough to score a little."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm import (
    FlaxLM,
    Llama,
    TextReward,
    evaluate_pass_at_k,
    get_reward,
    llama_config_from_hf,
    load_pretrained,
    make_text_task,
    save_pretrained,
    train_sft,
)

EOS, PAD = "<|endoftext|>", "<pad>"
# the response budget: a 4-term worked solution with its answer tag and EOS takes up to 31 tokens;
# 40 keeps it clear of DAPO's soft overlong punishment, which starts a fifth below the budget
MAX_NEW = 40
POSITIONS = 64

#: the reasoning-gym generators and their options: sums and differences of small numbers
TASKS = {"chain_sum": dict(min_terms=2, max_terms=4, min_digits=1, max_digits=1)}


def write_jsonl(path: str, rows) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def read_jsonl(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def generate(name: str, size: int, seed: int) -> list:
    """``size`` reasoning-gym rows of generator ``name`` (options :data:`TASKS`), as JSON-ready
    dicts: ``prompt`` (the question), ``answer``, and ``question`` and ``metadata`` (the
    generator's entry: the ``reasoning-gym`` reward rebuilds it from them)."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset(name, size=size, seed=seed, **TASKS[name])
    return [
        {"prompt": e["question"], "answer": str(e["answer"]), "question": e["question"], "metadata": e["metadata"]}
        for e in ds
    ]


def worked_solution(row: dict) -> str:
    """A short worked solution from the row's metadata: the running total term by term, then the
    answer in an ``<answer>`` tag (``3 + 5 = 8, 8 - 2 = 6 <answer>6</answer>``)."""
    tokens = row["metadata"]["expression"].split()
    total, steps = int(tokens[0]), []
    for op, term in zip(tokens[1::2], tokens[2::2]):
        new = total + int(term) if op == "+" else total - int(term)
        steps.append(f"{total} {op} {term} = {new}")
        total = new
    assert str(total) == row["answer"], (row, total)
    return " " + ", ".join(steps) + f" <answer>{total}</answer>"


def train_tokenizer(lines, vocab_size: int):
    """A byte-level BPE tokenizer trained on ``lines`` (exact text round trip), EOS and PAD special."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    return tok


def build_init_model(folder: str, tok, width: int, layers: int, seed: int) -> int:
    """A random Llama (GQA: 4 query heads, 2 key/value heads) with the tokenizer, in HF layout,
    its config written as Hugging Face's ``config.json`` is. Returns its parameter count."""
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    hf = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": tok.get_vocab_size(),
        "hidden_size": width,
        "intermediate_size": width * 8 // 3,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": width // 4,
        "max_position_embeddings": POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "bos_token_id": eos,
        "pad_token_id": pad,
    }
    module = Llama(llama_config_from_hf(hf))
    params = jax.jit(module.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"eos_token": EOS, "bos_token": EOS, "pad_token": PAD, "tokenizer_class": "PreTrainedTokenizerFast"}, f
        )
    save_pretrained(folder, FlaxLM(module), params)
    return int(sum(np.size(x) for x in jax.tree.leaves(params)))


def build_world(out: str, *, train: int, held_out: int, sft_pairs: int, vocab: int, width: int, layers: int, seed: int):
    """Stage 1: ``data/train.jsonl`` (RL prompts), ``data/heldout.jsonl`` (evaluation prompts:
    no expression of them is in the training or SFT rows), ``data/sft.jsonl`` (prompt, worked
    solution), the tokenizer and the random model in ``init_model/``. Returns a record."""
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    rows = []
    for i, name in enumerate(TASKS):
        # one large draw, deduplicated by expression: the held-out rows first, the rest after
        pool = generate(name, 4 * (train + held_out + sft_pairs), seed + 1000 * i)
        seen, unique = set(), []
        for r in pool:
            key = (r["metadata"].get("source_dataset"), r["question"])
            if key not in seen:
                seen.add(key)
                unique.append(r)
        rows += unique
    rng = np.random.default_rng(seed)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    # the held-out rows: the first of the shuffled distinct rows (the same mix of 2, 3 and 4 terms)
    evals = rows[:held_out]
    rest = rows[held_out:]
    if len(rest) < train:
        raise ValueError(f"only {len(rest)} distinct training rows for train={train}")
    train_rows = rest[:train]
    # SFT demonstrations: drawn from the training rows (prompts RL also sees; never held-out ones)
    sft_rows = [train_rows[i] for i in rng.integers(0, len(train_rows), sft_pairs)]
    write_jsonl(os.path.join(data, "train.jsonl"), train_rows)
    write_jsonl(os.path.join(data, "heldout.jsonl"), evals)
    write_jsonl(
        os.path.join(data, "sft.jsonl"), [{"prompt": r["prompt"], "response": worked_solution(r)} for r in sft_rows]
    )
    held = {r["question"] for r in evals}
    assert not held & {r["question"] for r in train_rows}, "held-out rows leaked into training"
    tok = train_tokenizer([r["prompt"] + worked_solution(r) for r in train_rows], vocab)
    n_params = build_init_model(os.path.join(out, "init_model"), tok, width, layers, seed)
    prompt_len = [len(tok.encode(r["prompt"]).ids) for r in train_rows + evals]
    response_len = [len(tok.encode(worked_solution(r)).ids) + 1 for r in train_rows]
    terms = lambda rs: {
        n: sum(r["metadata"]["num_terms"] == n for r in rs) for n in sorted({r["metadata"]["num_terms"] for r in rs})
    }
    return {
        "tasks": TASKS,
        "train_rows": len(train_rows),
        "held_out_rows": len(evals),
        "sft_pairs": sft_pairs,
        "train_terms": terms(train_rows),
        "held_out_terms": terms(evals),
        "vocab": tok.get_vocab_size(),
        "parameters": n_params,
        "prompt_tokens_max": max(prompt_len),
        "response_tokens_max": max(response_len),
        "response_tokens_mean": float(np.mean(response_len)),
        "example": {"prompt": train_rows[0]["prompt"], "response": worked_solution(train_rows[0])},
    }


def math_reward_for(tok):
    """The task's reward for the face's evaluation: the library's ``math`` verifier on the
    decoded completions and the rows' ``answer`` column."""
    return TextReward(get_reward("math"), "math", tok)


def evaluate_folder(model_dir: str, out: str, *, prompts: int, n: int, seed: int) -> dict:
    """pass@1 / pass@n of a model folder on the first ``prompts`` held-out prompts (temperature
    1, the library's ``math`` reward on the rows' ``answer`` column)."""
    data = os.path.join(out, "data")
    task, _ = make_text_task(
        model_dir,
        os.path.join(data, "train.jsonl"),
        math_reward_for,
        max_new=MAX_NEW,
        eval_prompts=os.path.join(data, "heldout.jsonl"),
    )
    lm, params = load_pretrained(model_dir)
    prompt, valid = task.evaluation_prompts(prompts)
    key = jax.random.PRNGKey(seed)
    res = evaluate_pass_at_k(lm, params, task, prompt, valid, key, n=n, ks=(1, n), rows=task.evaluation_rows(prompts))
    return {**{k: round(v, 4) for k, v in res.metrics().items()}, "examples": [s[0] for s in res.samples[:4]]}


def run_sft(out: str, *, steps: int, batch: int, lr: float, seed: int, eval_prompts: int, eval_n: int) -> dict:
    """Stage 2: supervised training of the random model on the worked solutions (the library's
    :func:`train_sft` over a text task's demonstrations, what ``rlhf --sft-data`` runs); the
    result in ``sft_model/`` and its held-out pass@1 / pass@n."""
    init = os.path.join(out, "init_model")
    data = os.path.join(out, "data")
    task, _ = make_text_task(
        init,
        os.path.join(data, "train.jsonl"),
        lambda tok: None,  # SFT needs no reward
        max_new=MAX_NEW,
        sft_data=os.path.join(data, "sft.jsonl"),
    )
    lm, params = load_pretrained(init)
    params, losses = train_sft(lm, params, task, jax.random.PRNGKey(seed), steps=steps, batch=batch, learning_rate=lr)
    sft = os.path.join(out, "sft_model")
    save_pretrained(sft, lm, jax.tree.map(np.asarray, params), copy_from=init)
    losses = np.asarray(losses)
    return {
        "sft_steps": steps,
        "sft_loss_first": float(losses[:10].mean()),
        "sft_loss_last": float(losses[-20:].mean()),
        "held_out": evaluate_folder(sft, out, prompts=eval_prompts, n=eval_n, seed=seed + 1),
    }
