"""The LM head's product (purejaxppo/lm/matmul.logits_dot) against NumPy float64 references.

* ``logits_dot`` in bfloat16: the forward is the float32-accumulated product of the bf16
  operands; the backward is ``bf16(g) @ w`` and ``bf16(g)^T x`` (the cotangent rounded to bf16
  is its contract), both layouts of ``w``; float32 ``x`` gives the plain product.
"""

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.matmul import logits_dot

V = 50


def _bf16(a):
    return np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32), np.float64)


def test_logits_dot_bf16_backward_takes_the_cotangent_in_bf16():
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.normal(size=(2, 3, 16)), jnp.bfloat16)
    g = rng.normal(size=(2, 3, V)).astype(np.float32)
    for vocab_axis, w in ((0, rng.normal(size=(V, 16))), (1, rng.normal(size=(16, V)))):
        w = jnp.asarray(w, jnp.bfloat16)
        w_vd = _bf16(w) if vocab_axis == 0 else _bf16(w).T
        y, vjp = jax.vjp(lambda x, w: logits_dot(x, w, vocab_axis), x, w)
        assert y.dtype == jnp.float32 and y.shape == (2, 3, V)
        np.testing.assert_allclose(y, _bf16(x) @ w_vd.T, rtol=1e-5, atol=1e-4)
        dx, dw = vjp(g)
        assert dx.dtype == dw.dtype == jnp.bfloat16
        # both backward products read the cotangent in bf16 (the fast path), none in float32
        bwd = jax.make_jaxpr(lambda g: jax.vjp(lambda x, w: logits_dot(x, w, vocab_axis), x, w)[1](g))(g)
        dots = [e for e in bwd.jaxpr.eqns if e.primitive.name == "dot_general"]
        assert len(dots) == 2 and all(str(v.aval.dtype) == "bfloat16" for e in dots for v in e.invars)
        gb = _bf16(g).reshape(-1, V)
        np.testing.assert_allclose(_bf16(dx).reshape(-1, 16), _bf16(gb @ w_vd), rtol=2**-7, atol=1e-2)
        dw_vd = gb.T @ _bf16(x).reshape(-1, 16)
        np.testing.assert_allclose(_bf16(dw), _bf16(dw_vd if vocab_axis == 0 else dw_vd.T), rtol=2**-7, atol=1e-2)
    # float32: the plain product and its autodiff
    x32 = rng.normal(size=(2, 3, 16)).astype(np.float32)
    w32 = rng.normal(size=(V, 16)).astype(np.float32)
    np.testing.assert_allclose(logits_dot(jnp.asarray(x32), jnp.asarray(w32), 0), x32 @ w32.T, rtol=1e-5, atol=1e-4)
