"""Language-model helpers for token-level PPO (a tiny causal transformer for experiments/tests).

The pure token-PPO functions live in :mod:`purejaxppo.lm.tokens`; this package only holds a model.
"""
