"""The command line: ``python -m purejaxppo train|eval|plot|bench|envs ...``."""

from purejaxppo.cli.main import main

__all__ = ["main"]
