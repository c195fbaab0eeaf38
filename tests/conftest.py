"""Session setup: one fresh persistent compilation cache for the whole test run.

Many tests compile the same small training programs (the CLI tests, the references of the
equivalence tests, the multi-device worker subprocesses, which inherit the folder through
``PUREJAXPPO_CACHE_DIR``). JAX keys cached executables on the program, flags and versions,
so sharing them changes no number; the folder is new per test run, so nothing leaks from
an earlier run or into the user's own cache. Under pytest-xdist the controller creates it
and every worker inherits it through the environment (the cache is safe to share between
processes); only the process that made it removes it.
"""

import atexit
import os
import shutil
import tempfile

_OWNER = "PUREJAXPPO_TEST_CACHE_OWNER"
if os.environ.get(_OWNER) is None:
    _cache = tempfile.mkdtemp(prefix="purejaxppo-test-xla-")
    os.environ[_OWNER] = str(os.getpid())
    os.environ["PUREJAXPPO_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
_cache = os.environ["PUREJAXPPO_CACHE_DIR"]

from purejaxppo.compile_cache import enable  # noqa: E402

enable(_cache)
