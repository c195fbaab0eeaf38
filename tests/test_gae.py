"""GAE against a plain NumPy loop, and its closed-form identities."""

import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.stages.gae import gae


def numpy_gae(r, v, nv, term, trunc, gamma, lam):
    """Textbook right-to-left loop, one env at a time (independent reference)."""
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            if term[t, b]:
                delta = r[t, b] - v[t, b]  # terminal: bootstrap from 0
                running = delta
            elif trunc[t, b]:
                delta = r[t, b] + gamma * nv[t, b] - v[t, b]  # time limit: V(final obs)
                running = delta
            else:
                delta = r[t, b] + gamma * nv[t, b] - v[t, b]
                running = delta + gamma * lam * running
            adv[t, b] = running
    return adv, adv + v


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.97, 0.5)])
def test_gae_matches_numpy_loop(gamma, lam):
    rng = np.random.default_rng(0)
    T, B = 40, 6
    r = rng.normal(size=(T, B))
    v = rng.normal(size=(T, B))
    nv = rng.normal(size=(T, B))
    term = rng.random((T, B)) < 0.1
    trunc = rng.random((T, B)) < 0.1  # some steps have BOTH flags: termination wins
    assert (term & trunc).any() and (term & ~trunc).any() and (trunc & ~term).any()
    adv, ret = gae(
        *(jnp.asarray(x, jnp.float32) for x in (r, v, nv)), jnp.asarray(term), jnp.asarray(trunc), gamma, lam
    )
    ref_adv, ref_ret = numpy_gae(r, v, nv, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_horizon_cut_bootstraps_from_last_value():
    # no episode end: the last step's advantage is r + gamma*V(s_T) - V(s_{T-1}), not r - V
    r = jnp.array([[1.0], [1.0]])
    v = jnp.array([[0.5], [0.25]])
    nv = jnp.array([[0.25], [2.0]])  # V(s_1), V(s_2) = bootstrap of the horizon
    f = jnp.zeros((2, 1), bool)
    adv, _ = gae(r, v, nv, f, f, 0.9, 0.8)
    a1 = 1.0 + 0.9 * 2.0 - 0.25
    a0 = 1.0 + 0.9 * 0.25 - 0.5 + 0.9 * 0.8 * a1
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [a0, a1], rtol=1e-6)


def test_truncated_vs_terminated_hand_example():
    r = jnp.array([[1.0], [1.0]])
    v = jnp.array([[0.0], [0.0]])
    nv = jnp.array([[0.0], [10.0]])  # V(final observation) of the last step
    trunc = jnp.array([[False], [True]])
    term = jnp.array([[False], [True]])
    adv_trunc, _ = gae(r, v, nv, jnp.zeros_like(trunc), trunc, 0.5, 1.0)
    adv_term, _ = gae(r, v, nv, term, jnp.zeros_like(term), 0.5, 1.0)
    adv_both, _ = gae(r, v, nv, term, trunc, 0.5, 1.0)
    assert float(adv_trunc[1, 0]) == pytest.approx(1.0 + 0.5 * 10.0)  # bootstraps
    assert float(adv_term[1, 0]) == pytest.approx(1.0)  # from 0
    assert float(adv_both[1, 0]) == pytest.approx(1.0)  # termination wins
    assert float(adv_trunc[0, 0]) == pytest.approx(1.0 + 0.5 * 6.0)


def test_identity_gamma_lambda_one_is_reward_to_go_minus_value():
    rng = np.random.default_rng(3)
    T = 25
    r, v = rng.normal(size=(T, 1)), rng.normal(size=(T, 1))
    nv = np.concatenate([v[1:], [[0.0]]])  # V of the next state; last step terminates
    term = np.zeros((T, 1), bool)
    term[-1] = True
    adv, _ = gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(nv), jnp.asarray(term), jnp.zeros((T, 1), bool), 1.0, 1.0)
    rtg = np.cumsum(r[::-1, 0])[::-1]
    np.testing.assert_allclose(np.asarray(adv)[:, 0], rtg - v[:, 0], rtol=1e-4, atol=1e-4)


def test_identity_lambda_zero_is_td_error():
    rng = np.random.default_rng(4)
    r, v, nv = (rng.normal(size=(30, 3)) for _ in range(3))
    term = rng.random((30, 3)) < 0.2
    adv, _ = gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(nv), jnp.asarray(term), jnp.zeros((30, 3), bool), 0.9, 0.0)
    np.testing.assert_allclose(adv, r + 0.9 * (1 - term) * nv - v, rtol=1e-5, atol=1e-5)


def test_trailing_reward_decays_geometrically():
    T = 6
    r = np.zeros((T, 1))
    r[-1] = 1.0
    z = np.zeros((T, 1))
    term = np.zeros((T, 1), bool)
    term[-1] = True
    adv, _ = gae(jnp.asarray(r), jnp.asarray(z), jnp.asarray(z), jnp.asarray(term), jnp.zeros((T, 1), bool), 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], 0.72 ** np.arange(T)[::-1], rtol=1e-5)
