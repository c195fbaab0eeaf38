"""Throughput benchmark; the implementation lives in ``purejaxppo.bench`` so that
``python -m purejaxppo bench`` runs the same code. See ``--help``."""

from purejaxppo.bench import main

if __name__ == "__main__":
    main()
