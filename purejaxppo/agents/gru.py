"""The GRU cell and a GRU over a whole sequence, fast to differentiate on small batches.

The parameters are those of ``flax.linen.GRUCell`` (``ir, iz, in`` input kernels with
biases; ``hr, hz`` recurrent kernels without, ``hn`` with), and so is the cell::

    r  = sigmoid(x W_ir + b_ir + h W_hr)
    z  = sigmoid(x W_iz + b_iz + h W_hz)
    n  = tanh(x W_in + b_in + r * (h W_hn + b_hn))
    h' = (1 - z) * n + z * h

What differs is how it is computed (the numbers agree to float rounding):

* the three input projections of every step are ONE matmul over all ``T*B`` inputs,
  before the time loop (:func:`input_projection`);
* inside the loop there is one ``[B, G] @ [G, 3G]`` matmul per step, not six;
* :func:`gru_sequence` has its own backward pass: the reverse loop carries only the
  hidden-state gradient and keeps each step's gate gradients; the recurrent kernel's
  gradient is then one ``[G, T*B] @ [T*B, 3G]`` matmul after the loop. Autodiff of a
  plain ``lax.scan`` instead adds a ``[G, 3G]`` outer product into the kernel's gradient
  at every step, inside the loop.

PPO replays minibatches of a few env sequences (PureJaxRL's GRU CartPole: ONE sequence
of 128 steps per minibatch), so a time step is latency, not arithmetic: on a 2-core CPU
the gradient of a 128-step, 1-sequence, 128-unit GRU takes 6.6 ms with flax's cell in a
scan, 2.0 ms with the fused matmuls and 1.5 ms with this backward pass (4.5x; 1.7x for 16
sequences: ``benchmarks/gru_sequence.py``, ``benchmarks/results/gru_sequence_b*.json``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class GRUWeights(NamedTuple):
    """Fused weights: ``wi [H, 3G]``, ``bi [3G]`` (gates r, z, n), ``wh [G, 3G]``, ``bhn [G]``."""

    wi: jax.Array
    bi: jax.Array
    wh: jax.Array
    bhn: jax.Array


def fuse(params) -> GRUWeights:
    """``flax.linen.GRUCell`` params (``{"ir": {"kernel", "bias"}, ..., "hn": {...}}``) -> :class:`GRUWeights`."""
    cat = lambda *xs: jnp.concatenate(xs, axis=-1)
    return GRUWeights(
        cat(params["ir"]["kernel"], params["iz"]["kernel"], params["in"]["kernel"]),
        cat(params["ir"]["bias"], params["iz"]["bias"], params["in"]["bias"]),
        cat(params["hr"]["kernel"], params["hz"]["kernel"], params["hn"]["kernel"]),
        params["hn"]["bias"],
    )


def input_projection(w: GRUWeights, x: jax.Array) -> jax.Array:
    """``x [..., H]`` -> ``x W_i + b_i`` ``[..., 3G]``: the part of every gate that does not need ``h``."""
    return x @ w.wi + w.bi


def _gates(wh, bhn, h, xi):
    """One step from ``h [B, G]`` and projected input ``xi [B, 3G]``: ``(h', (r, z, n, hn))``."""
    g = h.shape[-1]
    hh = h @ wh
    r = jax.nn.sigmoid(xi[..., :g] + hh[..., :g])
    z = jax.nn.sigmoid(xi[..., g : 2 * g] + hh[..., g : 2 * g])
    hn = hh[..., 2 * g :] + bhn
    n = jnp.tanh(xi[..., 2 * g :] + r * hn)
    return (1.0 - z) * n + z * h, (r, z, n, hn)


def gru_cell(w: GRUWeights, h: jax.Array, xi: jax.Array) -> jax.Array:
    """One GRU step: ``h [..., G]``, ``xi = input_projection(w, x)`` ``[..., 3G]`` -> ``h' [..., G]``."""
    return _gates(w.wh, w.bhn, h, xi)[0]


def _reset(h, reset):
    return jnp.where(reset[..., None], jnp.zeros_like(h), h)


def gru_sequence(w: GRUWeights, h0: jax.Array, xi: jax.Array, reset: jax.Array) -> jax.Array:
    """The GRU over time: ``h0 [B, G]``, ``xi [T, B, 3G]`` (:func:`input_projection` of the
    inputs), ``reset [T, B]`` bool -> ``hs [T, B, G]``, the state after each step.

    At step ``t`` the incoming state is zeroed where ``reset[t]`` (an episode began), then
    the cell runs: ``hs[t] = gru_cell(w, where(reset[t], 0, hs[t-1]), xi[t])``, ``hs[-1] = h0``.
    Differentiable in ``w``, ``h0`` and ``xi`` (reverse mode only)."""
    return _sequence(w.wh, w.bhn, h0, xi, reset)


@jax.custom_vjp
def _sequence(wh, bhn, h0, xi, reset):
    return _forward(wh, bhn, h0, xi, reset)[0]


def _forward(wh, bhn, h0, xi, reset):
    def step(h, inputs):
        x, rs = inputs
        h_in = _reset(h, rs)
        h, gates = _gates(wh, bhn, h_in, x)
        return h, (h, h_in, gates)

    _, (hs, h_in, gates) = jax.lax.scan(step, h0, (xi, reset))
    return hs, (wh, reset, h_in, gates)


def _backward(saved, d_hs):
    wh, reset, h_in, (r, z, n, hn) = saved

    def step(dh, inputs):
        d_out, rs, h_in, r, z, n, hn = inputs
        dh = dh + d_out
        da_n = dh * (1.0 - z) * (1.0 - n * n)  # through h' = (1-z) n + z h and n = tanh(a_n)
        da_r = da_n * hn * r * (1.0 - r)
        da_z = dh * (h_in - n) * z * (1.0 - z)
        d_hh = jnp.concatenate([da_r, da_z, da_n * r], axis=-1)  # d(h_in @ wh)
        dh_in = dh * z + d_hh @ wh.T
        return _reset(dh_in, rs), (jnp.concatenate([da_r, da_z, da_n], axis=-1), d_hh)

    dh0, (d_xi, d_hh) = jax.lax.scan(step, jnp.zeros_like(h_in[0]), (d_hs, reset, h_in, r, z, n, hn), reverse=True)
    g = wh.shape[0]
    # the recurrent kernel's gradient over all steps at once: sum_t h_in[t]^T d_hh[t]
    d_wh = h_in.reshape(-1, g).T @ d_hh.reshape(-1, 3 * g)
    d_bhn = d_hh[..., 2 * g :].sum(axis=tuple(range(d_hh.ndim - 1)))
    return d_wh, d_bhn, dh0, d_xi, None


_sequence.defvjp(_forward, _backward)
