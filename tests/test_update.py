"""The optimizer of the minibatch update against a NumPy Adam and against optax's own."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from purejaxppo.stages.update import make_optimizer


def _grads(step):
    rng = np.random.default_rng(step)
    return {"w": rng.normal(size=(3, 4)).astype(np.float32) * (step + 1), "b": rng.normal(size=4).astype(np.float32)}


def test_clipped_adam_matches_a_numpy_loop_and_optax():
    lr, max_norm, eps, b1, b2 = 3e-3, 0.5, 1e-5, 0.9, 0.999
    params = {"w": np.ones((3, 4), np.float32), "b": np.zeros(4, np.float32)}
    opt = make_optimizer(max_norm, eps, lr)
    ref_opt = optax.chain(optax.clip_by_global_norm(max_norm), optax.adam(lr, b1=b1, b2=b2, eps=eps))
    state, ref_state = opt.init(params), ref_opt.init(params)
    p, ref_p = jax.tree.map(jnp.asarray, params), jax.tree.map(jnp.asarray, params)
    np_p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in np_p.items()}
    v = {k: np.zeros_like(x) for k, x in np_p.items()}
    for t in range(1, 6):
        g = _grads(t)
        updates, state = jax.jit(opt.update)(g, state, p)
        p = optax.apply_updates(p, updates)
        ref_updates, ref_state = ref_opt.update(g, ref_state, ref_p)
        ref_p = optax.apply_updates(ref_p, ref_updates)
        norm = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in g.values()))
        scale = min(1.0, max_norm / norm)
        for k in np_p:
            gk = g[k].astype(np.float64) * scale
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk**2
            np_p[k] -= lr * (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
        for k in np_p:
            np.testing.assert_allclose(np.asarray(p[k]), np_p[k], rtol=1e-5, atol=1e-7, err_msg=f"step {t} {k}")
            np.testing.assert_allclose(np.asarray(p[k]), np.asarray(ref_p[k]), rtol=1e-5, atol=1e-7)
