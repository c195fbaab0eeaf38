"""The loss family of token-level PPO / GRPO (purejaxppo/lm/ppo/token_stages.py, token_update.py,
experience.py, group_advantages.py, recipes.py).

Independent references: every setting's loss (and, where cheap, its gradient) written out in
NumPy from the paper's formula, one token at a time, on hand-set inputs: the asymmetric clip
(DAPO), the dual clip (Ye et al. 2020), the aggregations (token-mean, seq-mean, Dr. GRPO's
token-sum-norm), GSPO's sequence ratio, Dr. GRPO's group advantage, REINFORCE++ (and its
group baseline), DAPO's soft overlong punishment and the truncated rows' mask; the recipes
against the papers' values. The defaults are today's program: the same jaxpr as the clipped
loss called as before, and a NumPy PPO reference.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.lm.models.adapters import FullRecompute
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_config as tc
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo import token_loss as tl
from purejaxppo.lm.ppo.group_advantages import group_advantages
from purejaxppo.lm.ppo.recipes import RECIPE_FIELDS, RECIPES, apply_recipe
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_records import Experience, TokenBatch
from purejaxppo.lm.ppo.token_update import minibatch_totals, share_loss
from purejaxppo.stages import losses

# --- hand-set tokens: 4 rows, 2 prompt slots, 3 response slots (L = 5), a budget T = 6 -------
MASK = np.array([[0, 0, 1, 1, 1], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]], bool)
T_BUDGET = 6  # max_new_tokens: neither the width 3 nor L = 5
# log ratios chosen to land on every side of [0.8, 1.2], [0.8, 1.28] and the dual cap 3 (no ties)
LOG_RATIO = np.log(
    np.array([[1, 1, 1.25, 0.70, 1.10], [1, 1, 4.00, 1, 1], [1, 1, 0.75, 1.30, 1], [1, 1, 2.00, 0.90, 1.15]])
)
ADV = np.array([[0, 0, 1.5, 1.5, -0.5], [0, 0, -2.0, 0, 0], [0, 0, -1.0, 2.0, 0], [0, 0, -0.5, 0.7, 1.2]])
LOGP_OLD = -np.linspace(0.5, 2.5, 20).reshape(4, 5)
LOGP_NEW = LOGP_OLD + LOG_RATIO


def np_policy_loss(logp, old, adv, mask, lo=0.2, hi=0.0, dual=0.0, level="token", agg="token-mean", budget=None):
    """The clipped policy loss and its gradient in ``logp``, one token at a time.

    Per token (Schulman et al. 2017; DAPO's clip-higher; Ye et al.'s dual clip for ``A < 0``):
    ``pg = max(-A r, -A clip(r, 1 - lo, 1 + hi))``, then ``min(pg, -dual A)``. ``level ==
    "sequence"`` (GSPO): ``r`` is the row's ``exp(mean_t (logp - old))``. Aggregation weights:
    ``1 / N`` (token-mean), ``1 / (B' n_b)`` (seq-mean), ``1 / (B T)`` (token-sum-norm)."""
    hi = hi or lo
    rows, width = logp.shape
    n = mask.sum(1)
    nonempty = int((n > 0).sum())
    loss, grad = 0.0, np.zeros((rows, width))
    for b in range(rows):
        idx = [t for t in range(width) if mask[b, t]]
        s = np.exp(np.mean([logp[b, t] - old[b, t] for t in idx])) if idx else 1.0
        seq_weight = 0.0
        seq_slope = 0.0
        for t in idx:
            if agg == "token-mean":
                weight = 1.0 / mask.sum()
            elif agg == "seq-mean":
                weight = 1.0 / (nonempty * n[b])
            else:
                weight = 1.0 / (rows * budget)
            r = s if level == "sequence" else np.exp(logp[b, t] - old[b, t])
            a = adv[b, t]
            clipped = min(max(r, 1 - lo), 1 + hi)
            pg = max(-a * r, -a * clipped)
            slope = -a * r if -a * r >= -a * clipped else 0.0  # d pg / d log r (r inside: equal)
            if dual and a < 0 and pg > -dual * a:
                pg, slope = -dual * a, 0.0
            loss += weight * pg
            if level == "sequence":  # d log s / d logp[b, u] = 1 / n_b for every valid u
                seq_weight, seq_slope = seq_weight + weight, slope
            else:
                grad[b, t] = weight * slope
        if level == "sequence":
            for u in idx:
                grad[b, u] = seq_weight * seq_slope / n[b]
    return loss, grad


def jx_policy_loss(logp, **kw):
    """token_ppo_loss's actor loss (no critic, no entropy) and its gradient in ``logp``."""
    z = jnp.zeros(MASK.shape)

    def f(lp):
        _, m = tl.token_ppo_loss(
            lp, z, z, jnp.asarray(LOGP_OLD), z, jnp.asarray(ADV), z, jnp.asarray(MASK), vf_coef=0.0, ent_coef=0.0, **kw
        )
        return m["actor_loss"]

    loss, grad = jax.jit(jax.value_and_grad(f))(jnp.asarray(logp, jnp.float32))
    return float(loss), np.asarray(grad)


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


# --- the defaults: today's program ----------------------------------------------------------
def test_the_default_loss_is_plain_ppo_and_the_same_program_as_before():
    """The default settings add no operation: the jaxpr is the clipped loss's called on the
    cleaned inputs as the token loss always called it; its value is a NumPy PPO's."""
    rng = np.random.default_rng(0)
    values_new, values_old, returns, entropy = (jnp.asarray(rng.normal(size=MASK.shape), jnp.float32) for _ in range(4))
    args = (jnp.asarray(LOGP_NEW, jnp.float32), entropy, values_new, jnp.asarray(LOGP_OLD, jnp.float32))
    args += (values_old, jnp.asarray(ADV, jnp.float32), returns, jnp.asarray(MASK))
    kw = dict(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, vf_clip_eps=0.2)

    def before(*a):  # the token loss before the loss family, for token-mean
        m = a[-1]
        clean = [jnp.where(m, x, jnp.asarray(0.0, x.dtype)) for x in a[:-1]]
        return losses.ppo_loss(*clean, mask=m, **kw)

    cfg = TokenPPOConfig()  # the family's declared defaults, as share_loss passes them
    family = dict(
        clip_eps_high=cfg.clip_eps_high,
        dual_clip=cfg.dual_clip,
        importance_level=cfg.importance_level,
        max_new_tokens=cfg.max_new_tokens,
    )
    now = jax.make_jaxpr(lambda *a: tl.token_ppo_loss(*a, **kw, aggregation=cfg.aggregation, **family))(*args)
    assert str(now) == str(jax.make_jaxpr(before)(*args))
    loss, m = jax.jit(lambda *a: tl.token_ppo_loss(*a, **kw, **family))(*args)
    actor, _ = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK)
    vn, vo, ret, ent = (np.asarray(x, np.float64) for x in (values_new, values_old, returns, entropy))
    critic = np.mean(
        [
            0.5
            * max((vn[b, t] - ret[b, t]) ** 2, (vo[b, t] + np.clip(vn[b, t] - vo[b, t], -0.2, 0.2) - ret[b, t]) ** 2)
            for b, t in zip(*np.nonzero(MASK))
        ]
    )
    close(float(m["actor_loss"]), actor)
    close(float(m["critic_loss"]), critic)
    close(float(loss), actor + 0.5 * critic - 0.01 * ent[MASK].mean())


# --- each setting against its formula ---------------------------------------------------------
def test_asymmetric_clip_is_dapos_clip_higher():
    """Ratios clipped to [1 - 0.2, 1 + 0.28]: 1.25 with A > 0 is inside now (clipped at 1.2
    before), 1.30 clips at 1.28, 0.75 / 0.70 with A < 0 at 0.8; gradients too. A traced high
    side gives the same numbers, and a traced 0 is the symmetric clip."""
    want, want_grad = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK, hi=0.28)
    sym, _ = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK)
    assert abs(want - sym) > 1e-3  # the high side matters on these inputs
    loss, grad = jx_policy_loss(LOGP_NEW, clip_eps=0.2, clip_eps_high=0.28)
    close(loss, want)
    close(grad, want_grad)
    traced = jax.jit(lambda hi: jx_policy_loss_traced(hi))
    close(float(traced(0.28)), want)
    close(float(traced(0.0)), sym)


def jx_policy_loss_traced(hi):
    z = jnp.zeros(MASK.shape)
    lp, old, adv, mask = (jnp.asarray(x) for x in (LOGP_NEW, LOGP_OLD, ADV, MASK))
    _, m = tl.token_ppo_loss(lp, z, z, old, z, adv, z, mask, clip_eps=0.2, vf_coef=0.0, ent_coef=0.0, clip_eps_high=hi)
    return m["actor_loss"]


def test_dual_clip_bounds_a_negative_advantage_tokens_loss():
    """Row 1's ratio 4 with A = -2: PPO's loss 8, dual clip 3 caps it at 6 with no gradient;
    ratio 2 with A = -0.5 (loss 1 < 1.5) is left alone; positive advantages never capped."""
    want, want_grad = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK, dual=3.0)
    plain, _ = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK)
    assert want < plain - 1e-3
    loss, grad = jx_policy_loss(LOGP_NEW, clip_eps=0.2, dual_clip=3.0)
    close(loss, want)
    close(grad, want_grad)
    assert grad[1, 2] == 0.0
    z = jnp.zeros(MASK.shape)
    lp, old, adv, mask = (jnp.asarray(x) for x in (LOGP_NEW, LOGP_OLD, ADV, MASK))

    @jax.jit
    def traced(c):
        return tl.token_ppo_loss(lp, z, z, old, z, adv, z, mask, clip_eps=0.2, vf_coef=0.0, ent_coef=0.0, dual_clip=c)[
            1
        ]["actor_loss"]

    close(float(traced(3.0)), want)
    close(float(traced(0.0)), plain)  # traced 0: off


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean", "token-sum-norm"])
def test_aggregations(agg):
    """token-sum-norm (Dr. GRPO) divides the token sum by rows x the budget T = 6, not by the
    width 3, the slots 5 or the valid tokens."""
    want, want_grad = np_policy_loss(LOGP_NEW, LOGP_OLD, ADV, MASK, agg=agg, budget=T_BUDGET)
    loss, grad = jx_policy_loss(LOGP_NEW, clip_eps=0.2, aggregation=agg, max_new_tokens=T_BUDGET)
    close(loss, want)
    close(grad, want_grad)
    if agg == "token-sum-norm":
        with pytest.raises(ValueError, match="max_new_tokens"):
            tl.aggregation_weights(jnp.asarray(MASK), agg)


def test_gspo_sequence_ratio_clips_whole_sequences():
    """GSPO (Zheng et al. 2025): s_b = exp(mean log ratio) per row, clipped per row to
    [1 - 3e-4, 1 + 4e-4], the row's advantage applied; seq-mean; the gradient of each token is
    A s_b / n_b (0 for a clipped row)."""
    seq_adv = np.array([1.0, -2.0, 0.5, -1.0])
    adv = np.where(MASK, seq_adv[:, None], 0.0)
    # per-token log ratios around the clip range: row 1 clips (A < 0, s < 1 - 3e-4); row 2's tokens
    # would clip one by one (1 + 9e-4 > 1 + 4e-4), its sequence ratio (exactly 1) does not
    small = np.array(
        [[0, 0, 2e-4, -1e-4, 3e-4], [0, 0, -5e-4, 0, 0], [0, 0, 9e-4, -9e-4, 0], [0, 0, 1e-4, -2e-4, 2e-4]]
    )
    logp = LOGP_OLD + small
    want, want_grad = np_policy_loss(logp, LOGP_OLD, adv, MASK, lo=3e-4, hi=4e-4, level="sequence", agg="seq-mean")
    z = jnp.zeros(MASK.shape)

    def f(lp):
        _, m = tl.token_ppo_loss(
            lp,
            z,
            z,
            jnp.asarray(LOGP_OLD),
            z,
            jnp.asarray(adv),
            z,
            jnp.asarray(MASK),
            clip_eps=3e-4,
            clip_eps_high=4e-4,
            vf_coef=0.0,
            ent_coef=0.0,
            importance_level="sequence",
            aggregation="seq-mean",
        )
        return m["actor_loss"]

    loss, grad = jax.jit(jax.value_and_grad(f))(jnp.asarray(logp))
    close(float(loss), want)
    np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-4, atol=1e-7)
    assert np.all(np.asarray(grad)[1] == 0.0) and np.all(want_grad[1] == 0.0)  # the clipped row
    # the token ratio on the same inputs is another loss (row 2)
    token, _ = np_policy_loss(logp, LOGP_OLD, adv, MASK, lo=3e-4, hi=4e-4, agg="seq-mean")
    assert abs(token - want) > 1e-5


def test_dr_grpo_advantage_is_the_group_centred_score():
    score = np.array([1.0, 0.0, 0.0, 3.0, 2.0, 2.0, 5.0, 1.0, 4.0, 4.0, 4.0, 4.0], np.float32)
    want = np.zeros(12)
    for g in range(3):
        rows = range(4 * g, 4 * g + 4)
        mean = sum(score[i] for i in rows) / 4
        for i in rows:
            want[i] = score[i] - mean
    got = np.asarray(jax.jit(lambda r: group_advantages(r, 4, "dr-grpo"))(jnp.asarray(score)))
    close(got, want)
    assert np.all(got[8:] == 0.0)  # a flat group: exactly 0


def np_reinforce(score, kl, mask, beta, gamma, group=0):
    """REINFORCE++ (Hu 2025): rewards -beta kl_t per token plus the score (minus its group's
    mean for the baseline variant) on the last; returns summed from each token on; normalised
    over every valid token of the batch (population std, + 1e-8)."""
    score = np.array(score, np.float64)
    if group:
        for g in range(0, len(score), group):
            score[g : g + group] = score[g : g + group] - score[g : g + group].mean()
    rows, width = mask.shape
    ret = np.zeros((rows, width))
    for b in range(rows):
        idx = [t for t in range(width) if mask[b, t]]
        running = 0.0
        for k, t in enumerate(reversed(idx)):
            r = -beta * kl[b, t] + (score[b] if k == 0 else 0.0)
            running = r + gamma * running
            ret[b, t] = running
    vals = ret[mask]
    return np.where(mask, (ret - vals.mean()) / (vals.std() + 1e-8), 0.0)


@pytest.mark.parametrize("advantage,group", [("reinforce++", 0), ("reinforce++-baseline", 2)])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus(advantage, group, gamma):
    score = np.array([1.0, -0.5, 2.0, 0.25], np.float32)
    kl = np.where(MASK, np.arange(20).reshape(4, 5) * 0.01 - 0.05, 0.0).astype(np.float32)
    cfg = TokenPPOConfig(batch_size=4, num_minibatches=1, advantage=advantage, group_size=max(group, 1), gamma=gamma)
    both = jax.jit(
        lambda score, kl, mask: [
            experience.advantages(score, kl, jnp.zeros(mask.shape), mask, 0.3, c)
            for c in (cfg, dataclasses.replace(cfg, kl_in="loss"))
        ]
    )
    (adv, ret), (adv_loss, _) = both(jnp.asarray(score), jnp.asarray(kl), jnp.asarray(MASK))
    close(np.asarray(adv), np_reinforce(score, kl, MASK, 0.3, gamma, group))
    assert np.all(np.asarray(ret) == 0.0)
    close(np.asarray(adv_loss), np_reinforce(score, kl, MASK, 0.0, gamma, group))  # KL in the loss: not in the rewards


def np_overlong(n, budget, buffer, factor):
    """DAPO's soft overlong punishment of a response of ``n`` tokens (Yu et al. 2025, eq. 13)."""
    if n <= budget - buffer:
        return 0.0
    return (budget - buffer - n) / buffer * factor


def _experience(has_stop, score):
    z = jnp.zeros(MASK.shape, jnp.float32)
    lp = jnp.asarray(LOGP_OLD, jnp.float32) * MASK
    tokens = jnp.where(jnp.asarray(MASK), 2, 0).astype(jnp.int32)
    return Experience(
        jnp.asarray(has_stop), lp, lp, lp, jnp.asarray(MASK), jnp.asarray(score, jnp.float32), tokens, tokens > 0, z
    )


def test_soft_overlong_punishment_shapes_the_score_before_the_advantages():
    """Budget 4, buffer 2: lengths 3, 1, 2, 3 -> -0.25 f, 0, 0, -0.25 f ... checked through
    finish (dr-grpo, one group: advantage = total - mean total)."""
    budget, buffer, factor = 4, 2, 0.8
    has_stop = np.array([True, True, False, True])
    score = np.array([1.0, 0.5, 2.0, 0.0])
    cfg = TokenPPOConfig(
        batch_size=4,
        num_minibatches=1,
        group_size=4,
        advantage="dr-grpo",
        beta=0.0,
        missing_eos_penalty=0.5,
        max_new_tokens=budget,
        overlong_buffer=buffer,
        overlong_penalty=factor,
    )
    total = [score[b] - 0.5 * (not has_stop[b]) + np_overlong(MASK[b].sum(), budget, buffer, factor) for b in range(4)]
    assert np_overlong(3, budget, buffer, factor) != 0.0
    want = np.array(total) - np.mean(total)
    data, stats = jax.jit(lambda e: experience.finish(e, 0.0, cfg))(_experience(has_stop, score))
    close(np.asarray(data.advantages), np.where(MASK, want[:, None], 0.0))
    close(float(stats["score_with_penalty"]), np.mean(total))
    lengths = jnp.arange(0, 9)
    close(np.asarray(tk.overlong_penalty(lengths, 8, 3, 1.0)), [np_overlong(n, 8, 3, 1.0) for n in range(9)])
    close(np.asarray(tk.overlong_penalty(lengths, 8, 20, 1.0)), [np_overlong(n, 8, 8, 1.0) for n in range(9)])


def test_mask_truncated_gives_the_rows_without_a_stop_no_weight():
    has_stop = np.array([True, False, True, True])
    score = np.array([1.0, 0.5, 2.0, 0.0])
    cfg = TokenPPOConfig(batch_size=4, num_minibatches=1, group_size=4, advantage="dr-grpo", beta=0.0)
    kept, full = jax.jit(
        lambda e: [experience.finish(e, 0.0, c)[0] for c in (dataclasses.replace(cfg, mask_truncated=True), cfg)]
    )(_experience(has_stop, score))
    keep = MASK & has_stop[:, None]
    assert np.array_equal(np.asarray(kept.mask), keep)
    assert np.array_equal(np.asarray(kept.advantages), np.where(keep, np.asarray(full.advantages), 0.0))
    # the token-mean loss then reads rows 0, 2, 3 alone
    adv = np.asarray(kept.advantages, np.float64)
    want, _ = np_policy_loss(LOGP_NEW, LOGP_OLD, adv, keep)
    z = jnp.zeros(MASK.shape)
    _, m = tl.token_ppo_loss(
        jnp.asarray(LOGP_NEW),
        z,
        z,
        jnp.asarray(LOGP_OLD),
        z,
        kept.advantages,
        z,
        kept.mask,
        clip_eps=0.2,
        vf_coef=0.0,
        ent_coef=0.0,
    )
    close(float(m["actor_loss"]), want)


# --- the update's share logic: passes and devices add up to the minibatch ----------------------
V = 5
TOKENS = np.array([[3, 4, 2, 3, 1], [4, 2, 4, 0, 0], [2, 2, 3, 1, 0], [3, 3, 4, 2, 2]], np.int32)


def _np_logp(logits, tokens, pad=0):
    """log p(tokens[:, t] | before), aligned to tokens, the pad id cut (as the sampler does)."""
    x = np.array(logits, np.float64)[:, :-1]
    x[..., pad] = -np.inf
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    out = np.take_along_axis(x, tokens[:, 1:, None], -1)[..., 0] - lse
    return np.concatenate([np.zeros((tokens.shape[0], 1)), out], axis=1)


@pytest.mark.parametrize("agg,level", [("token-sum-norm", "token"), ("seq-mean", "sequence")])
def test_share_loss_reads_the_family_and_its_shares_add_up(agg, level):
    """share_loss with every setting on (clip-higher, dual clip, k3 KL in the loss) is the NumPy
    loss of the policy's log-probs; two passes' shares (micro-batches) add up to it, and two
    devices' mean does, value and gradient."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 5, V)).astype(np.float32)
    logp = np.where(MASK, _np_logp(logits, TOKENS), 0.0)
    logp_old = np.where(MASK, logp - LOG_RATIO * (0.1 if level == "sequence" else 1.0), 0.0)
    logp_ref = np.where(MASK, logp + rng.normal(size=MASK.shape) * 0.3, 0.0)
    seq_adv = np.array([1.0, -2.0, 0.5, -1.0])
    adv = np.where(MASK, seq_adv[:, None], 0.0) if level == "sequence" else ADV
    cfg = TokenPPOConfig(
        batch_size=4,
        num_minibatches=1,
        group_size=2,
        advantage="dr-grpo",
        aggregation=agg,
        importance_level=level,
        clip_eps=0.2,
        clip_eps_high=0.28,
        dual_clip=3.0,
        kl_in="loss",
        kl_estimator="k3",
        beta=0.04,
        ent_coef=0.0,
        max_new_tokens=T_BUDGET,
    )
    pg, _ = np_policy_loss(logp, logp_old, adv, MASK, hi=0.28, dual=3.0, level=level, agg=agg, budget=T_BUDGET)
    d = logp_ref - logp
    k3 = np.where(MASK, np.exp(d) - d - 1.0, 0.0)  # Schulman's k3 per token
    n = MASK.sum(1)
    if agg == "token-mean":
        kl = k3.sum() / MASK.sum()
    elif agg == "seq-mean":
        kl = np.mean([k3[b].sum() / n[b] for b in range(4)])
    else:
        kl = k3.sum() / (4 * T_BUDGET)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    mb = TokenBatch(
        advantages=f32(adv),
        logp_old=f32(logp_old),
        logp_ref=f32(logp_ref),
        mask=jnp.asarray(MASK),
        ptx_mask=None,
        ptx_tokens=None,
        ptx_valid=None,
        returns=jnp.zeros(MASK.shape),
        tokens=jnp.asarray(TOKENS),
        valid=jnp.asarray(TOKENS > 0),
        values_old=jnp.zeros(MASK.shape),
    )
    policy = FullRecompute(lambda p, tokens, valid: p)  # the parameters are the logits
    models = experience.Models(policy, policy, None, None, values=False)
    totals = minibatch_totals(mb, cfg, cfg.beta)

    def loss(p, rows, devices=1):
        part = jax.tree.map(lambda x: x[rows], mb)
        return share_loss(models, {"policy": p, "critic": None}, part, totals, cfg, devices)[0]

    @jax.jit
    def everything(p):  # the whole minibatch; two passes; two devices (each its rows' share x 2)
        halves = (slice(0, 2), slice(2, 4))
        passes = [jax.value_and_grad(loss)(p[r], r) for r in halves]
        return jax.value_and_grad(loss)(p, slice(0, 4)), passes, [loss(p[r], r, 2) for r in halves]

    (whole, g_whole), passes, devices = everything(jnp.asarray(logits))
    close(float(whole), pg + 0.04 * kl)
    close(float(passes[0][0] + passes[1][0]), float(whole))
    close(np.concatenate([np.asarray(g) for _, g in passes]), np.asarray(g_whole))
    close(float(devices[0] + devices[1]) / 2, float(whole))


# --- settings, validation, flags and recipes ---------------------------------------------------
def test_the_settings_are_validated():
    base = dict(batch_size=4, num_minibatches=1)
    for bad in (0.5, 1.0, -1.0):
        with pytest.raises(ConfigError, match="dual_clip"):
            tc.validate_token_config(TokenPPOConfig(**base, dual_clip=bad))
    tc.validate_token_config(TokenPPOConfig(**base, dual_clip=3.0))
    with pytest.raises(ConfigError, match="mask_truncated"):
        tc.validate_token_config(TokenPPOConfig(**base, mask_truncated=True, stop_ids=()))
    for advantage in ("grpo", "dr-grpo", "rloo", "reinforce++-baseline"):
        with pytest.raises(ConfigError, match="group_size=1 must be >= 2"):
            tc.validate_token_config(TokenPPOConfig(**base, advantage=advantage))
    cfg = tc.validate_token_config(TokenPPOConfig(**base, advantage="reinforce++"))  # no group needed
    assert not tc.needs_critic(cfg)
    assert tc.AGGREGATIONS == tl.AGGREGATIONS and tc.IMPORTANCE_LEVELS == tl.IMPORTANCE_LEVELS


def test_the_rlhf_command_has_a_flag_for_each_setting(capsys):
    from purejaxppo.cli.parser import build_parser

    argv = ["--clip-eps-high", "0.28", "--dual-clip", "3", "--importance-level", "sequence"]
    argv += ["--aggregation", "token-sum-norm", "--advantage", "reinforce++-baseline", "--overlong-buffer", "4"]
    argv += ["--overlong-penalty", "0.5", "--mask-truncated", "true"]
    args = vars(build_parser().parse_args(["rlhf", *argv]))
    got = {
        name: next(v for k, v in args.items() if k.endswith(name))
        for name in (
            "clip_eps_high",
            "dual_clip",
            "importance_level",
            "aggregation",
            "advantage",
            "overlong_buffer",
            "overlong_penalty",
            "mask_truncated",
        )
    }
    assert got == dict(
        clip_eps_high=0.28,
        dual_clip=3.0,
        importance_level="sequence",
        aggregation="token-sum-norm",
        advantage="reinforce++-baseline",
        overlong_buffer=4,
        overlong_penalty=0.5,
        mask_truncated=True,
    )


# the papers' values, written out again (not read from RECIPES): (advantage, clip low, clip high,
# importance ratio, aggregation, KL place, KL estimator, beta, overlong buffer for a budget of 20)
PAPERS = {
    "ppo": ("gae", 0.2, 0.2, "token", "token-mean", "reward", "k1", 0.05, 0),
    "grpo": ("grpo", 0.2, 0.2, "token", "seq-mean", "loss", "k3", 0.04, 0),
    "dapo": ("grpo", 0.2, 0.28, "token", "token-mean", None, None, 0.0, 4),
    "dr-grpo": ("dr-grpo", 0.2, 0.2, "token", "token-sum-norm", None, None, 0.0, 0),
    "gspo": ("grpo", 3e-4, 4e-4, "sequence", "seq-mean", None, None, 0.0, 0),
    "reinforce++": ("reinforce++", 0.2, 0.2, "token", "token-mean", "reward", "k1", 0.05, 0),
    "rloo": ("rloo", 0.2, 0.2, "token", "token-mean", "reward", "k1", 0.05, 0),
}


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_each_recipe_sets_what_its_paper_says(name):
    start = TokenPPOConfig(
        batch_size=8,
        num_minibatches=2,
        group_size=4,
        max_new_tokens=20,
        importance_level="sequence",  # not the recipe's (but gspo's): reset
        aggregation="token-sum-norm",
        dual_clip=2.0,
        overlong_buffer=7,
        mask_truncated=True,
    )
    cfg = apply_recipe(start, name)
    advantage, lo, hi, level, agg, kl_in, estimator, beta, buffer = PAPERS[name]
    assert (cfg.advantage, cfg.importance_level, cfg.aggregation) == (advantage, level, agg)
    assert (cfg.clip_eps, cfg.clip_eps_high or cfg.clip_eps) == (lo, hi)
    assert cfg.beta == beta and (beta == 0 or (cfg.kl_in, cfg.kl_estimator) == (kl_in, estimator))
    assert cfg.overlong_buffer == buffer and (not buffer or cfg.overlong_penalty == 1.0)
    assert cfg.dual_clip == 0.0 and not cfg.mask_truncated
    assert (cfg.group_size, cfg.batch_size, cfg.max_new_tokens) == (4, 8, 20)  # never the recipe's
    assert set(RECIPES[name]) == set(RECIPE_FIELDS)


def test_a_recipe_keeps_the_fields_given_and_refuses_what_cannot_run():
    assert apply_recipe(TokenPPOConfig(), "ppo") == TokenPPOConfig()  # ppo is today's defaults
    start = TokenPPOConfig(batch_size=8, num_minibatches=2, group_size=4, clip_eps=0.1, beta=0.5)
    cfg = apply_recipe(start, "dapo", given=frozenset({"clip_eps", "beta"}))
    assert (cfg.clip_eps, cfg.beta, cfg.clip_eps_high, cfg.advantage) == (0.1, 0.5, 0.28, "grpo")
    for name in ("grpo", "dapo", "dr-grpo", "gspo", "rloo"):  # a group baseline needs a group
        with pytest.raises(ConfigError, match="group_size"):
            apply_recipe(TokenPPOConfig(), name)
    assert apply_recipe(TokenPPOConfig(), "reinforce++").advantage == "reinforce++"
    with pytest.raises(ConfigError, match="not one of"):
        apply_recipe(TokenPPOConfig(), "ppo2")
    with pytest.raises(ConfigError, match="field names"):
        apply_recipe(TokenPPOConfig(), "ppo", given={"--clip-eps"})
