"""Token-level PPO functions (purejaxppo.lm.ppo.token_stages) against hand-computed vectors and NumPy loops."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.ppo import token_stages as tk

from purejaxppo.lm.ppo import token_loss as tl
from purejaxppo.lm.models.tiny_lm import TinyLM


# --- references written independently of the library -----------------------------------
def np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_token_gae(rewards, values, mask, gamma, lam):
    """Plain loop: walk the valid tokens of each row right to left."""
    b, l = rewards.shape
    adv = np.zeros((b, l))
    for i in range(b):
        idx = [t for t in range(l) if mask[i, t]]
        a_next, v_next = 0.0, 0.0  # after the last valid token: terminal
        for t in reversed(idx):
            delta = rewards[i, t] + gamma * v_next - values[i, t]
            a = delta + gamma * lam * a_next
            adv[i, t] = a
            a_next, v_next = a, values[i, t]
    return adv, np.where(mask, adv + values, 0.0)


# --- alignment / log-probs --------------------------------------------------------------
def test_token_logprobs_match_numpy_loop():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 7)).astype(np.float32) * 3
    toks = rng.integers(0, 7, size=(2, 5))
    out = np.asarray(tk.token_logprobs(jnp.asarray(logits), jnp.asarray(toks)))
    ref = np.zeros((2, 5))
    for b in range(2):
        for t in range(1, 5):
            ref[b, t] = np_log_softmax(logits[b, t - 1])[toks[b, t]]
    np.testing.assert_allclose(out, ref, atol=1e-5)
    ent = np.asarray(tk.token_entropy(jnp.asarray(logits)))
    p = np.exp(np_log_softmax(logits[1, 2]))
    np.testing.assert_allclose(ent[1, 3], -(p * np.log(p)).sum(), atol=1e-5)
    assert ent[0, 0] == 0.0


def test_last_valid_mask():
    mask = jnp.array([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]], bool)
    expect = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]], bool)
    np.testing.assert_array_equal(np.asarray(tk.last_valid_mask(mask)), expect)


# --- KL estimators and shaped rewards ---------------------------------------------------
def test_kl_estimators_hand_values():
    logp = jnp.array([[-1.0, -2.0, -0.5]])
    ref = jnp.array([[-1.5, -1.7, -0.5]])  # d = 0.5, -0.3, 0
    np.testing.assert_allclose(tk.kl_penalty(logp, ref, "k1"), [[0.5, -0.3, 0.0]], atol=1e-6)
    np.testing.assert_allclose(tk.kl_penalty(logp, ref, "k2"), [[0.125, 0.045, 0.0]], atol=1e-6)
    k3 = [math.exp(-0.5) - 1 + 0.5, math.exp(0.3) - 1 - 0.3, 0.0]
    np.testing.assert_allclose(tk.kl_penalty(logp, ref, "k3"), [k3], atol=1e-6)
    np.testing.assert_allclose(tk.kl_penalty(logp, ref, "abs"), [[0.5, 0.3, 0.0]], atol=1e-6)
    # masked slot holding NaN returns 0, not NaN
    m = jnp.array([[True, True, False]])
    out = tk.kl_penalty(logp.at[0, 2].set(jnp.nan), ref, "k3", mask=m)
    np.testing.assert_allclose(out, [[k3[0], k3[1], 0.0]], atol=1e-6)
    with pytest.raises(ValueError):
        tk.kl_penalty(logp, ref, "k9")


def test_shaped_rewards_hand_vector():
    #            prompt prompt  r0    r1    r2   pad
    mask = jnp.array([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], bool)
    kl = jnp.array([[9.0, 9.0, 0.2, -0.1, 0.4, jnp.nan], [jnp.inf, 0.0, 1.0, 0.5, 0.0, 2.0]])
    score = jnp.array([2.0, -1.0])
    r = np.asarray(tk.shaped_rewards(score, kl, mask, beta=0.1))
    expect = np.array([[0, 0, -0.02, 0.01, -0.04 + 2.0, 0], [0, 0, -0.1, -0.05, 0.0, -0.2 - 1.0]])
    np.testing.assert_allclose(r, expect, atol=1e-6)
    # per-sequence beta [B]
    r2 = np.asarray(tk.shaped_rewards(score, kl, mask, beta=jnp.array([0.1, 1.0])))
    np.testing.assert_allclose(r2[1], [0, 0, -1.0, -0.5, 0.0, -2.0 - 1.0], atol=1e-6)


def test_reward_conservation():
    rng = np.random.default_rng(1)
    b, l = 6, 9
    lengths = rng.integers(0, 6, size=b)
    starts = rng.integers(0, 3, size=b)
    mask = np.zeros((b, l), bool)
    for i in range(b):
        mask[i, starts[i] : starts[i] + lengths[i]] = True
    kl = rng.normal(size=(b, l))
    score = rng.normal(size=b)
    beta = 0.37
    r = np.asarray(tk.shaped_rewards(jnp.asarray(score), jnp.asarray(kl), jnp.asarray(mask), beta))
    for i in range(b):
        expected = (score[i] - beta * kl[i][mask[i]].sum()) if lengths[i] > 0 else 0.0
        np.testing.assert_allclose(r[i].sum(), expected, atol=1e-5)
        assert np.all(r[i][~mask[i]] == 0)
    np.testing.assert_allclose(
        tk.sequence_kl(jnp.asarray(kl), jnp.asarray(mask)), [kl[i][mask[i]].sum() for i in range(b)], atol=1e-5
    )


# --- masked GAE -------------------------------------------------------------------------
def test_token_gae_hand_vector():
    # one row: prompt, 3 response tokens, pad.  gamma=0.9, lambda=0.8
    mask = jnp.array([[0, 1, 1, 1, 0]], bool)
    r = jnp.array([[5.0, 0.0, 1.0, 2.0, 7.0]])
    v = jnp.array([[3.0, 0.5, 1.0, 1.5, 9.0]])
    # by hand: t3: d=2-1.5=0.5, A=0.5
    #          t2: d=1+0.9*1.5-1=1.35, A=1.35+0.72*0.5=1.71
    #          t1: d=0+0.9*1.0-0.5=0.4, A=0.4+0.72*1.71=1.6312
    adv, ret = tk.token_gae(r, v, mask, 0.9, 0.8)
    np.testing.assert_allclose(adv, [[0, 1.6312, 1.71, 0.5, 0]], atol=1e-5)
    np.testing.assert_allclose(ret, [[0, 2.1312, 2.71, 2.0, 0]], atol=1e-5)


def test_token_gae_gamma_lambda_one_is_reward_to_go_minus_value():
    rng = np.random.default_rng(2)
    mask = np.array([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]], bool)
    r, v = rng.normal(size=(2, 7)), rng.normal(size=(2, 7))
    adv, ret = tk.token_gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(mask), 1.0, 1.0)
    for i in range(2):
        for t in range(7):
            if mask[i, t]:
                togo = sum(r[i, k] for k in range(t, 7) if mask[i, k])
                np.testing.assert_allclose(adv[i, t], togo - v[i, t], atol=1e-5)
                np.testing.assert_allclose(ret[i, t], togo, atol=1e-5)
            else:
                assert adv[i, t] == 0 and ret[i, t] == 0


def test_token_gae_terminal_reward_decays_by_gamma_lambda_power():
    gamma, lam = 0.9, 0.7
    mask = jnp.array([[0, 1, 1, 1, 1, 0, 0]], bool)
    r = jnp.zeros((1, 7)).at[0, 4].set(1.0)
    adv, _ = tk.token_gae(r, jnp.zeros((1, 7)), mask, gamma, lam)
    np.testing.assert_allclose(adv[0, 1:5], [(gamma * lam) ** k for k in (3, 2, 1, 0)], atol=1e-6)


def test_token_gae_matches_numpy_loop_random_masks_with_holes_and_nan():
    rng = np.random.default_rng(3)
    b, l = 5, 10
    mask = rng.random((b, l)) < 0.6
    mask[0] = False  # an empty row
    r, v = rng.normal(size=(b, l)), rng.normal(size=(b, l))
    adv_ref, ret_ref = np_token_gae(r, v, mask, 0.95, 0.9)
    r_dirty = np.where(mask, r, np.nan)
    v_dirty = np.where(mask, v, np.inf)
    adv, ret = tk.token_gae(jnp.asarray(r_dirty), jnp.asarray(v_dirty), jnp.asarray(mask), 0.95, 0.9)
    np.testing.assert_allclose(adv, adv_ref, atol=1e-5)
    np.testing.assert_allclose(ret, ret_ref, atol=1e-5)


# --- whitening and losses ---------------------------------------------------------------
def test_masked_whiten_hand_vector():
    x = jnp.array([1.0, 2.0, 3.0, jnp.nan, jnp.inf])
    m = jnp.array([1, 1, 1, 0, 0], bool)
    s = math.sqrt(2.0 / 3.0)
    np.testing.assert_allclose(tk.masked_whiten(x, m), [-1 / s, 0, 1 / s, 0, 0], atol=1e-5)
    np.testing.assert_allclose(tk.masked_mean(x, m), 2.0, atol=1e-6)


def test_clip_losses_hand_vectors_token_and_seq_mean():
    # row 0: 2 valid tokens, row 1: 1 valid token
    mask = jnp.array([[1, 1, 0], [0, 1, 0]], bool)
    lr = jnp.log(jnp.array([[1.5, 0.5, 1.0], [1.0, 1.5, 1.0]]))  # logp_new - logp_old
    adv = jnp.array([[2.0, 1.0, 0.0], [0.0, -2.0, 0.0]])
    # surrogates: rho=1.5,A=2 -> min(3, 2.4)=2.4 ; rho=.5,A=1 -> min(.5,.8)=.5 ; rho=1.5,A=-2 -> min(-3,-2.4)=-3
    zeros = jnp.zeros((2, 3))
    vn = jnp.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    vo = jnp.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    ret = jnp.array([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0]])
    # value errors, unclipped: 0, 1, 0. clipped (eps_v=0.5): V_old+clip -> 0.5, 0, 0.5 -> (0.5-1)^2=.25, 1, (0.5-2)^2=2.25
    # max: .25, 1, 2.25
    ent = jnp.array([[1.0, 2.0, 0.0], [0.0, 4.0, 0.0]])
    kw = dict(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, vf_clip_eps=0.5)
    loss, m = tl.token_ppo_loss(lr, ent, vn, zeros, vo, adv, ret, mask, **kw)
    actor = -(2.4 + 0.5 - 3.0) / 3
    critic = 0.5 * (0.25 + 1 + 2.25) / 3
    entropy = (1 + 2 + 4) / 3
    np.testing.assert_allclose(m["actor_loss"], actor, atol=1e-5)
    np.testing.assert_allclose(m["critic_loss"], critic, atol=1e-5)
    np.testing.assert_allclose(loss, actor + 0.5 * critic - 0.01 * entropy, atol=1e-5)
    np.testing.assert_allclose(m["clip_frac"], 1.0, atol=1e-6)  # all three ratios outside [0.8, 1.2]
    # per-sequence mean: row means first, then across rows
    loss_s, ms = tl.token_ppo_loss(lr, ent, vn, zeros, vo, adv, ret, mask, aggregation="seq-mean", **kw)
    actor_s = -((2.4 + 0.5) / 2 + (-3.0)) / 2
    critic_s = 0.5 * ((0.25 + 1) / 2 + 2.25) / 2
    ent_s = ((1 + 2) / 2 + 4) / 2
    np.testing.assert_allclose(ms["actor_loss"], actor_s, atol=1e-5)
    np.testing.assert_allclose(ms["critic_loss"], critic_s, atol=1e-5)
    np.testing.assert_allclose(ms["entropy"], ent_s, atol=1e-5)
    np.testing.assert_allclose(loss_s, actor_s + 0.5 * critic_s - 0.01 * ent_s, atol=1e-5)
    with pytest.raises(ValueError):
        tl.aggregation_weights(mask, "sum")


# --- masked slots: NaN/inf must not matter ----------------------------------------------
def _loss_from_logits(logits, values_new, toks, mask, logp_old, v_old, adv, ret, aggregation):
    logp = tk.token_logprobs(logits, toks)
    ent = tk.token_entropy(logits)
    loss, _ = tl.token_ppo_loss(
        logp,
        ent,
        values_new,
        logp_old,
        v_old,
        tk.masked_whiten(adv, mask),
        ret,
        mask,
        clip_eps=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        vf_clip_eps=0.2,
        aggregation=aggregation,
    )
    return loss


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean"])
def test_nan_inf_in_masked_slots_change_neither_loss_nor_grads(aggregation):
    rng = np.random.default_rng(4)
    b, l, vocab = 3, 8, 6
    toks = jnp.asarray(rng.integers(0, vocab, size=(b, l)))
    mask = jnp.asarray(np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 0]], bool))
    logits = jnp.asarray(rng.normal(size=(b, l, vocab)), jnp.float32)
    values_new = jnp.asarray(rng.normal(size=(b, l)), jnp.float32)
    clean = [jnp.asarray(rng.normal(size=(b, l)), jnp.float32) - 1.0 for _ in range(4)]
    dirty = []
    for i, x in enumerate(clean):
        fill = [jnp.nan, jnp.inf, -jnp.inf, jnp.nan][i]
        dirty.append(jnp.where(mask, x, fill))
    g = jax.value_and_grad(_loss_from_logits, argnums=(0, 1))
    l_c, (gl_c, gv_c) = g(logits, values_new, toks, mask, *clean, aggregation)
    l_d, (gl_d, gv_d) = g(logits, values_new, toks, mask, *dirty, aggregation)
    assert np.isfinite(l_c)
    np.testing.assert_array_equal(np.asarray(l_c), np.asarray(l_d))
    np.testing.assert_array_equal(np.asarray(gl_c), np.asarray(gl_d))
    np.testing.assert_array_equal(np.asarray(gv_c), np.asarray(gv_d))
    assert np.all(np.isfinite(gl_d)) and np.all(np.isfinite(gv_d))
    # logits at position p score token p+1: their gradient is zero unless token p+1 is an action
    scores_action = np.concatenate([np.asarray(mask)[:, 1:], np.zeros((b, 1), bool)], axis=1)
    assert np.all(np.asarray(gl_d)[~scores_action] == 0.0)
    assert np.all(np.abs(np.asarray(gl_d)[scores_action]).sum(-1) > 0)
    assert np.all(np.asarray(gv_d)[~np.asarray(mask)] == 0.0)


# --- model: left padding and causality --------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm():
    model = TinyLM(vocab_size=9, d_model=32, n_layers=2, n_heads=2, max_len=16)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 10), jnp.int32), jnp.ones((1, 10), bool))
    return model, params


def test_left_padding_invariance(tiny_lm):
    model, params = tiny_lm
    seq = [5, 3, 7, 2, 4, 6, 1]  # prompt 3 tokens + 4 response tokens
    n_resp = 4
    outs = []
    for n_pad in (0, 3):
        toks = jnp.asarray([[0] * n_pad + seq])
        valid = toks != 0
        logits, values = model.apply(params, toks, valid)
        logp = tk.token_logprobs(logits, toks)[0, -n_resp:]
        vals = tk.shift_right(values)[0, -n_resp:]
        outs.append((np.asarray(logp), np.asarray(vals)))
    np.testing.assert_allclose(outs[0][0], outs[1][0], atol=1e-5)
    np.testing.assert_allclose(outs[0][1], outs[1][1], atol=1e-5)
    # and padding WITHOUT the mask would change them (the test can fail)
    toks = jnp.asarray([[0] * 3 + seq])
    logits, _ = model.apply(params, toks, jnp.ones_like(toks, bool))
    assert np.abs(np.asarray(tk.token_logprobs(logits, toks)[0, -n_resp:]) - outs[0][0]).max() > 1e-4


def test_causality(tiny_lm):
    model, params = tiny_lm
    a = jnp.asarray([[0, 0, 5, 3, 7, 2, 4, 6]])
    b = a.at[0, 5].set(8)  # change token 5
    la, _ = model.apply(params, a, a != 0)
    lb, _ = model.apply(params, b, b != 0)
    pa, pb = tk.token_logprobs(la, a), tk.token_logprobs(lb, b)
    np.testing.assert_array_equal(np.asarray(pa[0, :5]), np.asarray(pb[0, :5]))
    assert np.abs(np.asarray(pa[0, 5:] - pb[0, 5:])).max() > 1e-4


# --- adaptive KL controller -------------------------------------------------------------
def test_adaptive_kl_controller_numbers_and_no_recompile():
    upd = jax.jit(tk.adaptive_kl_update)
    # KL far above target: e clipped to +0.2 -> beta * (1 + 0.2 * 256 / 10000)
    np.testing.assert_allclose(upd(0.1, 12.0, 6.0, 256, 10000), 0.1 * 1.00512, rtol=1e-6)
    # KL 10% below target: e = -0.1
    np.testing.assert_allclose(upd(0.1, 5.4, 6.0, 256, 10000), 0.1 * (1 - 0.1 * 0.0256), rtol=1e-6)
    # far below: e clipped to -0.2
    np.testing.assert_allclose(upd(0.2, 0.0, 6.0, 500, 1000), 0.2 * 0.9, rtol=1e-6)
    np.testing.assert_allclose(upd(0.2, 6.0, 6.0, 500, 1000), 0.2, rtol=1e-6)
    assert upd._cache_size() == 1  # beta/kl are traced: new values never recompile
