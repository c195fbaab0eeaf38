"""Trace-time argument checks for the public stages (gae, losses, tokens).

JAX broadcasts ``[N]`` against ``[N, 1]`` to ``[N, N]`` without a word, so a wrongly
shaped input gives a loss N times too large instead of an error. These checks run on
static shapes and dtypes while tracing (free at run time) and raise ``ValueError``
naming the function, the argument and the shape it must have.

Masks must be bool or integer (nonzero = valid): a float mask is refused, because
``0.5`` would silently count as valid.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp


def same_shape(fn: str, ref: str, arrays: dict) -> tuple:
    """All ``arrays`` (``{name: array or None}``; None is skipped) must have the shape of
    ``arrays[ref]``; returns that shape."""
    shape = tuple(jnp.shape(arrays[ref]))
    for name, x in arrays.items():
        if x is not None and tuple(jnp.shape(x)) != shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(jnp.shape(x))}, expected {shape} (the shape of "
                f"{ref}); reshape it (e.g. x.reshape({shape})) instead of relying on broadcasting"
            )
    return shape


def check_mask(fn: str, mask, shape: tuple, name: str = "mask") -> None:
    """``mask`` (if given) must have ``shape`` and a bool or integer dtype."""
    if mask is None:
        return
    if tuple(jnp.shape(mask)) != tuple(shape):
        raise ValueError(
            f"{fn}: {name} has shape {tuple(jnp.shape(mask))}, expected {tuple(shape)} (the shape of the data it masks)"
        )
    check_bool(fn, mask, name)


def check_bool(fn: str, x, name: str) -> None:
    """``x`` must be bool or integer (a float 0.5 would silently count as True)."""
    dtype = jnp.result_type(x)
    if not (jnp.issubdtype(dtype, jnp.bool_) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(
            f"{fn}: {name} must be bool (or integer 0/1), got {dtype}; pass {name} > 0 or {name}.astype(bool)"
        )


def check_rank(fn: str, name: str, x, rank: int, what: Optional[str] = None) -> None:
    if jnp.ndim(x) != rank:
        raise ValueError(
            f"{fn}: {name} has shape {tuple(jnp.shape(x))}, expected {rank} dims{' ' + what if what else ''}"
        )
