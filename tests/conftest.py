"""Session setup: one fresh persistent compilation cache for the whole test run.

Many tests compile the same small training programs (the CLI tests, the references of the
equivalence tests, the multi-device worker subprocesses, which inherit the folder through
``PUREJAXPPO_CACHE_DIR``). JAX keys cached executables on the program, flags and versions,
so sharing them changes no number; the folder is new per session, so nothing leaks from
an earlier run or into the user's own cache.
"""

import atexit
import os
import shutil
import tempfile

_cache = tempfile.mkdtemp(prefix="purejaxppo-test-xla-")
atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ["PUREJAXPPO_CACHE_DIR"] = _cache

from purejaxppo.compile_cache import enable  # noqa: E402

enable(_cache)
