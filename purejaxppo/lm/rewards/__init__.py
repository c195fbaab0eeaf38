"""Rewards for token-level PPO: reward models (an LM trunk with a scalar head on the last valid
token), their Bradley-Terry training, and rewards written as Python functions on text."""

from purejaxppo.lm.rewards.bradley_terry import PairBatch, bradley_terry_loss, pair_loss, reward_step
from purejaxppo.lm.rewards.python_reward import TextReward, load_reward_function
from purejaxppo.lm.rewards.reward_model import load_reward_model, make_reward_fn, save_reward_model

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
]
