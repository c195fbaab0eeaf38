"""purejaxppo: functional PPO in JAX/Flax."""

from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.agents.registry import register_agent
from purejaxppo.agents.registry import validate_config as validate  # the config's checks, then its agent's
from purejaxppo.step.train import PPO, Batch, RunnerState, make_ppo, make_train, ppo_loss_fn

__all__ = [
    "ConfigError",
    "PPOConfig",
    "validate",
    "register_agent",
    "PPO",
    "Batch",
    "RunnerState",
    "make_ppo",
    "make_train",
    "ppo_loss_fn",
]
__version__ = "0.1.0"
