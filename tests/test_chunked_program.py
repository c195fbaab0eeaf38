"""The parts every run kind shares (purejaxppo/run/chunked_program.py, purejaxppo/run/periodic_eval.py),
on a toy kind whose numbers are known by hand: a state ``[R, 2]`` that a chunk of ``n`` updates
moves by ``n``, a ``loss`` column equal to the state's first entry, an ``eval_x`` column that is
NaN by design; and an evaluator every 3 updates."""

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.periodic_eval import PeriodicEvaluator


class Toy(ChunkedProgram):
    nan_by_design = ("eval_",)

    def __init__(self):
        super().__init__()
        self.built = []

    def build_chunk(self, n):
        self.built.append(n)

        def chunk(state, scale):
            out = state + n * scale
            metrics = {"loss": jnp.repeat(state[:, :1], n, axis=1), "eval_x": jnp.full((state.shape[0], n), jnp.nan)}
            return (out, metrics), jnp.isfinite(out).all(axis=1)

        return jax.jit(chunk)

    def chunk_args(self, state, configs):
        return state, jnp.ones((), state.dtype) if configs is None else configs


def describe(r):
    return f"run {r}"


def test_chunks_are_built_once_per_length_and_compiled_once_per_signature():
    prog, state = Toy(), jnp.zeros((2, 2), jnp.float32)
    assert prog.compile(3, state) > 0.0 and prog.compile(3, state) == 0.0  # once per (n, signature)
    assert prog.compile(3, state.astype(jnp.float16)) > 0.0  # another dtype: another program
    (out, metrics), finite = prog.chunk(3, state)
    prog.chunk(5, out)
    assert prog.built == [3, 5]
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 3.0))
    assert metrics["loss"].shape == (2, 3) and bool(finite.all())
    assert prog.training_state(out) is out and prog.with_training_state(out, state) is state
    assert prog.place(1, 2) == (1, 2) and prog.counters(0, 3) == {}


def test_the_nan_stop_skips_the_columns_nan_by_design_only():
    prog = Toy()
    state = jnp.array([[0.0, 0.0], [jnp.nan, 0.0]])
    (_, metrics), finite = prog.chunk(2, state)
    metrics = {k: np.asarray(v) for k, v in metrics.items()}
    # run 1's loss is NaN from the chunk's first update (update 10 of the run); eval_x is NaN everywhere
    assert (
        prog.check_finite(metrics, finite, 10, describe) == "non-finite loss (nan) at update 10 of metrics.csv (run 1)"
    )
    ok = {"loss": np.zeros((2, 2)), "eval_x": metrics["eval_x"]}
    assert prog.check_finite(ok, np.array([True, True]), 10, describe) is None
    assert "non-finite parameters" in prog.check_finite(ok, np.array([True, False]), 10, describe)
    prog.nan_by_design = ()
    assert "non-finite eval_x" in prog.check_finite(ok, np.array([True, True]), 10, describe)


def test_the_periodic_schedule_and_columns():
    ev = PeriodicEvaluator(3, ("eval_a", "eval_b"))
    assert [ev.updates_to_next(d) for d in range(7)] == [3, 2, 1, 3, 2, 1, 3]
    assert [d for d in range(10) if ev.due(d)] == [3, 6, 9]
    cols = ev.columns({"eval_a": np.array([1.0, 2.0]), "eval_b": np.array([3.0, 4.0])}, 2, 3)
    want_a = np.array([[np.nan, np.nan, 1.0], [np.nan, np.nan, 2.0]], np.float32)
    np.testing.assert_array_equal(cols["eval_a"], want_a)
    assert cols["eval_b"][1, -1] == 4.0 and sorted(cols) == ["eval_a", "eval_b"]
    empty = ev.columns(None, 2, 4)
    assert all(v.shape == (2, 4) and np.isnan(v).all() for v in empty.values())
