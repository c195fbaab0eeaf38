"""Token-level PPO for language models: the pure token functions (:mod:`purejaxppo.lm.tokens`),
the models (a tiny transformer, GPT-2 and the Llama family behind the ``CausalLM`` protocol),
sampling with a KV cache, the iteration's phases (:mod:`purejaxppo.lm.token_phases`,
:mod:`purejaxppo.lm.token_update`) and their composition (:mod:`purejaxppo.lm.token_ppo`), with
GAE or a group baseline (GRPO, RLOO: :mod:`purejaxppo.lm.group_advantages`) as the advantages.

``load_pretrained(folder)`` reads a local Hugging Face checkpoint and ``save_pretrained(out, ...)``
writes one back (:mod:`purejaxppo.lm.pretrained`).
"""

from purejaxppo.lm.pretrained import CheckpointFolderError, load_pretrained, save_pretrained

__all__ = ["CheckpointFolderError", "load_pretrained", "save_pretrained"]
