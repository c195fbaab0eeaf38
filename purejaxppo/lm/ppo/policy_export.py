"""A trained token-level PPO state out as a Hugging Face model folder: the policy's parameters
(LoRA adapters merged into the frozen base, ``W + alpha/r * A @ B``) written in the layout of
the model family they came from.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import numpy as np

from purejaxppo.lm.checkpoints.pretrained import save_pretrained
from purejaxppo.lm.ppo.token_ppo import TokenPPOState, policy_params


def merged_policy(state: TokenPPOState) -> Any:
    """The policy's parameters of one run, LoRA merged.

    Args:
      state: ONE run's :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPOState` (no leading runs
        axis: index a ``[S, ...]`` state first).
    Returns:
      The policy's parameter tree as NumPy (host) arrays.
    """
    return jax.tree.map(np.asarray, jax.jit(policy_params)(state))


def save_policy(out_dir: str | os.PathLike, lm: Any, state: TokenPPOState, copy_from: Optional[str] = None) -> None:
    """Write ``state``'s policy into ``out_dir`` as the family of ``lm`` writes it
    (``config.json``, ``model.safetensors``; no value head), LoRA merged.

    Args:
      out_dir: the folder to write (created; files in it are overwritten).
      lm: the :class:`~purejaxppo.lm.models.causal_lm.CausalLM` the state was trained with, as
        :func:`~purejaxppo.lm.checkpoints.pretrained.load_pretrained` returned it.
      state: one run's :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPOState`.
      copy_from: the Hugging Face folder the model was loaded from; its tokenizer files are
        copied beside the weights, so ``out_dir`` loads on its own.
    """
    save_pretrained(out_dir, lm, merged_policy(state), copy_from=copy_from)
