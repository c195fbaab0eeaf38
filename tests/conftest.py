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

import pytest

_OWNER = "PUREJAXPPO_TEST_CACHE_OWNER"
if os.environ.get(_OWNER) is None:
    _cache = tempfile.mkdtemp(prefix="purejaxppo-test-xla-")
    os.environ[_OWNER] = str(os.getpid())
    os.environ["PUREJAXPPO_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
_cache = os.environ["PUREJAXPPO_CACHE_DIR"]

from purejaxppo.run.compile_cache import enable  # noqa: E402

enable(_cache)


# --- XLA optimisation: little by default, full where a test needs it -------------------------
# Most tests run a few updates of tiny configs, so their time is XLA compile time, and what
# they check -- agreement with a NumPy reference, shapes, errors, episode ends, one path
# against another compiled the same way -- does not depend on how hard XLA optimises.
# ``jax_disable_most_optimizations`` (XLA backend optimisation level 0) halves those compiles.
# Tests marked ``optimised`` compile as users do: the learning checks (whose time is run
# time) and the user-facing promises about numbers (CLI resume and sweeps, crash recovery,
# chunked vs one call), so that they are checked at the level users get. Only what is exact by
# construction (the same executables on the same inputs) is asserted bit for bit; two
# DIFFERENT programs are compared to float tolerance (tests/_equality.py), since how XLA
# rounds each depends on the optimisation level and on the CPU (``--xla_cpu_max_isa``: XLA_FLAGS
# of the environment reach the CLI and multi-device subprocesses too).
# Set in the environment as well, so that CLI subprocesses compile the same way.
import jax  # noqa: E402

_LITTLE = "JAX_DISABLE_MOST_OPTIMIZATIONS"
os.environ[_LITTLE] = "1"
jax.config.update("jax_disable_most_optimizations", True)


def _set_optimisation(full: bool):
    jax.config.update("jax_disable_most_optimizations", not full)
    os.environ[_LITTLE] = "0" if full else "1"


def _module_marked(module) -> bool:
    marks = getattr(module, "pytestmark", [])
    return any(m.name == "optimised" for m in (marks if isinstance(marks, list) else [marks]))


@pytest.fixture(autouse=True, scope="module")
def _module_optimisation(request):
    """A module marked ``optimised`` (``pytestmark``) builds its module fixtures at full optimisation."""
    _set_optimisation(_module_marked(request.module))
    yield
    _set_optimisation(False)


@pytest.fixture(autouse=True)
def _test_optimisation(request):
    """A test marked ``optimised`` compiles at full optimisation (it must not use module
    fixtures of an unmarked module: those were compiled at the other level);
    ``optimised(False)`` takes one test of a marked module back to little optimisation."""
    mark = request.node.get_closest_marker("optimised")
    _set_optimisation(mark is not None and (mark.args[0] if mark.args else True))
    yield
    _set_optimisation(_module_marked(request.module))


# --- parallel test workers (pytest-xdist, ``--dist loadgroup`` in pyproject.toml) ------------
# A module whose tests share a module-scoped fixture (a compiled program, a trained run) runs
# on ONE worker, so the fixture is built once; tests without shared state spread over the
# workers one by one. The slowest work goes first (longest-first keeps both cores busy to the
# end); the order changes no result, every test is independent of the others' order.
_FIRST = (
    "test_parallel_split",
    "test_parallel_cli",
    "test_parallel",
    "test_pbt",
    "test_cli",
    "test_recurrent",
    "test_learning",
    "test_rlhf_toy",
    "test_faults",
    "test_driver",
    "test_population",
    "test_train",
)


def _module(item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""


def _shares_module_state(item) -> bool:
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}) or {}
    return any(d.scope in ("module", "package", "class") for ds in defs.values() for d in ds)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    modules = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    for name, its in modules.items():
        if any(_shares_module_state(i) for i in its):
            for i in its:
                i.add_marker(pytest.mark.xdist_group(name))
    rank = {m: k for k, m in enumerate(_FIRST)}
    items.sort(key=lambda i: rank.get(_module(i), len(_FIRST)))
