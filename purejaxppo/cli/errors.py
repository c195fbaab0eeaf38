"""What the command line refuses: :class:`UserError` (printed as ``error: ...``, exit 2) and its bounds."""

from __future__ import annotations


class UserError(Exception):
    """A bad flag or combination; the message names the problem and the fix."""


MAX_EPISODES = 100_000  # per seed, all in parallel: bounded so a typo cannot ask for 100 GB
