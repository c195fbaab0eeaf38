"""The tests' optimisation split (tests/conftest.py) does what it says: unmarked tests, and
the CLI subprocesses they start, compile with little XLA optimisation; tests marked
``optimised`` compile as users do."""

import os

import jax
import pytest


def _compiled_with_little_optimisation() -> bool:
    return bool(jax.config.read("jax_disable_most_optimizations"))


def test_unmarked_tests_compile_with_little_optimisation():
    assert _compiled_with_little_optimisation()
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "1"  # inherited by subprocesses


@pytest.mark.optimised
def test_marked_tests_compile_as_users_do():
    assert not _compiled_with_little_optimisation()
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "0"


@pytest.mark.optimised(False)
def test_optimised_false_takes_a_test_back_to_little_optimisation():
    assert _compiled_with_little_optimisation()
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "1"
