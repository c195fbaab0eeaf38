"""purejaxppo: functional PPO in JAX/Flax."""

from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.step.train import PPO, Batch, RunnerState, make_ppo, make_train, ppo_loss_fn

__all__ = ["ConfigError", "PPOConfig", "validate", "PPO", "Batch", "RunnerState", "make_ppo", "make_train",
           "ppo_loss_fn"]
__version__ = "0.1.0"
