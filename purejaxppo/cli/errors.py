"""What the command line refuses: :class:`UserError` (printed as ``error: ...``, exit 2) and its bounds."""

from __future__ import annotations


class UserError(Exception):
    """A bad flag or combination; the message names the problem and the fix."""


MAX_EPISODES = 100_000  # per seed, all in parallel: bounded so a typo cannot ask for 100 GB
MAX_SEED = 2**32 - 1  # jax.random.PRNGKey keeps 32 bits without x64: 2**32 would repeat seed 0


def check_seed(flag: str, seed) -> None:
    """A seed JAX keeps apart from every other: without x64 ``PRNGKey(2**32) == PRNGKey(0)`` and
    ``PRNGKey(-1) == PRNGKey(2**32 - 1)``."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UserError(
            f"{flag}={seed} must be between 0 and {MAX_SEED:,} (JAX's random keys hold 32 bits of a "
            f"seed: a larger or negative one would repeat another seed's numbers)"
        )


def seed_setting(draws: str):
    """The ``--seed`` field of a command's record (:func:`~purejaxppo.config.fields.setting`):
    ``draws`` says what it seeds, e.g. ``"the SFT stage and of the runs"``."""
    from purejaxppo.config.fields import setting

    return setting(
        0,
        f"the random seed of {draws} (each of --seeds draws its own keys from it)",
        lo=0,
        hi=MAX_SEED,
        why="JAX's random keys hold 32 bits of a seed: a larger or negative one would repeat another seed's numbers",
    )
