"""Throughput benchmark; the implementation lives in ``purejaxppo.cli.bench`` so that
``python -m purejaxppo bench`` runs the same code. See ``--help``."""

from purejaxppo.cli.bench import main

if __name__ == "__main__":
    main()
