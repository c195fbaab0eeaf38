"""The tiny LM's KV cache and the sampling controls (purejaxppo/lm/models/tiny_lm.py, purejaxppo/lm/models/sampling.py).

* The cached decode (FlaxLM) against the full recompute (FullRecompute over the teacher-forced
  pass) on ragged left-padded prompts: same tokens with the
  same key (greedy, sampled, sampled with controls) and the logits of every step within 1e-5.
* ``filter_logits`` / ``sample_tokens`` against NumPy references: top-k keeps exactly k tokens,
  top-p the smallest set with mass >= p, temperature divides the logits, the returned log-prob
  is the log of the renormalised probability (and the draws follow it).
* Stop tokens: a scripted protocol model whose logits force each row's tokens; the response
  mask ends at (and includes) the first stop token.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.models.adapters import FlaxLM, FullRecompute
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.models.sampling import filter_logits, sample_response, sample_tokens

V, P, T, B = 13, 6, 10, 5
PAD = 0
# Tolerance, not bitwise: two different programs compute the same numbers. The cache attends a
# [1, S] row per layer against stored keys where the recompute runs an [S, S] pass (other
# shapes, other fusions and reduction orders in float32). Measured: at most 2.1e-6 apart over
# every step (logits up to ~5 in size, x86 CPU), so 1e-5 leaves a ~5x margin; a real error is
# far above it (a leaked padded key moved logits by 1.7 when tried). Equal tokens then follow
# unless two Gumbel-perturbed logits tie to within 1e-5 (not the case for these seeds).
TOL = 1e-5


@pytest.fixture(scope="module")
def lm():
    model = TinyLM(vocab_size=V, d_model=32, n_layers=2, n_heads=2, max_len=P + T)
    # parameters drawn in NumPy on the init's shapes (cheaper than compiling the init), biases
    # and the value head nonzero too; layer-norm scales near 1
    shapes = jax.eval_shape(
        model.init, jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool)
    )
    rng = np.random.default_rng(1)
    params = jax.tree_util.tree_map_with_path(
        lambda path, s: jnp.asarray((path[-1].key == "scale") + rng.normal(0, 0.3, s.shape), jnp.float32), shapes
    )
    lens = np.array([1, 6, 3, 2, 5])  # ragged: one full prompt, one of a single token
    valid = np.arange(P)[None] >= (P - lens)[:, None]
    prompt = np.where(valid, np.asarray(jax.random.randint(jax.random.PRNGKey(1), (B, P), 1, V)), PAD)
    return model, params, jnp.asarray(prompt), jnp.asarray(valid)


@functools.lru_cache(maxsize=None)
def _sampler(impl_name, top_k):
    """One compile per (implementation, top_k): key, params, prompt, temperature, top_p traced
    (top-k's own effect is checked below, on ``filter_logits``)."""

    def run(key, params, prompt, valid, temperature, top_p, stop):
        model = TinyLM(vocab_size=V, d_model=32, n_layers=2, n_heads=2, max_len=P + T)
        impl = {"cached": FlaxLM(model), "full": FullRecompute(lambda p, t, v: model.apply(p, t, v)[0])}[impl_name]
        return sample_response(impl, params, key, prompt, valid, T, stop, PAD, temperature, top_k, top_p)

    return jax.jit(run)


@pytest.mark.slow
@pytest.mark.parametrize(
    "top_k,temperature,top_p,stop",
    [(1, 1.0, 1.0, []), (0, 1.0, 1.0, [3]), (0, 0.8, 0.9, [11, 9])],
    ids=["greedy", "sampled", "sampled_controls"],
)
def test_kv_cache_decoding_equals_full_recompute(lm, top_k, temperature, top_p, stop):
    _, params, prompt, valid = lm
    key, stop = jax.random.PRNGKey(7), jnp.array(stop, jnp.int32)
    toks_c, logp_c, mask_c = _sampler("cached", top_k)(key, params, prompt, valid, temperature, top_p, stop)
    toks_f, logp_f, mask_f = _sampler("full", top_k)(key, params, prompt, valid, temperature, top_p, stop)
    np.testing.assert_array_equal(toks_c, toks_f)
    np.testing.assert_array_equal(mask_c, mask_f)
    np.testing.assert_allclose(logp_c, logp_f, atol=TOL)
    assert len({tuple(r) for r in np.asarray(toks_c)}) > 1  # rows differ: not a degenerate model
    if stop.size:  # the stop ids end some rows early, not all
        assert 0 < int((~np.asarray(mask_c)).any(1).sum()) < B, np.asarray(mask_c)
    if (top_k, temperature, top_p) == (0, 1.0, 1.0):  # defaults: the sampled log-probs are the policy's (PAD cut)
        model, seq = lm[0], jnp.concatenate([prompt, toks_c], 1)
        seq_valid = jnp.concatenate([valid, mask_c], 1)
        logits = jax.jit(model.apply)(params, seq, seq_valid)[0][:, P - 1 : -1]
        tf = jax.nn.log_softmax(filter_logits(logits, banned=PAD))
        tf = np.take_along_axis(np.asarray(tf), np.asarray(toks_c)[..., None], -1)[..., 0]
        np.testing.assert_allclose(np.where(mask_c, logp_c, 0), np.where(mask_c, tf, 0), atol=TOL)
    if top_k == 1:  # greedy: the same for any key
        other = _sampler("cached", top_k)(jax.random.PRNGKey(8), params, prompt, valid, temperature, top_p, stop)
        np.testing.assert_array_equal(toks_c, other[0])


@pytest.mark.parametrize("query_block", [64, 3], ids=["one_block", "blocks_of_3"])
def test_every_decode_step_has_the_full_recompute_logits(lm, query_block):
    """Both programs teacher-forced on the same (random) response tokens, step by step. With
    ``query_block=3`` the recompute's attention runs in blocks of 3 queries (each reading the
    keys up to its end, ``attention.attend``); the cache's decode never blocks."""
    model, params, prompt, valid = lm
    model = model.clone(query_block=query_block)
    cached, full = FlaxLM(model), FullRecompute(lambda p, t, v: model.apply(p, t, v)[0])
    resp = jax.random.randint(jax.random.PRNGKey(5), (B, T), 1, V)
    (lc, cache_c), (lf, cache_f) = (
        jax.jit(m.prefill, static_argnums=3)(params, prompt, valid, P + T) for m in (cached, full)
    )
    assert [k.shape for k in cache_c.k] == [(B, 2, P + T, 16)] * 2  # [B, heads, max_len, head_dim]
    dec_c, dec_f = jax.jit(cached.decode), jax.jit(full.decode)
    for t in range(T):
        np.testing.assert_allclose(lc, lf, atol=TOL, err_msg=f"step {t}")
        lc, cache_c = dec_c(params, cache_c, resp[:, t], P + t)
        lf, cache_f = dec_f(params, cache_f, resp[:, t], P + t)
    np.testing.assert_allclose(lc, lf, atol=TOL)
    # the protocol's contract: the last decode is the teacher-forced pass's last position
    seq, seq_valid = jnp.concatenate([prompt, resp], 1), jnp.concatenate([valid, jnp.ones((B, T), bool)], 1)
    np.testing.assert_allclose(lc, jax.jit(cached.logits)(params, seq, seq_valid)[:, -1], atol=TOL)


# --- sampling controls against NumPy ---------------------------------------------------------
def _np_probs(logits, temperature=1.0, top_k=0, top_p=1.0, banned=None):
    """The renormalised distribution, in float64: temperature, the banned id cut, then top-k,
    then top-p."""
    x = np.asarray(logits, np.float64) / temperature
    if banned is not None:
        x[:, banned] = -np.inf
    keep = np.ones_like(x, bool)
    if top_k:
        keep = np.zeros_like(x, bool)
        np.put_along_axis(keep, np.argsort(-x, axis=-1, kind="stable")[:, :top_k], True, axis=-1)
    p = np.where(keep, np.exp(x - x.max(-1, keepdims=True)), 0.0)
    p /= p.sum(-1, keepdims=True)
    if top_p < 1.0:
        out = np.zeros_like(p)
        for r in range(p.shape[0]):
            order = np.argsort(-p[r], kind="stable")
            n = int(np.searchsorted(np.cumsum(p[r][order]), top_p) + 1)  # smallest prefix with mass >= p
            out[r, order[:n]] = p[r, order[:n]]
        p = out / out.sum(-1, keepdims=True)
    return p


LOGITS = jax.random.normal(jax.random.PRNGKey(3), (6, 20)) * 2.0


@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_keeps_exactly_k_tokens(k):
    kept = np.isfinite(np.asarray(filter_logits(LOGITS, 1.0, k, 1.0)))
    assert (kept.sum(-1) == k).all()
    np.testing.assert_array_equal(kept, _np_probs(LOGITS, top_k=k) > 0)


def test_top_p_keeps_the_smallest_set_with_mass_p():
    p = _np_probs(LOGITS)
    cum = np.cumsum(-np.sort(-p, axis=-1), axis=-1)
    for r in range(p.shape[0]):
        for n in (1, 2, 4):  # a p between the n-th and (n+1)-th cumulative mass: exactly n+1 kept
            top_p = float((cum[r, n - 1] + cum[r, n]) / 2)
            kept = np.isfinite(np.asarray(filter_logits(LOGITS[r : r + 1], 1.0, 0, top_p)))[0]
            assert kept.sum() == n + 1, (r, n, kept.sum())
            np.testing.assert_array_equal(kept, _np_probs(LOGITS[r : r + 1], top_p=top_p)[0] > 0)
    # 1.0 is off: nothing cut even where float32 cumulative mass reaches 1 early
    assert np.isfinite(np.asarray(filter_logits(LOGITS * 30, 1.0, 0, 1.0))).all()


@pytest.mark.parametrize("temperature", [0.25, 1.0, 3.0])
def test_temperature_scales_logits(temperature):
    out = np.asarray(filter_logits(LOGITS, temperature, 0, 1.0))
    np.testing.assert_allclose(out, np.asarray(LOGITS) / temperature, rtol=1e-6)
    # closed form of the law: p_i = exp(l_i / T) / sum_j exp(l_j / T)
    np.testing.assert_allclose(np.asarray(jax.nn.softmax(out)), _np_probs(LOGITS, temperature), atol=1e-6)


TOP0 = int(np.argmax(np.asarray(LOGITS)[0]))  # row 0's most probable token: banning it moves the most mass


@pytest.mark.parametrize(
    "temperature,top_k,top_p,banned",
    [
        (1.0, 0, 1.0, None),
        (0.7, 5, 1.0, None),
        (1.3, 0, 0.8, None),
        (0.9, 6, 0.7, None),
        (1.0, 0, 1.0, TOP0),
        (0.9, 6, 0.7, TOP0),
    ],
)
def test_logp_is_the_log_of_the_renormalised_probability(temperature, top_k, top_p, banned):
    """``banned`` (the sampler's pad id): never drawn, its mass renormalised over the rest."""
    n = 4000
    keys = jax.random.split(jax.random.PRNGKey(11), n)
    toks, logp = jax.jit(jax.vmap(lambda k: sample_tokens(k, LOGITS, temperature, top_k, top_p, banned)))(keys)
    ref = _np_probs(LOGITS, temperature, top_k, top_p, banned)
    toks, logp = np.asarray(toks), np.asarray(logp)  # [n, 6]
    rows = np.arange(LOGITS.shape[0])[None]
    assert (ref[rows, toks] > 0).all()  # never a cut token
    np.testing.assert_allclose(logp, np.log(ref[rows, toks]), atol=1e-5)
    # and the draws follow that law (4000 draws: 4 standard errors of a frequency <= 0.032)
    freq = np.stack([np.bincount(toks[:, r], minlength=LOGITS.shape[1]) / n for r in range(LOGITS.shape[0])])
    np.testing.assert_allclose(freq, ref, atol=0.032)


# --- stop tokens ------------------------------------------------------------------------------
class Scripted:
    """A protocol model that emits ``script[b, t]`` at response step ``t`` (logit 1e4 on it)."""

    def __init__(self, script):
        self.script = jnp.asarray(script)

    def _at(self, step):
        return 1e4 * jax.nn.one_hot(self.script[:, step], V)

    def logits(self, params, tokens, valid):
        raise NotImplementedError  # generation never calls it

    def prefill(self, params, tokens, valid, max_len):
        return self._at(0), jnp.int32(tokens.shape[1])

    def decode(self, params, cache, token, position):
        return self._at(jnp.minimum(position - cache + 1, self.script.shape[1] - 1)), cache


def test_the_mask_ends_at_the_first_stop_token():
    script = np.array(
        [
            [3, 4, 2, 5, 2, 6],  # stop 2 at step 2
            [2, 3, 3, 3, 3, 3],  # stop at the first token
            [3, 4, 5, 6, 3, 4],  # never stops
            [4, 4, 4, 7, 2, 5],
        ]
    )  # the second stop id (7) at step 3, then 2 again
    prompt, valid = jnp.ones((4, 3), jnp.int32), jnp.ones((4, 3), bool)
    toks, logp, mask = jax.jit(
        lambda k: sample_response(Scripted(script), None, k, prompt, valid, 6, jnp.array([2, 7]), PAD, 0.9, 0, 0.95)
    )(jax.random.PRNGKey(0))
    want = np.array([[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    np.testing.assert_array_equal(mask, want)
    np.testing.assert_array_equal(toks, np.where(want, script, PAD))
    np.testing.assert_array_equal(logp[~want], 0.0)
    np.testing.assert_allclose(logp[want], 0.0, atol=1e-6)  # forced: probability 1


# --- generation ends once every row has stopped ------------------------------------------------
def _full_decode(lm, params, key, prompt, valid, max_new, stops, temperature=1.0):
    """The reference: a Python loop through ALL ``max_new`` steps (no early end), each step as
    ``sample_response`` documents it (``key, sub = split(key)``, PAD never drawn; a row's tokens after its first
    stop are PAD with log-prob 0 and mask False)."""
    logits, cache = lm.prefill(params, prompt, valid, prompt.shape[1] + max_new)
    done, cols = jnp.zeros(prompt.shape[0], bool), []
    for t in range(max_new):
        key, sub = jax.random.split(key)
        tok, lp = sample_tokens(sub, logits, temperature, banned=PAD)
        tok, lp, live = jnp.where(done, PAD, tok), jnp.where(done, 0.0, lp), ~done
        done = done | jnp.isin(tok, jnp.asarray(stops))
        cols.append((tok, lp, live))
        logits, cache = lm.decode(params, cache, tok, prompt.shape[1] + t)
    return tuple(np.stack([np.asarray(c[i]) for c in cols], axis=1) for i in range(3))


def test_generation_that_ends_early_equals_the_full_decode(lm):
    """Every row stops before the last step, at different steps: the loop ends early, and its
    tokens, masks (exactly) and log-probs (two programs: TOL) are the full decode's."""
    model, params, prompt, valid = lm
    impl, stops, key = FlaxLM(model), [2, 3, 4, 5], jax.random.PRNGKey(2)
    toks, logp, mask = jax.jit(lambda k, p: sample_response(impl, p, k, prompt, valid, T, jnp.array(stops), PAD))(
        key, params
    )
    ref_t, ref_l, ref_m = _full_decode(impl, params, key, prompt, valid, T, stops)
    ends = ref_m.sum(1)  # the scenario: every row stopped before the last step, not all at once
    assert ends.max() < T and len(set(ends.tolist())) > 2, ends
    np.testing.assert_array_equal(toks, ref_t)
    np.testing.assert_array_equal(mask, ref_m)
    np.testing.assert_allclose(logp, ref_l, atol=TOL)


def test_generation_decodes_no_step_after_every_row_has_stopped():
    """A scripted model that records each decode's position: the last stop is at step 3 of 6,
    so steps 0..3 are decoded (the step-3 decode comes before the loop sees every row done) and
    4, 5 are not; the outputs are the script's up to each stop, PAD after."""
    script = np.array([[3, 2, 5, 5, 5, 5], [4, 4, 4, 2, 6, 6], [2, 3, 3, 3, 3, 3]])
    seen = []

    class Counting(Scripted):
        def decode(self, params, cache, token, position):
            jax.debug.callback(lambda p: seen.append(int(p)), position, ordered=True)
            return super().decode(params, cache, token, position)

    prompt, valid = jnp.ones((3, 2), jnp.int32), jnp.ones((3, 2), bool)
    toks, _, mask = sample_response(
        Counting(script), None, jax.random.PRNGKey(0), prompt, valid, 6, jnp.array([2]), PAD
    )
    jax.effects_barrier()
    assert seen == [2, 3, 4, 5], seen  # positions P + 0 .. P + 3
    want = np.array([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], bool)
    np.testing.assert_array_equal(mask, want)
    np.testing.assert_array_equal(toks, np.where(want, script, PAD))
