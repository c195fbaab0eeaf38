"""Language models behind one protocol: :class:`~purejaxppo.lm.models.causal_lm.CausalLM`, the
module calling convention, TinyLM, GPT-2, the Llama family, attention, the KV cache, LoRA, the
bf16 matmul, the decode layout and sampling with the cache. Imports nothing else of ``lm``."""
