"""Scoring and the update over the batch's ACTUAL response length, not the budget.

With EOS on, most responses stop long before ``max_new_tokens = T``. Sampling already ends with
the last row (:mod:`purejaxppo.lm.models.sampling`), but the teacher-forced passes (policy, reference,
critic), GAE and every update epoch would still run over all ``P + T`` slots. Responses are
right-padded, so every column past the batch's longest response is padding: cutting the batch
to the first ``W >= longest`` response columns changes no valid position of a causal model,
no masked GAE step and no masked mean (float rounding of other shapes aside).

Widths come from a fixed ladder, :func:`bucket_sizes`: powers of two from ``smallest`` up to
``T``, plus ``T`` itself, so a program holds one branch per rung (``lax.switch``) and compiles
once. :func:`bucket_index` picks the rung of the longest response; over devices and over a
vmapped runs axis the longest is reduced with ``pmax`` (pass their axis names), which also makes
the index one value for the whole program, so ``lax.switch`` runs ONE branch (under a plain
``vmap`` without an axis name the index would be batched and every branch would run: correct,
but no faster).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp


def bucket_sizes(max_new: int, smallest: int) -> tuple[int, ...]:
    """The ladder of response widths: ``smallest, 2*smallest, ... < max_new``, then ``max_new``.
    ``smallest = 0`` (off) or ``>= max_new`` gives the one width ``(max_new,)``."""
    if smallest <= 0 or smallest >= max_new:
        return (max_new,)
    sizes, w = [], smallest
    while w < max_new:
        sizes.append(w)
        w *= 2
    return tuple(sizes) + (max_new,)


def smallest_width(length_buckets: int, stop_ids: Sequence[int]) -> int:
    """The ``smallest`` rung of the widths the teacher-forced passes and the update switch over
    (:func:`bucket_sizes`): ``length_buckets``, or 0 (one width, the budget) when ``stop_ids`` is
    empty. Then no response can end early, every batch fills all ``max_new_tokens`` columns, and
    every narrower rung would be a compiled copy of the passes and the update that is never
    taken: compile time and executable memory for nothing. (The sampler keeps its rungs: early
    decode steps attend over fewer cache slots whether or not a row can stop.)"""
    return length_buckets if len(stop_ids) else 0


def bucket_index(response_mask: jax.Array, sizes: Sequence[int], axis_names: Sequence[str] = ()) -> jax.Array:
    """``int32`` scalar: the first rung of ``sizes`` that holds the longest response of
    ``response_mask [B, T]`` (responses right-padded), the longest taken over ``axis_names`` too."""
    longest = jnp.max(jnp.sum(response_mask, axis=1, dtype=jnp.int32))
    for name in axis_names:
        longest = jax.lax.pmax(longest, name)
    return jnp.sum(jnp.asarray(sizes[:-1], jnp.int32) < longest).astype(jnp.int32)


def on_width(index: jax.Array, sizes: Sequence[int], branch, *operands):
    """``branch(width)(*operands)`` for the width ``sizes[index]``: a ``lax.switch`` over the
    rungs (a plain call when there is one rung). ``branch(width)`` must return the same pytree
    structure and shapes for every width."""
    if len(sizes) == 1:
        return branch(sizes[0])(*operands)
    return jax.lax.switch(index, [branch(w) for w in sizes], *operands)
