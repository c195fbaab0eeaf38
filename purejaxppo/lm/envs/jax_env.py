"""The JAX text environment: pure functions on fixed-size token buffers, so a whole multi-turn
episode (generate a turn, step the environment, append its tokens, generate the next) compiles
into one loop over turns (:func:`purejaxppo.lm.envs.episode.run_episode`), vmapped over the batch.

Episode ends follow the control side's contract: ``terminated`` (the task is over: no bootstrap
past it) and ``truncated`` (cut by a limit: the value of the state reached is bootstrapped).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax


class EnvStep(NamedTuple):
    """One environment step of ONE episode (the driver vmaps over the batch).

    Attributes:
      state: the environment's new state (a pytree of arrays, fixed shapes).
      obs: ``[O]`` int32 token ids of the observation, the first ``length`` valid, the rest
        ignored (pad them with any id).
      length: int32 scalar in ``[0, O]``: how many of ``obs`` are appended to the context.
      reward: float32 scalar earned by the action just taken (placed on its last token).
      terminated, truncated: bool scalars.
    """

    state: Any
    obs: jax.Array
    length: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


class JaxTextEnv(Protocol):
    """A text environment written in JAX, stepped inside the compiled episode.

    Contract: ``reset`` and ``step`` are pure, jittable and vmappable (no Python branching on
    traced values); every array has a fixed shape; ``obs_width`` is static. ``row`` is the
    episode's int32 row id (the environment holds its own table of rows as arrays, or ignores it
    and draws from ``key``). A step after the episode ended is never used by the driver.
    """

    obs_width: int  # O: the observation buffer's width, static

    def reset(self, key: jax.Array, row: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        """The episode's start.

        Args:
          key: the reset's key (one episode's).
          row: int32 scalar, the episode's row id (-1: none).

        Returns:
          ``(state, obs [O] int32, length int32)``: the first observation (the prompt of the
          episode, appended after any fixed prompt).
        """
        ...

    def step(self, key: jax.Array, state: Any, action: jax.Array, length: jax.Array) -> EnvStep:
        """The model's turn applied to the state.

        Args:
          key: this step's key; state: the episode's state.
          action: ``[A]`` int32, the turn's tokens; the first ``length`` valid (its stop token
            included when it stopped), the rest padding.
          length: int32 scalar in ``[1, A]``.

        Returns:
          An :class:`EnvStep`.
        """
        ...
