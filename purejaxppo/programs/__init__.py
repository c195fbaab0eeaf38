"""Run kinds: compiled programs that implement the run protocol
(:class:`~purejaxppo.run.protocol.RunProgram`), their front doors, and one registered
:class:`~purejaxppo.run.kinds.RunKind` each (:mod:`purejaxppo.programs.kinds`, loaded here so
that any import of this package has every kind registered)."""

from purejaxppo.programs import kinds  # noqa: F401
