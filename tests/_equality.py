"""The two kinds of equality the tests assert between training runs.

* **Exact by construction**: the same compiled executables fed the same inputs -- a resumed
  run vs an uninterrupted run through the SAME chunk programs, the same command twice, a
  checkpoint restored vs saved, an executable loaded vs compiled. Nothing may differ, on any
  CPU, at any optimisation level: :func:`assert_same_state` (every leaf bit for bit).
* **Two programs, to float tolerance**: one ``jax.jit(jax.vmap(train))`` call vs the chunk
  loop, a vmapped vs a single run, 1 vs 2 devices. XLA fuses and orders each program's float
  arithmetic as it likes, and how differs with the CPU's instruction set
  (``--xla_cpu_max_isa``) and the optimisation level, so two programs agree to a few float32
  rounding steps accumulated over the run, not bitwise: :func:`assert_close_state`,
  :func:`assert_close_metrics`.

The tolerances are for a few updates (<= 8) of this suite's tiny PPO configs. Measured for
one call vs the chunk loop (tests/test_driver.py's seeds and sweep, at both optimisation
levels, under ``--xla_cpu_max_isa`` SSE4_2, AVX, AVX2, AVX512 and none, on an AVX2 machine):
at full optimisation, and with SSE4_2 or AVX code, the two agree bit for bit; AVX2 code (this
machine's own, so also AVX512 and none) at little optimisation puts the sweep's params up to
3e-8 apart (a few float32 ulps of weights of ~1e-2; 176 of its elements differ), its optimizer
state within rtol 1e-5 plus 1.3e-10 (Adam's second moments are ~1e-8: ``atol`` carries such
tiny leaves), and its metrics up to 3.8e-6 apart, 1e-5 relative (critic losses ~0.4). The
bounds leave a margin of 30x or more over that, and a real difference is far above them: one
Adam update moves a param by up to the lr (2.5e-4 here), and another member's runs fail them
(test_driver's sweep test asserts so).
"""

from __future__ import annotations

import jax
import numpy as np

STATE_TOL = dict(rtol=1e-5, atol=1e-6)
METRIC_TOL = dict(rtol=3e-4, atol=3e-5)


def _pairs(a, b):
    la, lb = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)
    assert len(la) == len(lb), (len(la), len(lb))
    for (path, x), y in zip(la, lb):
        yield jax.tree_util.keystr(path), np.asarray(x), np.asarray(y)


def assert_same_state(a, b):
    """Exact by construction: every leaf of two pytrees bit for bit."""
    for name, x, y in _pairs(a, b):
        np.testing.assert_array_equal(x, y, err_msg=name)


def assert_close_state(a, b):
    """Two programs: float leaves to ``STATE_TOL``; integer, boolean and PRNG-key leaves
    (counters, episode flags, keys) exactly -- rounding of this size changes none of them."""
    for name, x, y in _pairs(a, b):
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, **STATE_TOL, err_msg=name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


def assert_close_metrics(got: dict, want: dict):
    """Two programs: every metric of ``want`` to ``METRIC_TOL`` (NaN where ``want`` has NaN)."""
    missing = set(want) - set(got)
    assert not missing, missing
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k]).astype(np.asarray(v).dtype), v, **METRIC_TOL, err_msg=k)
