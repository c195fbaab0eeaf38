"""Losses against hand-written formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.stages.losses import actor_loss, explained_variance, normalize, ppo_loss, value_loss


def ref_actor(logp_new, logp_old, adv, eps):
    rho = np.exp(logp_new - logp_old)
    return -np.mean(np.minimum(rho * adv, np.clip(rho, 1 - eps, 1 + eps) * adv))


def test_actor_loss_matches_formula_random():
    rng = np.random.default_rng(0)
    lp_new, lp_old, adv = rng.normal(size=64) * 0.3, rng.normal(size=64) * 0.3, rng.normal(size=64)
    loss, diag = actor_loss(jnp.asarray(lp_new), jnp.asarray(lp_old), jnp.asarray(adv), 0.2)
    np.testing.assert_allclose(loss, ref_actor(lp_new, lp_old, adv, 0.2), rtol=1e-5)
    rho = np.exp(lp_new - lp_old)
    np.testing.assert_allclose(diag["approx_kl"], np.mean(rho - 1 - np.log(rho)), rtol=1e-5)
    np.testing.assert_allclose(diag["clip_frac"], np.mean(np.abs(rho - 1) > 0.2), rtol=1e-6)


@pytest.mark.parametrize(
    "rho,adv,expected_objective",
    [
        (1.5, -2.0, -3.0),  # A<0, rho above band: UNclipped (worse) term -3, not -2.4
        (0.5, 2.0, 1.0),  # A>0, rho below band: unclipped 1.0, not 1.6
        (1.5, 2.0, 2.4),  # A>0 above band: clipped at 1+eps
        (0.5, -2.0, -1.6),  # A<0 below band: clipped at 1-eps
        (1.1, 2.0, 2.2),  # inside the band: unclipped
    ],
)
def test_actor_loss_each_side_by_hand(rho, adv, expected_objective):
    loss, _ = actor_loss(jnp.array([np.log(rho)]), jnp.array([0.0]), jnp.array([adv]), 0.2)
    assert float(loss) == pytest.approx(-expected_objective, rel=1e-5)


def test_actor_gradient_zero_exactly_where_clipped():
    rho = jnp.array([1.5, 0.5, 1.5, 0.5, 1.1, 0.9])
    adv = jnp.array([2.0, -2.0, -2.0, 2.0, 1.0, -1.0])
    # clipped branch active (flat objective) for the first two only
    grad = jax.grad(lambda lp: actor_loss(lp, jnp.zeros(6), adv, 0.2)[0])(jnp.log(rho))
    g = np.asarray(grad)
    assert np.all(g[:2] == 0.0)
    assert np.all(g[2:] != 0.0)
    # unclipped gradient of -mean(rho*A) wrt log rho is -rho*A/n
    np.testing.assert_allclose(g[2:], -(np.asarray(rho) * np.asarray(adv))[2:] / 6, rtol=1e-5)


def test_value_loss_with_and_without_clipping():
    v_new = np.array([1.0, 3.2, -1.0, 0.5])
    v_old = np.array([0.0, 2.5, -0.5, 0.4])
    ret = np.array([0.5, 3.0, 1.0, 0.45])
    plain = 0.5 * np.mean((v_new - ret) ** 2)
    clipped_v = v_old + np.clip(v_new - v_old, -0.2, 0.2)
    clipped = 0.5 * np.mean(np.maximum((v_new - ret) ** 2, (clipped_v - ret) ** 2))
    assert clipped > plain  # the example exercises the max
    np.testing.assert_allclose(value_loss(jnp.asarray(v_new), jnp.asarray(v_old), jnp.asarray(ret)), plain, rtol=1e-6)
    np.testing.assert_allclose(
        value_loss(jnp.asarray(v_new), jnp.asarray(v_old), jnp.asarray(ret), 0.2), clipped, rtol=1e-6
    )


def test_ppo_loss_total_and_masking():
    rng = np.random.default_rng(1)
    n = 10
    lp_new, lp_old, adv, ent, vn, vo, ret = (rng.normal(size=n) for _ in range(7))
    mask = np.arange(n) < 7
    total, m = ppo_loss(
        *(jnp.asarray(x) for x in (lp_new, ent, vn, lp_old, vo, adv, ret)),
        clip_eps=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        mask=jnp.asarray(mask),
    )
    k = mask
    expected = (
        ref_actor(lp_new[k], lp_old[k], adv[k], 0.2)
        + 0.5 * 0.5 * np.mean((vn[k] - ret[k]) ** 2)
        - 0.01 * np.mean(ent[k])
    )
    np.testing.assert_allclose(total, expected, rtol=1e-5)


def test_normalize_and_explained_variance():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(normalize(jnp.asarray(x)), (x - 2.5) / (x.std() + 1e-8), rtol=1e-6)
    t = np.array([1.0, 2.0, 3.0, 5.0])
    np.testing.assert_allclose(explained_variance(jnp.asarray(t), jnp.asarray(t)), 1.0)
    np.testing.assert_allclose(explained_variance(jnp.full(4, t.mean()), jnp.asarray(t)), 0.0, atol=1e-6)
    p = np.array([0.0, 2.5, 3.0, 4.0])
    np.testing.assert_allclose(
        explained_variance(jnp.asarray(p), jnp.asarray(t)), 1 - np.var(t - p) / np.var(t), rtol=1e-5
    )
