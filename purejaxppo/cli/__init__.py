"""The command line, ``python -m purejaxppo COMMAND ...`` (:func:`main`).

Its commands are one table, :data:`purejaxppo.cli.commands.COMMANDS`: ``train`` (PPO runs,
sweeps, PBT populations; ``--resume`` continues any of them), ``eval``, ``plot`` and ``envs``;
``rlhf`` (token-level PPO on a built-in task, or the user's own Hugging Face model folder,
prompts and reward function or reward model), ``export`` (an rlhf run's policy in Hugging Face
layout) and ``reward`` (a reward model trained on preference pairs); ``bench`` (throughput).
"""

from purejaxppo.cli.main import main

__all__ = ["main"]
