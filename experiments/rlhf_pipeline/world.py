"""Stages 1-3 of the pipeline: the corpus, the BPE tokenizer and a random Llama in a Hugging Face
folder; the SFT model (supervised from scratch on the corpus); the preference pairs sampled
from the SFT model and labelled by the hidden true objective with Bradley-Terry noise."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

import objective as obj
from purejaxppo.lm import (
    FlaxLM,
    Llama,
    LlamaConfig,
    load_pretrained,
    load_tokenizer,
    make_text_task,
    sample_response,
    save_pretrained,
    strip_special,
    train_sft,
)

EOS, PAD = "<|endoftext|>", "<pad>"
MAX_NEW = 24  # response budget: the longest answer of 8 adjectives fits
POSITIONS = 48


def write_jsonl(path: str, rows) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


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


def build_init_model(folder: str, tok, width: int, layers: int, seed: int) -> None:
    """A random Llama (GQA: 4 query heads, 2 key/value heads) with the tokenizer, in HF layout."""
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    cfg = LlamaConfig(
        model_type="llama",
        vocab_size=tok.get_vocab_size(),
        hidden_size=width,
        intermediate_size=width * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=width // 4,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=True,
        extra=json.dumps({"eos_token_id": eos, "bos_token_id": eos, "pad_token_id": pad}),
    )
    module = Llama(cfg)
    params = jax.jit(module.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"eos_token": EOS, "bos_token": EOS, "pad_token": PAD, "tokenizer_class": "PreTrainedTokenizerFast"}, f
        )
    save_pretrained(folder, FlaxLM(module), params)


def build_world(out: str, *, corpus_size: int, vocab: int, width: int, layers: int, seed: int) -> dict:
    """Stage 1: corpus (``data/sft.jsonl``, ``data/prompts.jsonl``), tokenizer and the random model
    in ``init_model/``. Returns a record of the sizes."""
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    pairs = obj.corpus(corpus_size, seed)
    write_jsonl(os.path.join(data, "sft.jsonl"), [{"prompt": p, "response": r} for p, r in pairs])
    write_jsonl(os.path.join(data, "prompts.jsonl"), [{"prompt": p} for p in obj.prompts()])
    tok = train_tokenizer([p + r for p, r in pairs], vocab)
    build_init_model(os.path.join(out, "init_model"), tok, width, layers, seed)
    lengths = [len(tok.encode(r).ids) + 1 for _, r in pairs]
    return {
        "corpus_pairs": corpus_size,
        "vocab": tok.get_vocab_size(),
        "response_tokens_max": max(lengths),
        "response_tokens_mean": float(np.mean(lengths)),
        "corpus_true_mean": float(np.mean([obj.true_score(r) for _, r in pairs])),
    }


def run_sft(out: str, *, steps: int, batch: int, lr: float, seed: int) -> dict:
    """Stage 2: supervised training of the random model on the corpus (the library's
    :func:`train_sft` over a text task's demonstrations); the result in ``sft_model/``."""
    init = os.path.join(out, "init_model")
    data = os.path.join(out, "data")
    task, _ = make_text_task(
        init,
        os.path.join(data, "prompts.jsonl"),
        lambda tok: None,  # SFT needs no reward
        max_new=MAX_NEW,
        sft_data=os.path.join(data, "sft.jsonl"),
    )
    lm, params = load_pretrained(init)
    params, losses = train_sft(lm, params, task, jax.random.PRNGKey(seed), steps=steps, batch=batch, learning_rate=lr)
    save_pretrained(os.path.join(out, "sft_model"), lm, jax.tree.map(np.asarray, params), copy_from=init)
    losses = np.asarray(losses)
    return {
        "sft_steps": steps,
        "sft_loss_first": float(losses[:10].mean()),
        "sft_loss_last": float(losses[-20:].mean()),
    }


class Sampler:
    """Temperature-1 responses of a model folder's architecture to the prompt file's prompts,
    decoded as the text reward decodes them (up to the first EOS, padding dropped)."""

    def __init__(self, model_dir: str, prompt_file: str):
        self.tok = load_tokenizer(model_dir)
        self.task, _ = make_text_task(model_dir, prompt_file, lambda tok: None, max_new=MAX_NEW)
        self.lm, self.sft_params = load_pretrained(model_dir)
        table = self.task.table
        self.prompt_tokens, self.prompt_valid = jnp.asarray(table.tokens), jnp.asarray(table.valid)
        self.texts = list(table.texts)
        stop, pad = jnp.asarray(self.tok.stop_ids), self.tok.pad_id

        def sample(params, key, prompt, valid):
            return sample_response(self.lm, params, key, prompt, valid, MAX_NEW, stop, pad)

        self.sample_fn = jax.jit(sample)  # (params, key, prompt, valid) -> (tokens, logp, mask)

    def rows(self, reps: int):
        """``(prompt [N*reps, P], valid, texts)``: every prompt ``reps`` times."""
        idx = np.tile(np.arange(len(self.texts)), reps)
        return self.prompt_tokens[idx], self.prompt_valid[idx], [self.texts[i] for i in idx]

    def sample(self, params, key, prompt, valid):
        response, _, mask = self.sample_fn(params, key, prompt, valid)
        return response, mask

    def decode(self, response) -> list:
        stops, pad = self.tok.stop_ids, self.tok.pad_id
        return [self.tok.decode(strip_special(r.tolist(), stops, pad)) for r in np.asarray(response)]


def make_pairs(out: str, *, n_pairs: int, noise_scale: float, seed: int) -> dict:
    """Stage 3: two SFT samples per prompt, the preferred one drawn by Bradley-Terry on the true
    objective, ``P(a > b) = sigmoid((true_a - true_b) / noise_scale)`` (ties: a fair coin)."""
    data = os.path.join(out, "data")
    sampler = Sampler(os.path.join(out, "sft_model"), os.path.join(data, "prompts.jsonl"))
    rng = np.random.default_rng(seed + 7)
    reps = -(-n_pairs // len(sampler.texts))
    prompt, valid, texts = sampler.rows(reps)
    key = jax.random.PRNGKey(seed + 11)
    a = sampler.decode(sampler.sample(sampler.sft_params, jax.random.fold_in(key, 0), prompt, valid)[0])
    b = sampler.decode(sampler.sample(sampler.sft_params, jax.random.fold_in(key, 1), prompt, valid)[0])
    rows, agree, decided = [], 0, 0
    for p, x, y in list(zip(texts, a, b))[:n_pairs]:
        tx, ty = obj.true_score(x), obj.true_score(y)
        first = rng.random() < 1.0 / (1.0 + np.exp(-(tx - ty) / noise_scale))
        chosen, rejected = (x, y) if first else (y, x)
        if tx != ty:
            decided += 1
            agree += (tx > ty) == first
        rows.append({"prompt": p, "chosen": chosen, "rejected": rejected})
    write_jsonl(os.path.join(data, "pairs.jsonl"), rows)
    scores = [obj.true_score(r) for r in a + b]
    return {
        "pairs": len(rows),
        "pairs_untied": decided,
        "label_agreement_with_true": agree / max(decided, 1),
        "sft_sample_true_mean": float(np.mean(scores)),
        "sft_sample_examples": a[:6],
        "noise_scale": noise_scale,
    }
