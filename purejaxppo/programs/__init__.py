"""Run kinds: compiled programs that implement the run protocol
(:class:`~purejaxppo.run.protocol.RunProgram`): plain runs and sweeps, PBT, and evaluation
during training."""
