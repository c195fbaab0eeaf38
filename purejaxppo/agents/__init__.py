"""Agents: what decides. An :class:`~purejaxppo.agents.agent.Agent` is a named tuple of pure
functions with an explicit carry; the training step is written once against it."""
