"""The bf16 matmul of the models' projections: ``x @ W`` as one 2-D matmul accumulated in float32.

XLA:CPU runs a 2-D ``bf16 x bf16 -> f32`` matmul on the CPU's bf16 units (AMX / AVX512-BF16)
about 4x faster than a ``bf16 -> bf16`` one at SmolLM2-135M's widths (``[1024, 576] x [576,
1536]``: 1.7 against 7.5 ms, benchmarks/NOTES.md); the backward products get the same form.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp


def flat_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """``nn.Dense``'s product ``x [..., in] @ W [in, out]`` as ONE 2-D matmul accumulated in
    float32 and cast back to ``x``'s dtype (any other ``dimension_numbers``: ``lax.dot_general``
    as is). For a bfloat16 compute dtype: XLA:CPU runs a 2-D bf16 x bf16 -> f32 matmul on the
    CPU's bf16 units (AMX / AVX512-BF16) about 5x faster than the ``[B, L, in]`` bf16 -> bf16
    one at SmolLM2-135M's widths (benchmarks/NOTES.md), and the sum is float32 either way."""
    if tuple(map(tuple, dimension_numbers[0])) != ((lhs.ndim - 1,), (0,)) or any(dimension_numbers[1]) or rhs.ndim != 2:
        return jax.lax.dot_general(
            lhs, rhs, dimension_numbers, precision, preferred_element_type=preferred_element_type
        )
    y = _matmul_f32(lhs.reshape(-1, lhs.shape[-1]), rhs.astype(lhs.dtype))
    return y.astype(preferred_element_type or lhs.dtype).reshape(lhs.shape[:-1] + rhs.shape[1:])


def _dot_f32(a, b, contract):
    return jax.lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=jnp.float32)


@jax.custom_vjp
def _matmul_f32(x, w):
    """``x [N, in] @ w [in, out]`` accumulated in float32, returned in ``x``'s dtype; the backward
    products take the cotangent in that dtype too (autodiff would hand them a float32 cotangent,
    i.e. float32 matmuls, the slow path this avoids)."""
    return _dot_f32(x, w, ((1,), (0,))).astype(x.dtype)


def _matmul_fwd(x, w):
    return _matmul_f32(x, w), (x, w)


def _matmul_bwd(res, g):
    x, w = res
    g = g.astype(x.dtype)
    return _dot_f32(g, w, ((1,), (1,))).astype(x.dtype), _dot_f32(x, g, ((0,), (0,))).astype(w.dtype)


_matmul_f32.defvjp(_matmul_fwd, _matmul_bwd)


def logits_dot(x, w, vocab_axis: int):
    """The LM head ``x [..., D]`` against ``w`` (``[V, D]`` tied, ``vocab_axis=0``; ``[D, V]``,
    ``vocab_axis=1``) ``-> logits [..., V]`` float32, as one 2-D product accumulated in float32.
    Under a 16-bit ``x`` the backward casts the logits' float32 cotangent to ``x``'s dtype
    first, so ``dx`` and ``dw`` take the fast bf16 path too (autodiff would run both ``[N, V]``
    products in float32); ``w`` is cast to ``x``'s dtype."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    w = w.astype(x.dtype)
    if x.dtype == jnp.float32:
        y = _dot_f32(x2, w, ((1,), (1 - vocab_axis,)))
    else:
        y = _logits_f32(x2, w, vocab_axis)
    return y.reshape(lead + (y.shape[-1],))


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _logits_f32(x, w, vocab_axis):
    return _dot_f32(x, w, ((1,), (1 - vocab_axis,)))


def _logits_fwd(x, w, vocab_axis):
    return _logits_f32(x, w, vocab_axis), (x, w)


def _logits_bwd(vocab_axis, res, g):
    x, w = res
    g = g.astype(x.dtype)
    dx = _dot_f32(g, w, ((1,), (vocab_axis,)))  # [N, V] . w over V -> [N, D]
    dw = _dot_f32(g, x, ((0,), (0,))) if vocab_axis == 0 else _dot_f32(x, g, ((0,), (0,)))
    return dx.astype(x.dtype), dw.astype(w.dtype)


_logits_f32.defvjp(_logits_fwd, _logits_bwd)
