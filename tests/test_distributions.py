"""Distributions against closed forms (NumPy/SciPy)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats
from scipy.special import log_softmax as np_log_softmax

from purejaxppo.stages.distributions import CATEGORICAL, GAUSSIAN


def test_categorical_log_prob_entropy_mode():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 7, 4)).astype(np.float32) * 3
    actions = rng.integers(0, 4, size=(5, 7))
    ref_logp = np.take_along_axis(np_log_softmax(logits, -1), actions[..., None], -1)[..., 0]
    p = np.exp(np_log_softmax(logits, -1))
    ref_ent = stats.entropy(p, axis=-1)
    np.testing.assert_allclose(
        CATEGORICAL.log_prob(jnp.asarray(logits), jnp.asarray(actions)), ref_logp, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(CATEGORICAL.entropy(jnp.asarray(logits)), ref_ent, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(CATEGORICAL.mode(jnp.asarray(logits)), logits.argmax(-1))


def test_categorical_stable_for_extreme_logits():
    logits = jnp.array([[1000.0, -1000.0, 0.0]])
    lp = CATEGORICAL.log_prob(logits, jnp.array([1]))
    assert np.isfinite(lp).all() and np.allclose(lp, -2000.0)
    assert np.isfinite(CATEGORICAL.entropy(logits)).all()
    # a masked (-inf) action has zero probability and no NaN entropy
    masked = jnp.array([[0.0, -jnp.inf, 0.0]])
    np.testing.assert_allclose(CATEGORICAL.entropy(masked), [np.log(2)], rtol=1e-6)


def test_categorical_sample_frequencies():
    logits = jnp.log(jnp.array([0.1, 0.6, 0.3]))
    samples = CATEGORICAL.sample(jax.random.PRNGKey(0), jnp.broadcast_to(logits, (20000, 3)))
    freq = np.bincount(np.asarray(samples), minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)


def test_gaussian_log_prob_entropy_mode():
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(6, 3)).astype(np.float32)
    log_std = rng.normal(size=(6, 3)).astype(np.float32) * 0.5
    x = rng.normal(size=(6, 3)).astype(np.float32)
    ref_logp = stats.norm.logpdf(x, mean, np.exp(log_std)).sum(-1)
    ref_ent = stats.norm.entropy(mean, np.exp(log_std)).sum(-1)
    params = (jnp.asarray(mean), jnp.asarray(log_std))
    np.testing.assert_allclose(GAUSSIAN.log_prob(params, jnp.asarray(x)), ref_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(GAUSSIAN.entropy(params), ref_ent, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(GAUSSIAN.mode(params), mean)


def test_gaussian_sample_moments():
    mean, log_std = jnp.array([1.0, -2.0]), jnp.log(jnp.array([0.5, 2.0]))
    params = (jnp.broadcast_to(mean, (50000, 2)), jnp.broadcast_to(log_std, (50000, 2)))
    x = np.asarray(GAUSSIAN.sample(jax.random.PRNGKey(0), params))
    np.testing.assert_allclose(x.mean(0), [1.0, -2.0], atol=0.03)
    np.testing.assert_allclose(x.std(0), [0.5, 2.0], rtol=0.02)
