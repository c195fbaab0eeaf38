"""The task protocol: what SFT, evaluation and token-level PPO need of a task. The built-in
tasks (:mod:`purejaxppo.lm.tasks.builtin_tasks`) and the user's own data
(:class:`purejaxppo.lm.tasks.text_task.TextTask`) meet it, and so can a user's own class.
"""

from __future__ import annotations

from typing import Protocol


class Task(Protocol):
    """What SFT, evaluation and token-level PPO need of a task:
    :class:`~purejaxppo.lm.tasks.builtin_tasks.GrammarTask`,
    :class:`~purejaxppo.lm.tasks.builtin_tasks.ReverseTask`,
    :class:`~purejaxppo.lm.tasks.text_task.TextTask`, or a user's own.

    A task is a static argument under ``jit`` (hashable: a frozen dataclass, or hashed by
    identity); its array methods are pure and jittable. Wire one into token-level PPO as
    ``make_token_ppo(config, lm, lambda _, *b: task.score(*b), prompts=task.prompts)``.

    Attributes:
      name: the task's name.
      vocab_size: ``V``, the model's vocabulary.
      pad_id: the id padding is written with.
      stop_ids: tuple of the ids that end a response (EOS).
      prompt_len: ``P``; prompts are LEFT-padded to it.
      max_new: ``T``, the response budget.
    """

    name: str
    vocab_size: int
    pad_id: int
    stop_ids: tuple
    prompt_len: int
    max_new: int

    def prompts(self, key, batch: int):
        """Draw a batch of prompts.

        Args:
          key: a PRNG key.
          batch: ``B`` (static).

        Returns:
          ``(prompt [B, P] int32, prompt_valid [B, P] bool)``, LEFT-padded with ``pad_id``.
        """

    def demonstrations(self, key, batch: int):
        """Draw prompts with a good response each (SFT data). The prompts follow the same law
        as :meth:`prompts` (the same key gives the same prompts).

        Args:
          key: a PRNG key.
          batch: ``B`` (static).

        Returns:
          ``(prompt [B, P] int32, prompt_valid [B, P] bool, response [B, T] int32,
          response_mask [B, T] bool)``, the response including its EOS, RIGHT-padded with
          ``pad_id``.
        """

    def score(self, prompt, prompt_valid, response, response_mask):
        """The task's reward. No missing-EOS penalty here (the PPO configuration adds it).

        Args:
          prompt: ``[B, P]`` int32, LEFT-padded.
          prompt_valid: ``[B, P]`` bool.
          response: ``[B, T]`` int32; the response is the tokens where ``response_mask`` is True.
          response_mask: ``[B, T]`` bool; for a generated response True up to and including the
            first stop token.

        Returns:
          ``[B]`` float32.
        """

    def diagnostics(self, prompt, prompt_valid, response, response_mask):
        """Task-specific metrics of a batch of responses.

        Args:
          prompt: ``[B, P]`` int32.
          prompt_valid: ``[B, P]`` bool.
          response: ``[B, T]`` int32.
          response_mask: ``[B, T]`` bool.

        Returns:
          ``{name: scalar}``, means over the batch (``{}`` for none).
        """

    def decode(self, tokens) -> str:
        """Host side, for printing.

        Args:
          tokens: a 1-D token sequence; pads are skipped.

        Returns:
          The text.
        """
