"""Rewards for token-level PPO: reward models (an LM trunk with a scalar head on the last valid
token), their Bradley-Terry training, rewards written as Python functions on text (TRL's
convention, ``fn(prompts, completions, **columns) -> list[float | None]``: the dataset row's
columns by name), and built-in verifiable rewards: ``get("math")``, ``get("reasoning-gym")``,
``get("format", template=...)``, ``get("length", limit=...)``, several at once with
``combine([(fn_or_name, weight, name), ...])``."""

from purejaxppo.lm.rewards.bradley_terry import PairBatch, bradley_terry_loss, pair_loss, reward_step
from purejaxppo.lm.rewards.math_answers import MathReward, final_answer
from purejaxppo.lm.rewards.python_reward import TextReward, load_reward_function
from purejaxppo.lm.rewards.reward_columns import MissingExtraError
from purejaxppo.lm.rewards.reward_mix import BUILTIN, CombinedReward, combine, get
from purejaxppo.lm.rewards.reward_model import load_reward_model, make_reward_fn, save_reward_model
from purejaxppo.lm.rewards.rule_rewards import FormatReward, LengthReward, ReasoningGymReward

__all__ = [
    "PairBatch",
    "bradley_terry_loss",
    "pair_loss",
    "reward_step",
    "TextReward",
    "load_reward_function",
    "load_reward_model",
    "make_reward_fn",
    "save_reward_model",
    "get",
    "combine",
    "CombinedReward",
    "BUILTIN",
    "MathReward",
    "FormatReward",
    "LengthReward",
    "ReasoningGymReward",
    "final_answer",
    "MissingExtraError",
]
