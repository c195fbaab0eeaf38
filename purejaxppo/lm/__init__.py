"""Token-level PPO for language models: the public face.

Import from here (``import purejaxppo.lm as lm``); the subpackages behind it are the
implementation and may move. They are, bottom to top (each imports only the ones before it):

* ``models``: the :class:`CausalLM` protocol and the module calling convention
  (:class:`CausalModule`), TinyLM, GPT-2, the Llama family, attention and the KV cache, LoRA,
  sampling with the cache.
* ``checkpoints``: Hugging Face folders in and out (GPT-2 and Llama layouts), the tokenizer and
  its chat template.
* ``ppo``: the token stages (KL-shaped rewards, masked GAE, the clipped loss), group advantages
  (GRPO, RLOO), experience, the update, the iteration's phases and their composition
  (:func:`make_token_ppo`), the data-parallel split, export of a trained policy, evaluation by
  pass@k.
* ``rewards``: reward models, the Bradley-Terry loss and step, rewards written as Python
  functions on text (each dataset row's columns reaching them by name), built-in verifiable
  rewards (math, reasoning-gym, format, length) and their weighted combination.
* ``envs``: text environments for multi-turn episodes (JAX ones stepped inside one compiled
  episode, Python ones from the host), the episodes' masks and credit, PPO on episodes.
* ``data``: prompt files, datasets of rows with columns (JSONL, Parquet, saved ``datasets``
  folders, reasoning-gym generators) and preference pairs.
* ``tasks``: the task protocol (:class:`Task`), the built-in tasks and the user's own data as a task.
* ``sft``: supervised fine-tuning and evaluation by sampling.

Shapes: a batch is ``tokens [B, L]`` with ``valid [B, L]`` (False on padding); prompts are
LEFT-padded ``[B, P]``, responses RIGHT-padded ``[B, T]`` with ``mask [B, T]`` (True on response
tokens up to and including EOS). Logits come back ``[B, L, V]`` float32.

A whole iteration::

    import jax, purejaxppo.lm as lm

    task = lm.make_task("reverse")
    policy, params = lm.init_tiny_lm(task, jax.random.PRNGKey(0))  # FlaxLM(TinyLM), {"params": ...}
    reward = lambda reward_params, *batch: task.score(*batch)  # (prompt, valid, response, mask) -> [B]
    cfg = lm.TokenPPOConfig(batch_size=32, max_new_tokens=task.max_new, stop_ids=task.stop_ids)
    ppo = lm.make_token_ppo(cfg, policy, reward, prompts=task.prompts)
    state = ppo.init(jax.random.PRNGKey(1), params, params)  # policy, frozen reference
    state, metrics = jax.jit(ppo.iteration)(state)

Every name by group, with its shapes, and the same iteration composed from its phases:
docs/api.md. Each name's Args / Returns / Raises: ``help(lm.NAME)``.
"""

from purejaxppo.lm.checkpoints.gpt2_hf import load_gpt2, save_gpt2
from purejaxppo.lm.checkpoints.hf_folder import CheckpointFolderError
from purejaxppo.lm.checkpoints.pretrained import (
    load_pretrained,
    load_sequence_classifier,
    save_pretrained,
    save_sequence_classifier,
)
from purejaxppo.lm.checkpoints.tokenizer import TextTokenizer, load_tokenizer, strip_special
from purejaxppo.lm.data.preferences import read_pairs, split_pairs, tokenize_pairs
from purejaxppo.lm.data.prompts import PromptTable, Record, encode_prompts, read_records, table_prompts
from purejaxppo.lm.data.row_sources import read_rows, split_rows
from purejaxppo.lm.models.adapters import FlaxLM, FullRecompute
from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.models.kv_cache import KVCache
from purejaxppo.lm.models.llama import Llama
from purejaxppo.lm.checkpoints.llama_hf import llama_config_from_hf, llama_config_to_hf
from purejaxppo.lm.models.llama_config import LlamaConfig
from purejaxppo.lm.models.lora import Adapters, lora_attach, lora_init, lora_merge
from purejaxppo.lm.models.lora import count as count_params
from purejaxppo.lm.models.causal_lm import CausalLM, CausalModule
from purejaxppo.lm.models.sampling import Response, filter_logits, sample_response, sample_tokens
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.ppo.data_parallel import AXIS as DATA_AXIS
from purejaxppo.lm.ppo.data_parallel import data_parallel, fsdp_sharding, prompt_mesh
from purejaxppo.lm.ppo.experience import Models
from purejaxppo.lm.ppo.experience import collect as collect_experience
from purejaxppo.lm.ppo.experience import filtered_logprobs
from purejaxppo.lm.ppo.experience import finish as finish_experience
from purejaxppo.lm.ppo.experience import sample as sample_experience
from purejaxppo.lm.ppo.experience import score as score_experience
from purejaxppo.lm.ppo.pass_at_k import correct_counts, mean_at_k, pass_at_k
from purejaxppo.lm.ppo.pass_at_k_eval import PassAtK, evaluate_pass_at_k, sample_and_score
from purejaxppo.lm.ppo.group_advantages import group_advantages, k3_kl, repeat_prompts, token_advantages
from purejaxppo.lm.ppo.policy_export import merged_policy, save_policy
from purejaxppo.lm.ppo.recipes import RECIPES, apply_recipe
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, validate_token_config
from purejaxppo.lm.ppo.token_phases import finish_phase, sample_phase, score_phase
from purejaxppo.lm.ppo.token_records import Experience, TokenBatch
from purejaxppo.lm.ppo.token_ppo import TokenPPO, TokenPPOState, init_state, make_token_ppo, policy_params
from purejaxppo.lm.ppo.token_loss import aggregation_weights, token_ppo_loss
from purejaxppo.lm.ppo.token_stages import (
    adaptive_kl_update,
    kl_penalty,
    last_valid_mask,
    masked_whiten,
    sequence_kl,
    shaped_rewards,
    shift_right,
    token_entropy,
    token_gae,
    token_logprobs,
)
from purejaxppo.lm.ppo.token_update import Devices, trained_params, update_phase
from purejaxppo.lm.rewards.bradley_terry import (
    PairBatch,
    bradley_terry_loss,
    pair_loss,
    pair_rewards,
    reward_optimizer,
    reward_step,
)
from purejaxppo.lm.rewards.python_reward import TextReward, load_reward_function
from purejaxppo.lm.rewards.reward_mix import CombinedReward
from purejaxppo.lm.rewards.reward_mix import combine as combine_rewards
from purejaxppo.lm.rewards.reward_mix import get as get_reward
from purejaxppo.lm.rewards.reward_model import load_reward_model, make_reward_fn, save_reward_model
from purejaxppo.lm.envs.char_tokenizer import CharTokenizer
from purejaxppo.lm.envs.episode import Episode, EpisodeConfig, run_episode
from purejaxppo.lm.envs.episode_credit import (
    episode_gae,
    episode_rewards,
    episode_sequences,
    finish_episode,
    score_episode,
)
from purejaxppo.lm.envs.episode_host import host_jax_episode, host_python_episode
from purejaxppo.lm.envs.episode_ppo import EpisodePPO, make_episode_ppo
from purejaxppo.lm.envs.guess_number import GuessNumber
from purejaxppo.lm.envs.jax_env import EnvStep, JaxTextEnv
from purejaxppo.lm.envs.python_env import PythonTextEnv, TextStep
from purejaxppo.lm.envs.tool_calls import Call, CallError, ToolFormat, Turn, parse_turn
from purejaxppo.lm.envs.tool_calls import get_format as tool_format
from purejaxppo.lm.envs.tool_env import ToolCounts, ToolEnv
from purejaxppo.lm.envs.calculator import CalculatorError, calculator, calculator_env
from purejaxppo.lm.sft.sft_training import evaluate_policy, init_tiny_lm, sft_loss, train_sft
from purejaxppo.lm.tasks.builtin_tasks import GrammarTask, ReverseTask, Task, make_task
from purejaxppo.lm.tasks.text_task import TextTask, make_text_task

__all__ = [
    # models: the protocol, the families, sampling
    "CausalLM",
    "CausalModule",
    "FlaxLM",
    "FullRecompute",
    "TinyLM",
    "GPT2",
    "Llama",
    "LlamaConfig",
    "KVCache",
    "sample_response",
    "Response",
    "sample_tokens",
    "filter_logits",
    # checkpoints: Hugging Face folders, tokenizer, chat template
    "load_pretrained",
    "save_pretrained",
    "load_sequence_classifier",
    "save_sequence_classifier",
    "load_gpt2",
    "save_gpt2",
    "llama_config_from_hf",
    "llama_config_to_hf",
    "CheckpointFolderError",
    "load_tokenizer",
    "TextTokenizer",
    "strip_special",
    # LoRA
    "Adapters",
    "lora_init",
    "lora_attach",
    "lora_merge",
    "count_params",
    # the iteration
    "TokenPPOConfig",
    "validate_token_config",
    "RECIPES",
    "apply_recipe",
    "TokenPPO",
    "TokenPPOState",
    "make_token_ppo",
    "init_state",
    "policy_params",
    "trained_params",
    "Models",
    "Devices",
    "sample_phase",
    "score_phase",
    "finish_phase",
    "update_phase",
    "data_parallel",
    "DATA_AXIS",
    "prompt_mesh",
    "fsdp_sharding",
    # the stage functions
    "sample_experience",
    "collect_experience",
    "score_experience",
    "finish_experience",
    "Experience",
    "TokenBatch",
    "filtered_logprobs",
    "token_logprobs",
    "token_entropy",
    "shift_right",
    "masked_whiten",
    "last_valid_mask",
    "kl_penalty",
    "sequence_kl",
    "shaped_rewards",
    "token_gae",
    "aggregation_weights",
    "token_ppo_loss",
    "adaptive_kl_update",
    "group_advantages",
    "token_advantages",
    "repeat_prompts",
    "k3_kl",
    # rewards
    "load_reward_model",
    "save_reward_model",
    "make_reward_fn",
    "load_reward_function",
    "TextReward",
    "get_reward",
    "combine_rewards",
    "CombinedReward",
    "PairBatch",
    "bradley_terry_loss",
    "pair_rewards",
    "pair_loss",
    "reward_optimizer",
    "reward_step",
    # multi-turn episodes: JAX environments, the compiled episode, masks and credit
    "JaxTextEnv",
    "EnvStep",
    "Episode",
    "EpisodeConfig",
    "run_episode",
    "host_jax_episode",
    "host_python_episode",
    "episode_sequences",
    "episode_rewards",
    "episode_gae",
    "score_episode",
    "finish_episode",
    "EpisodePPO",
    "make_episode_ppo",
    "GuessNumber",
    "CharTokenizer",
    # Python environments and tools: the host steps them once per turn
    "PythonTextEnv",
    "TextStep",
    "ToolEnv",
    "ToolCounts",
    "ToolFormat",
    "tool_format",
    "parse_turn",
    "Turn",
    "Call",
    "CallError",
    "calculator",
    "CalculatorError",
    "calculator_env",
    # data and tasks
    "read_records",
    "read_rows",
    "split_rows",
    "encode_prompts",
    "table_prompts",
    "PromptTable",
    "Record",
    "read_pairs",
    "tokenize_pairs",
    "split_pairs",
    "Task",
    "make_task",
    "GrammarTask",
    "ReverseTask",
    "TextTask",
    "make_text_task",
    # SFT and evaluation
    "sft_loss",
    "train_sft",
    "init_tiny_lm",
    "evaluate_policy",
    "evaluate_pass_at_k",
    "PassAtK",
    "sample_and_score",
    "pass_at_k",
    "mean_at_k",
    "correct_counts",
    # export
    "merged_policy",
    "save_policy",
]
