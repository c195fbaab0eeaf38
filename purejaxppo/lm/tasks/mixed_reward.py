"""Python rewards and a reward model summed into one score (``rlhf --reward ... --reward-model DIR
--reward-weights W1,...,Wn,Wm``), inside the compiled iteration.

The score of a response is ``text + weight * model``: ``text`` the Python rewards' weighted sum
(a :class:`~purejaxppo.lm.rewards.python_reward.TextReward`, called on the host through its
callback, each reward's own weight applied there), ``model`` the reward model's score computed
in the program (its parameters ride in the state as a lone reward model's do). The reward
model's scores also go to the text reward's callback, only to be logged beside the Python
rewards' columns (``reward_model_mean`` in metrics.csv); they are added in the program.
"""

from __future__ import annotations

import jax.numpy as jnp

from purejaxppo.lm.tasks.text_task import BoundReward


class MixedReward(BoundReward):
    """A reward model beside Python rewards, as one :class:`~purejaxppo.lm.tasks.text_task.BoundReward`.

    ``fn(params, prompt [B, P], prompt_valid [B, P], response [B, T], response_mask [B, T],
    rows=None [B]) -> [B]`` float32 ``= text(..., rows) + weight * model.fn(params, ...)``:
    jittable (the Python part through ``jax.pure_callback``), ``params`` the reward model's.
    Bound (``__call__``), it uses :attr:`params` (the evaluations').

    Args:
      text: the Python rewards, a :class:`~purejaxppo.lm.rewards.python_reward.TextReward`
        (their weights already inside it).
      model: the reward model, a :class:`~purejaxppo.lm.tasks.text_task.BoundReward`.
      weight: the reward model's weight.

    Attributes:
      text, model, weight: as given; params, lm: the reward model's (a separate critic starts
        from it as from a lone reward model).
    """

    def __init__(self, text, model: BoundReward, weight: float):
        self.text, self.model, self.weight = text, model, float(weight)

        def fn(params, prompt, prompt_valid, response, response_mask, rows=None):
            scores = model.fn(params, prompt, prompt_valid, response, response_mask).astype(jnp.float32)
            python = text(prompt, prompt_valid, response, response_mask, rows=rows, model_scores=scores)
            return python + self.weight * scores

        super().__init__(fn, model.params, model.lm)

    @property
    def error(self):
        """The Python part's first failure (None: none)."""
        return self.text.error

    def bind_rows(self, rows) -> None:
        """The dataset's rows, for the Python part's columns
        (:meth:`~purejaxppo.lm.rewards.python_reward.TextReward.bind_rows`)."""
        self.text.bind_rows(rows)

    def raise_if_failed(self) -> None:
        """The Python part's failure, raised (host side, after a compiled call)."""
        self.text.raise_if_failed()

    def __call__(self, prompt, prompt_valid, response, response_mask, rows=None):
        return self.fn(self.params, prompt, prompt_valid, response, response_mask, rows=rows)
