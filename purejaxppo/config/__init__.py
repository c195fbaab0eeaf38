"""Configuration: the one PPO config pytree, per-environment presets, published baselines.

The lowest layer: every other folder may import it; it imports nothing of the package.
"""

from purejaxppo.config.ppo_config import ConfigError, PPOConfig, check_structure, validate

__all__ = ["ConfigError", "PPOConfig", "check_structure", "validate"]
