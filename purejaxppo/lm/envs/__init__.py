"""Text environments for the language model: tokens (JAX) or text (Python) as observations and
actions, one interface per kind; multi-turn episodes are built on them in ``lm.ppo``."""
