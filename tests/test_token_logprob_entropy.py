"""The fused token log-prob + entropy (purejaxppo/lm/token_logprob_entropy.py) and the LM head's
product (purejaxppo/lm/matmul.logits_dot) against NumPy float64 references.

* ``logprob_entropy``: values and the gradient of ``sum(a * logp + b * entropy)`` w.r.t. the
  logits, against closed forms evaluated in float64 (``log_softmax`` picked, ``-sum p log p``;
  ``a (onehot - p) - b p (log p + H)``), with ``-inf`` entries (cut tokens: probability 0, no
  gradient, entropy finite). float32 against float64 at logits of size ~10 and V = 50: 1e-5.
* ``filtered_logprobs`` (what the loss calls) against the same references through
  ``filter_logits`` with a pad id cut and top-k.
* ``logits_dot`` in bfloat16: the forward is the float32-accumulated product of the bf16
  operands; the backward is ``bf16(g) @ w`` and ``bf16(g)^T x`` (the cotangent rounded to bf16
  is its contract), both layouts of ``w``; float32 ``x`` gives the plain product.
"""

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm import experience
from purejaxppo.lm.config import TokenPPOConfig
from purejaxppo.lm.matmul import logits_dot
from purejaxppo.lm.token_logprob_entropy import logprob_entropy

V = 50


def _ref(x, tok, a, b):
    """float64: logp, entropy and d(sum a logp + b H)/dx, treating -inf as probability 0."""
    x = np.asarray(x, np.float64)
    fin = np.isfinite(x)
    m = np.max(np.where(fin, x, -np.inf), -1, keepdims=True)
    e = np.where(fin, np.exp(np.where(fin, x - m, 0.0)), 0.0)
    p = e / e.sum(-1, keepdims=True)
    logp_all = np.where(fin, x - m - np.log(e.sum(-1, keepdims=True)), 0.0)
    ent = -np.sum(p * logp_all, -1)
    picked = np.take_along_axis(np.where(fin, logp_all, -np.inf), tok[..., None], -1)[..., 0]
    hot = np.arange(x.shape[-1]) == tok[..., None]
    grad = a[..., None] * (hot - p) - b[..., None] * p * (logp_all + ent[..., None])
    return picked, ent, np.where(fin, grad, 0.0)


def _case(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3.0, (3, 7, V)).astype(np.float32)
    x[0, 2, 5:20] = -np.inf  # a cut set
    x[:, :, 0] = -np.inf  # the pad id, cut everywhere
    tok = rng.integers(1, V, (3, 7))
    tok[0, 2] = 21  # kept
    return x, tok, rng.normal(size=(3, 7)), rng.normal(size=(3, 7))


def test_values_and_gradient_equal_the_closed_forms():
    x, tok, a, b = _case()
    logp, ent = jax.jit(logprob_entropy)(x, tok)
    want_logp, want_ent, want_grad = _ref(x, tok, a, b)
    np.testing.assert_allclose(logp, want_logp, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ent, want_ent, atol=1e-5, rtol=1e-5)

    def loss(x):
        lp, h = logprob_entropy(x, tok)
        return jnp.sum(lp * a) + jnp.sum(h * b)

    grad = np.asarray(jax.jit(jax.grad(loss))(x))
    assert np.all(np.isfinite(grad)) and np.all(grad[..., 0] == 0)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5, rtol=1e-5)


def test_a_cut_token_reads_minus_inf_with_no_gradient():
    x, tok, a, b = _case(1)
    tok[1, 3] = 0  # the pad id: cut
    logp, _ = logprob_entropy(x, tok)
    assert np.isneginf(logp[1, 3]) and np.isfinite(np.delete(np.asarray(logp).ravel(), 1 * 7 + 3)).all()
    g = jax.grad(lambda x: jnp.sum(jnp.where(tok == 0, 0.0, logprob_entropy(x, tok)[0])))(x)
    assert np.all(np.isfinite(g))


def test_filtered_logprobs_from_the_last_prompt_slot():
    """The loss's call: logits of positions ``first..L-1`` through the sampler's filter (pad
    cut, top-k 10, temperature 0.7), aligned to tokens, 0 at slots ``0..first``."""
    rng = np.random.default_rng(3)
    cfg = TokenPPOConfig(top_k=10, temperature=0.7, pad_id=0)
    tokens = rng.integers(1, V, (2, 9))
    first = 4
    logits = rng.normal(0, 2.0, (2, 9 - first, V)).astype(np.float32)
    x = np.asarray(jax.jit(lambda z: experience.filter_logits(z, 0.7, 10, 1.0, 0))(logits))
    tokens[:, first + 1 :] = np.argsort(-x[:, :-1], -1)[..., 3]  # inside the top-k set
    logp, ent = jax.jit(lambda z: experience.filtered_logprobs(z, tokens, cfg, first))(logits)
    want_logp, want_ent, _ = _ref(x[:, :-1], tokens[:, first + 1 :], np.zeros((2, 4)), np.zeros((2, 4)))
    np.testing.assert_array_equal(np.asarray(logp)[:, : first + 1], 0.0)
    np.testing.assert_allclose(np.asarray(logp)[:, first + 1 :], want_logp, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ent)[:, first + 1 :], want_ent, atol=1e-5, rtol=1e-5)


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
