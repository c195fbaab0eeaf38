"""The Python text environment: stepped by the host once per turn with the batch's actions as
text (tools, code execution, anything with side effects), observations back as text.

Episode ends follow the control side's contract: ``terminated`` (the task is over: no bootstrap
past it) and ``truncated`` (cut by a limit: the value of the state reached is bootstrapped).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Protocol, Sequence


class TextStep(NamedTuple):
    """One environment step of one episode, as text.

    Attributes:
      observation: text appended to the context after the model's turn, already formatted (e.g.
        a ``<tool_response>`` block, or feedback such as "higher"); "" for none.
      reward: the reward earned by the turn just taken (placed on its last token).
      terminated, truncated: the episode's end, as above.
    """

    observation: str
    reward: float
    terminated: bool
    truncated: bool


class PythonTextEnv(Protocol):
    """A text environment stepped from the host, once per turn, for the whole batch.

    Contract: ``reset(rows)`` starts one episode per row (a row is the dataset row: its columns
    by name, e.g. ``prompt``, ``answer``) and returns each episode's first text (the prompt the
    model sees, with any tool instructions). ``step(actions, active)`` takes the model's turn as
    text for every episode (``actions[i]`` ignored where ``active[i]`` is False: that episode
    already ended) and returns one :class:`TextStep` per episode (anything for inactive ones).
    An exception inside a tool is the environment's to turn into an observation; an exception
    out of ``step`` is a bug in the environment and stops the run with its message.
    """

    def reset(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """Start one episode per row.

        Args:
          rows: the dataset rows, each its columns by name (``prompt``, ``answer``, ...).
        Returns:
          Each episode's first text, one per row.
        """
        ...

    def step(self, actions: Sequence[str], active: Sequence[bool]) -> list[TextStep]:
        """Apply one turn of every episode.

        Args:
          actions: the model's turn as text, one per episode (its stop token dropped).
          active: False where the episode already ended (its action is ignored).
        Returns:
          One :class:`TextStep` per episode (anything where ``active`` is False).
        """
        ...
