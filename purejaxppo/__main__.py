import sys

from purejaxppo.cli.main import main

sys.exit(main())
