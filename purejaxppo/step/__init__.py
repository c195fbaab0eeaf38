"""The one training step, composed once from the stages and an agent
(:func:`~purejaxppo.step.train.make_ppo`), and greedy evaluation of trained policies."""
