"""Algorithms built around the one PPO step rather than inside it: population-based training's
exploit/explore stage (:mod:`~purejaxppo.algorithms.pbt`). Pure ``jnp`` functions over a whole
population; the run kind that composes one with the step lives in ``purejaxppo/programs``."""
