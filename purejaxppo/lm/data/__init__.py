"""Prompt files (``.jsonl`` / ``.txt``) as token tables, and preference pairs for reward-model
training."""
