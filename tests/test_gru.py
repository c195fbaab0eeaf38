"""The fused GRU (purejaxppo.agents.gru) against independent references: a NumPy loop of the cell's
equations for the values, and JAX autodiff of flax's own ``GRUCell`` in a ``lax.scan`` for
the gradients (our backward pass is written by hand)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.agents.gru import fuse, gru_cell, gru_sequence, input_projection

T, B, G, H = 17, 3, 6, 5


def _setup(seed=0):
    cell = nn.GRUCell(G)
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)
    params = cell.init(keys[0], jnp.zeros((B, G)), jnp.zeros((B, H)))["params"]
    # non-zero biases, so that a bias left out or put on the wrong gate shows
    params = jax.tree.map(
        lambda p, k: p + 0.3 * jax.random.normal(k, p.shape),
        params,
        jax.tree.unflatten(jax.tree.structure(params), list(jax.random.split(keys[1], len(jax.tree.leaves(params))))),
    )
    x = jax.random.normal(keys[2], (T, B, H))
    h0 = jax.random.normal(keys[3], (B, G))
    reset = jax.random.bernoulli(keys[4], 0.25, (T, B)).at[0, 0].set(True)
    out_weights = jax.random.normal(keys[5], (T, B, G))
    return cell, params, x, h0, reset, out_weights


def _numpy_gru(params, x, h0, reset):
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    sig = lambda a: 1.0 / (1.0 + np.exp(-a))
    h, out = np.asarray(h0, np.float64), []
    for t in range(x.shape[0]):
        h = np.where(np.asarray(reset[t])[:, None], 0.0, h)
        xt = np.asarray(x[t], np.float64)
        r = sig(xt @ p["ir"]["kernel"] + p["ir"]["bias"] + h @ p["hr"]["kernel"])
        z = sig(xt @ p["iz"]["kernel"] + p["iz"]["bias"] + h @ p["hz"]["kernel"])
        n = np.tanh(xt @ p["in"]["kernel"] + p["in"]["bias"] + r * (h @ p["hn"]["kernel"] + p["hn"]["bias"]))
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out)


def _ours(params, x, h0, reset):
    w = fuse(params)
    return gru_sequence(w, h0, input_projection(w, x), reset)


def _flax_scan(cell, params, x, h0, reset):
    def step(h, inputs):
        xt, rs = inputs
        return cell.apply({"params": params}, jnp.where(rs[:, None], 0.0, h), xt)

    return jax.lax.scan(step, h0, (x, reset))[1]


def test_sequence_and_cell_equal_a_numpy_loop():
    cell, params, x, h0, reset, _ = _setup()
    ref = _numpy_gru(params, x, h0, reset)
    np.testing.assert_allclose(
        _ours(params, x, h0, reset), ref, rtol=1e-5, atol=1e-5
    )  # tolerance: fused XLA vs a NumPy loop
    w = fuse(params)
    one = gru_cell(w, jnp.where(reset[0][:, None], 0.0, h0), input_projection(w, x[0]))
    np.testing.assert_allclose(one, ref[0], rtol=1e-5, atol=1e-5)
    assert np.abs(ref[0] - ref[1]).max() > 1e-2  # the state moves: the check is not on a constant


@pytest.mark.parametrize("seed", [0, 1])
def test_hand_written_backward_equals_autodiff_of_flax_cell(seed):
    cell, params, x, h0, reset, wout = _setup(seed)
    loss = lambda f: lambda p, h, xs: jnp.sum(f(p, xs, h, reset) * wout) + jnp.sum(f(p, xs, h, reset)[-1] ** 2)
    ref = jax.grad(loss(lambda p, xs, h, r: _flax_scan(cell, p, xs, h, r)), argnums=(0, 1, 2))(params, h0, x)
    ours = jax.jit(jax.grad(loss(_ours), argnums=(0, 1, 2)))(params, h0, x)
    for path, a in jax.tree_util.tree_leaves_with_path(ref):
        b = dict(jax.tree_util.tree_leaves_with_path(ours))[path]
        # tolerance: the hand-written backward vs autodiff of flax's cell are two programs
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))
        assert np.abs(np.asarray(a)).max() > 1e-4, jax.tree_util.keystr(path)  # every gradient is exercised


def test_vmapped_gradients_equal_one_at_a_time():
    """Under vmap (seeds) the hand-written backward pass batches like any other function."""
    cell, params, x, h0, reset, wout = _setup()
    f = lambda p, h: jnp.sum(_ours(p, x, h, reset) * wout)
    h0s = jnp.stack([h0, -h0, 0.5 * h0])
    batched = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1)), in_axes=(None, 0)))(params, h0s)
    for i in range(3):
        single = jax.grad(f, argnums=(0, 1))(params, h0s[i])
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
            np.testing.assert_allclose(b[i], a, rtol=1e-5, atol=1e-6)  # tolerance: vmapped vs single, two programs
