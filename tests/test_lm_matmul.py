"""purejaxppo/lm/models/matmul.py: the bf16 projections' matmul, forward and backward.

Independent reference: NumPy float64 products of the same bf16-rounded operands (the only
other rounding is the result's to bf16: 8 mantissa bits, ~4e-3 relative); and the program's
structure: every product of the gradient takes bf16 operands and accumulates in float32.
"""

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.matmul import flat_dot

DN = (((2,), (0,)), ((), ()))


def _f64(x):
    return np.asarray(jnp.asarray(x, jnp.float32), np.float64)


def test_flat_dot_forward_and_gradient_against_numpy():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 16)).astype(jnp.bfloat16)
    w = jax.random.normal(jax.random.PRNGKey(1), (16, 8)).astype(jnp.bfloat16)
    g = jax.random.normal(jax.random.PRNGKey(2), (2, 5, 8)).astype(jnp.bfloat16)
    y = flat_dot(x, w, DN)
    assert y.dtype == jnp.bfloat16 and y.shape == (2, 5, 8)
    want = _f64(x) @ _f64(w)
    np.testing.assert_allclose(_f64(y), want, rtol=8e-3, atol=8e-3 * np.abs(want).max())
    _, vjp = jax.vjp(lambda a, b: flat_dot(a, b, DN), x, w)
    dx, dw = vjp(g)
    assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
    for got, ref in ((dx, _f64(g) @ _f64(w).T), (dw, np.einsum("bli,blo->io", _f64(x), _f64(g)))):
        np.testing.assert_allclose(_f64(got), ref, rtol=8e-3, atol=8e-3 * np.abs(ref).max())


def test_every_product_of_the_gradient_is_bf16_in_float32_out():
    x = jnp.ones((2, 3, 4), jnp.bfloat16)
    w = jnp.ones((4, 6), jnp.float32)  # a float32 parameter: the product casts it (Dense promotes first)
    loss = lambda a, b: jnp.sum(flat_dot(a, b.astype(jnp.bfloat16), DN).astype(jnp.float32) ** 2)  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.grad(loss, (0, 1)))(x, w)
    dots = [e for e in _eqns(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
    assert len(dots) == 3  # the forward and the two backward products
    for e in dots:
        assert [str(v.aval.dtype) for v in e.invars] == ["bfloat16", "bfloat16"], e
        assert str(e.outvars[0].aval.dtype) == "float32", e


def _eqns(jaxpr):
    for e in jaxpr.eqns:
        yield e
        for sub in jax.core.subjaxprs(e) if hasattr(jax.core, "subjaxprs") else ():
            yield from _eqns(sub)
        for p in e.params.values():
            if hasattr(p, "jaxpr") and hasattr(p.jaxpr, "eqns"):
                yield from _eqns(p.jaxpr)
            elif hasattr(p, "eqns"):
                yield from _eqns(p)
