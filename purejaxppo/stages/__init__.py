"""The PPO stages as pure functions: distributions, rollout, GAE, losses, the minibatch
update, running statistics, observation layouts, argument checks.

Each module is importable and testable alone; none knows about agents or the host. Devices
enter only as a named axis (``update``'s ``pmean``, ``normalize``'s moments, ``device_rows``).
"""
