"""Shared test fixtures for language models, made locally (nothing downloaded).

* :func:`train_bpe`: a byte-level BPE ``tokenizers.Tokenizer`` trained on a small synthetic corpus.
* :func:`write_tokenizer`: ``tokenizer.json`` + ``tokenizer_config.json`` (EOS, pad, a chat
  template) into a model folder.
* :func:`tiny_gpt2_folder`, :func:`tiny_llama_folder`: a random-weight GPT-2 or Llama-family
  checkpoint in Hugging Face's layout with that tokenizer: what ``rlhf --model DIR`` and
  ``load_pretrained`` read.
"""

from __future__ import annotations

import json
import os

EOS, PAD = "<|endoftext|>", "<pad>"
# a Jinja chat template in the style of Hugging Face's (role headers, the generation prompt)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<' + m['role'] + '>' + m['content'] + eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
)
WORDS = (
    "one two three four five six seven eight nine ten plus minus equals what is the answer reverse "
    "apple banana cherry red green blue cat dog bird hello world yes no"
).split()


def corpus(n: int = 400, seed: int = 0) -> list:
    """Deterministic lines of the synthetic words (a few to a dozen each)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) for _ in range(n)]


def train_bpe(vocab_size: int = 320, lines=None):
    """A byte-level BPE tokenizer (exact text round trip) with ``EOS`` and ``PAD`` as special tokens."""
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
    tok.train_from_iterator(lines or corpus(), trainer)
    return tok


def write_tokenizer(folder, tok=None, chat_template: str | None = CHAT_TEMPLATE, pad: bool = True) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` (eos/pad tokens, ``chat_template``) in ``folder``."""
    tok = tok or train_bpe()
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    cfg = {"eos_token": EOS, "bos_token": EOS, "tokenizer_class": "GPT2Tokenizer"}
    if pad:
        cfg["pad_token"] = PAD
    if chat_template:
        cfg["chat_template"] = chat_template
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)


def tiny_gpt2_folder(
    folder,
    n_positions: int = 64,
    n_embd: int = 16,
    n_layer: int = 1,
    n_head: int = 2,
    seed: int = 0,
    **tokenizer_kwargs,
) -> str:
    """A random GPT-2 (its vocabulary = the tokenizer's) and the tokenizer, in ``folder``."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.lm.models.gpt2 import GPT2
    from purejaxppo.lm.checkpoints.gpt2_hf import save_gpt2

    tok = train_bpe()
    model = GPT2(
        vocab_size=tok.get_vocab_size(), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head
    )
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    save_gpt2(str(folder), model, params)
    write_tokenizer(folder, tok, **tokenizer_kwargs)
    return str(folder)


def tiny_llama_folder(folder, family: str = "llama", max_positions: int = 64, seed: int = 0, **tokenizer_kwargs) -> str:
    """A random Llama-family checkpoint (``family``: one of tests/_llama_reference.py's CONFIGS,
    its vocabulary the tokenizer's, EOS/BOS the tokenizer's EOS id) and the tokenizer, in ``folder``."""
    import pathlib

    from _llama_reference import CONFIGS, hf_weights, write_checkpoint

    tok = train_bpe()
    eos = tok.token_to_id(EOS)
    cfg = CONFIGS[family] | dict(
        vocab_size=tok.get_vocab_size(), eos_token_id=eos, bos_token_id=eos, max_position_embeddings=max_positions
    )
    write_checkpoint(pathlib.Path(folder), cfg, hf_weights(cfg, seed=seed))
    write_tokenizer(folder, tok, **tokenizer_kwargs)
    return str(folder)
