"""The decode whose KV cache grows in rungs (``sample_response(..., rungs=k)``) samples what the
one-cache decode samples.

Reference: the same ``sample_response`` with ``rungs=0`` (one cache of ``P + T`` slots from the
start), on batches whose longest response ends in every rung, the cap included. Two different
programs (caches of other widths: the softmax and the value sums run over other numbers of keys,
the extra ones holding exact zeros), so the tokens and masks must be equal and the log-probs
agree to float32 reassociation, 1e-5 (seen: 7e-7), never bit for bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.models.length_buckets import bucket_sizes
from purejaxppo.lm.models.adapters import FlaxLM, FullRecompute
from purejaxppo.lm.models.kv_cache import KVCache, grow_kv_cache
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.models.sampling import sample_response

V, P, T, B, STOP, PAD, RUNG = 9, 4, 20, 6, 3, 0, 2
SIZES = bucket_sizes(T, RUNG)  # (2, 4, 8, 16, 20)


def _model():
    model = TinyLM(V, 16, 2, 2, max_len=P + T)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    return model, params


def _prompts(b=B):
    key = jax.random.PRNGKey(1)
    lens = jax.random.randint(key, (b,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (b, P), 4, V)
    return jnp.where(valid, toks, PAD).astype(jnp.int32), valid


def _with_stop_bias(params, bias):  # a larger bias on the stop token's logit: shorter responses
    head = params["params"]["lm_head"]
    return {"params": {**params["params"], "lm_head": {**head, "bias": head["bias"].at[STOP].add(bias)}}}


_COMPILED = {}


def _sample(lm, params, key, rungs, per_row, stops=(STOP,)):
    """``sample_response``'s ``(tokens, logp, mask)``, one compiled program per setting."""
    if (lm, rungs, per_row, stops) not in _COMPILED:
        prompt, valid = _prompts()
        stop_ids = jnp.asarray(stops, jnp.int32)
        _COMPILED[lm, rungs, per_row, stops] = jax.jit(
            lambda p, k: sample_response(lm, p, k, prompt, valid, T, stop_ids, PAD, per_row=per_row, rungs=rungs)
        )
    return _COMPILED[lm, rungs, per_row, stops](params, jax.random.split(key, B) if per_row else key)


@pytest.mark.parametrize("per_row", [True, False])
def test_rungs_sample_the_one_cache_decode(per_row):
    model, params = _model()
    lm, rungs_seen = FlaxLM(model), set()
    # stop biases and seeds chosen so the batch's longest response ends in each rung and at the cap
    for bias, stops in [(6.0, (STOP,)), (3.0, (STOP,)), (1.0, (STOP,)), (0.0, ())]:
        for seed in range(3):
            p, key = _with_stop_bias(params, bias), jax.random.PRNGKey(seed)
            want = _sample(lm, p, key, 0, per_row, stops)
            got = _sample(lm, p, key, RUNG, per_row, stops)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[2], want[2])
            np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-5)
            rungs_seen.add(int(np.searchsorted(SIZES, int(np.asarray(want[2]).sum(1).max()))))
    assert rungs_seen == set(range(len(SIZES))), rungs_seen  # every rung, the cap (T = 20) included


def test_rungs_without_a_cache():
    """:class:`FullRecompute` (its "cache" is the token buffer) grows the same way."""
    model, params = _model()
    lm = FullRecompute(lambda p, t, v: model.apply(p, t, v, heads="logits")[0])
    for bias in (3.0, 0.0):
        p, key = _with_stop_bias(params, bias), jax.random.PRNGKey(5)
        want, got = _sample(lm, p, key, 0, True), _sample(lm, p, key, RUNG, True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-5)


def test_each_decode_step_reads_its_rung_only():
    """The decode is traced once per rung, with a cache of ``P + width`` slots (not the cap's)."""
    model, params = _model()
    widths = []

    class Recording(FlaxLM):
        def decode(self, params, cache, token, position):
            widths.append(cache.valid.shape[1])
            return super().decode(params, cache, token, position)

    _sample(Recording(model), params, jax.random.PRNGKey(0), RUNG, True)
    assert sorted(widths) == [P + w for w in SIZES]
    widths.clear()
    _sample(Recording(model), params, jax.random.PRNGKey(0), 0, True)
    assert widths == [P + T]


def test_grow_kv_cache_by_hand():
    """Keys ``[B, H, S, hd]`` grow along their slots (axis 2), values ``[B, H, hd, S]`` along theirs
    (the last), per layer and stacked."""
    k = tuple(jnp.arange(2 * 1 * 3 * 2, dtype=jnp.float32).reshape(2, 1, 3, 2) + i for i in range(2))
    v = tuple(jnp.swapaxes(x, 2, 3) + 10 for x in k)
    cache = KVCache(k, v, jnp.array([[True, False, True], [True, True, True]]), jnp.array([2, 3], jnp.int32))
    grown = grow_kv_cache(cache, 5)
    for old, new in zip(cache.k, grown.k):
        assert new.shape == (2, 1, 5, 2)
        np.testing.assert_array_equal(new[:, :, :3], old)
        np.testing.assert_array_equal(new[:, :, 3:], 0.0)
    for old, new in zip(cache.v, grown.v):
        assert new.shape == (2, 1, 2, 5)
        np.testing.assert_array_equal(new[..., :3], old)
        np.testing.assert_array_equal(new[..., 3:], 0.0)
    stacked = grow_kv_cache(cache._replace(k=jnp.stack(k), v=jnp.stack(v)), 5)
    np.testing.assert_array_equal(stacked.k, jnp.stack(grown.k))
    np.testing.assert_array_equal(stacked.v, jnp.stack(grown.v))
    np.testing.assert_array_equal(grown.valid, [[True, False, True, False, False], [True, True, True, False, False]])
    np.testing.assert_array_equal(grown.count, cache.count)
