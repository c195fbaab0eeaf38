"""Token-level PPO composed (purejaxppo/lm/ppo/token_ppo.py, experience.py, data_parallel.py).

Independent references: a scripted policy whose responses (and stop tokens) are known in
advance, with the returns written out by hand in NumPy; a plain ``value_and_grad`` of the
library's loss on the whole minibatch against the micro-batched sum; Ziegler's controller
by hand; separate vmapped runs against the sweep; one device against two (a subprocess with
forced host devices). Tolerances are for two different programs computing the same numbers
(float32 reductions in another order), never for the same program.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo import token_loss as tl
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.models.adapters import FlaxLM, FullRecompute
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.ppo.token_ppo import _labels, make_token_ppo
from purejaxppo.stages.update import accumulate_gradients

V, P, T, B = 9, 4, 5, 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prompts(key, b):
    lens = jax.random.randint(key, (b,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (b, P), 2, V)
    return jnp.where(valid, toks, 0).astype(jnp.int32), valid


def count_threes(_, prompt, prompt_valid, response, mask):
    return jnp.sum((response == 3) & mask, axis=1).astype(jnp.float32)


def tiny_model():
    model = TinyLM(V, 16, 1, 2, max_len=P + T)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))

    # a value head that is not zero, so the critic's values matter. Not a uniform one: a kernel with
    # equal entries on the final LayerNorm's output (whose features sum to 0) gives values that do
    # not depend on the trunk, whose gradient is then rounding noise that Adam scales up to lr-sized
    # steps, different in every program (2 devices then differed from 1 by 1e-3 in the critic)
    def head(path, x):
        if "value_head" not in str(path):
            return x
        return x + 0.1 + 0.3 * jax.random.normal(jax.random.PRNGKey(7), x.shape, x.dtype)

    params = jax.tree_util.tree_map_with_path(head, params)
    return FlaxLM(model), params


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def config(**kw):
    base = dict(
        batch_size=B,
        num_iterations=2,
        update_epochs=2,
        num_minibatches=2,
        max_new_tokens=T,
        stop_ids=(1,),
        actor_lr=1e-3,
        critic_lr=1e-3,
        beta=0.1,
    )
    return TokenPPOConfig(**{**base, **kw})


def _np_logp_without(logits, tokens, temperature, banned):
    """NumPy (float64): log-probs of ``tokens`` under softmax(logits / temperature) with the
    ``banned`` id removed and the rest renormalised; logits aligned as token_logprobs (position
    ``t`` predicts token ``t+1``; slot 0 gets 0)."""
    x = np.asarray(logits, np.float64)[:, :-1] / temperature
    x[..., banned] = -np.inf
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    out = np.take_along_axis(x, np.asarray(tokens)[:, 1:, None], -1)[..., 0] - lse
    return np.concatenate([np.zeros_like(out[:, :1]), out], axis=1)


def test_pad_is_never_sampled_and_every_log_prob_renormalises_without_it(tiny):
    """A policy that prefers the pad id (0): no response holds it, and the old log-probs (the
    PPO ratio's) and the reference's (the KL's) are those of the law without pad, as sampled."""
    lm, params = tiny
    boosted = jax.tree_util.tree_map_with_path(  # the policy's pad logit +3: pad is likely
        lambda path, x: x.at[0].add(3.0) if "lm_head" in str(path) and "bias" in str(path) else x, params
    )
    cfg = config(temperature=0.8)
    models = experience.Models(lm, lm, lm, count_threes)
    prompt, valid = prompts(jax.random.PRNGKey(3), B)
    exp = jax.jit(
        lambda k: experience.collect(
            models, {"policy": boosted, "critic": boosted}, params, None, jax.random.split(k, B), prompt, valid, cfg
        )
    )(jax.random.PRNGKey(9))
    toks, mask = np.asarray(exp.tokens), np.asarray(exp.mask)
    pol = np.asarray(lm.logits(boosted, exp.tokens, exp.valid))
    p_pad = jax.nn.softmax(pol[:, :-1] / 0.8)[..., 0][mask[:, 1:]]
    assert float(p_pad.mean()) > 0.3  # the scenario: without the cut, about a third of the tokens would be pad
    assert mask.sum() > 10 and not (toks[mask] == 0).any()
    ref = np.asarray(lm.logits(params, exp.tokens, exp.valid))
    for name, logits in (("logp_old", pol), ("logp_ref", ref)):
        np.testing.assert_allclose(
            np.where(mask, getattr(exp, name), 0),
            np.where(mask, _np_logp_without(logits, toks, 0.8, 0), 0),
            atol=1e-5,
            err_msg=name,
        )
    # the sampler's own log-probs are the same law's (TOL: the cache's decode against the recompute)
    np.testing.assert_allclose(np.where(mask, exp.logp_sampled, 0), np.where(mask, exp.logp_old, 0), atol=1e-4)


def test_scoring_in_row_chunks_equals_one_pass(tiny, monkeypatch):
    """The teacher-forced scoring passes over chunks of rows (``experience.pass_rows``,
    ``in_row_chunks``) give the one pass's log-probs and values: two programs (matmuls of other
    shapes), so a float32 tolerance; the rows per pass: the largest divisor fitting the slots."""
    rows = [experience.pass_rows(*a) for a in ((64, 263, 4096), (64, 23, 4096), (8, 9, 18), (6, 10, 35), (7, 999, 8))]
    assert rows == [8, 64, 2, 3, 1]
    lm, params = tiny
    p = {"policy": params, "critic": jax.tree.map(lambda x: 1.1 * x, params)}  # a critic of its own
    cfg = config(stop_ids=())
    models = experience.Models(lm, lm, lm, count_threes)
    prompt, valid = prompts(jax.random.PRNGKey(3), B)
    resp = experience.sample(models, p, jax.random.split(jax.random.PRNGKey(4), B), prompt, valid, cfg)
    run = lambda: jax.jit(lambda: experience.score(models, p, params, None, prompt, valid, *resp, cfg))()  # noqa: E731
    one = run()
    monkeypatch.setattr(experience, "PASS_SLOTS", 2 * (P + T))
    assert experience.pass_rows(B, P + T, experience.PASS_SLOTS) == 2  # 4 passes of 2 rows
    chunked = run()
    for k in ("logp_old", "logp_ref", "values_old"):
        assert np.abs(np.asarray(getattr(one, k))).max() > 0.1, k
        np.testing.assert_allclose(getattr(chunked, k), getattr(one, k), atol=1e-5, rtol=1e-5, err_msg=k)


@pytest.mark.parametrize(
    "top_k,top_p,temperature",
    [(0, 1.0, 1.0), (0, 1.0, 0.7), (3, 1.0, 1.0), (0, 0.8, 1.3)],
    ids=["defaults", "temperature", "top_k", "top_p"],
)
def test_first_minibatch_is_on_policy(tiny, top_k, top_p, temperature):
    lm, params = tiny
    cfg = config(top_k=top_k, top_p=top_p, temperature=temperature)
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    models = experience.Models(lm, lm, lm, count_threes)

    @jax.jit
    def first(key):
        state = tp.init(key, params, params)
        prompt, valid = prompts(jax.random.PRNGKey(3), B)
        exp = experience.collect(models, state.train.params, params, None, jax.random.split(key, B), prompt, valid, cfg)
        data, stats = experience.finish(exp, state.beta, cfg)
        loss, m = tp.loss(state.train.params, data, {"units": jnp.sum(data.mask, dtype=jnp.float32)})
        return m, stats, exp

    m, stats, exp = first(jax.random.PRNGKey(5))
    assert float(m["clip_frac"]) == 0.0
    assert abs(float(m["approx_kl"])) < 1e-6
    # the sampler's own log-probs (KV-cache decode) agree with the teacher-forced pass of the
    # distribution sampled from: two programs, measured ~1e-6 apart
    assert float(stats["logp_mismatch"]) < 1e-4, float(stats["logp_mismatch"])
    mask = np.asarray(exp.mask)
    assert mask.any() and not mask[:, :P].any()  # prompts are never actions
    if top_k:  # every sampled token is among the top-k of the policy's logits at its step, pad (0) cut
        logits = np.asarray(lm.logits(params, exp.tokens, exp.valid))[:, :-1]
        toks = np.asarray(exp.tokens)[:, 1:]
        rank = (logits[..., 1:] > np.take_along_axis(logits, toks[..., None], -1)).sum(-1)
        assert (rank[mask[:, 1:]] < top_k).all()


def test_the_reference_is_frozen_and_gets_no_gradient(tiny):
    lm, params = tiny
    cfg = config(num_iterations=1)
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    state = jax.jit(tp.init)(jax.random.PRNGKey(1), params, jax.tree.map(jnp.copy, params))
    before = jax.tree.map(np.asarray, state.reference)
    new, _ = jax.jit(tp.iteration)(state)
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(new.reference)):
        np.testing.assert_array_equal(a, np.asarray(b))  # exact: the reference is never written to
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(new.train.params["policy"]), jax.tree.leaves(params))
    )
    assert moved > 0  # while the policy moved
    models = experience.Models(lm, lm, lm, count_threes)
    prompt, valid = prompts(jax.random.PRNGKey(3), B)

    def loss_through_the_rollout(ref):  # the reference shapes the rewards, but no gradient reaches it
        exp = experience.collect(
            models, state.train.params, ref, None, jax.random.split(jax.random.PRNGKey(4), B), prompt, valid, cfg
        )
        data, _ = experience.finish(exp, 0.1, cfg)
        return tp.loss(state.train.params, data, {"units": jnp.sum(data.mask, dtype=jnp.float32)})[0]

    g = jax.jit(jax.grad(loss_through_the_rollout))(state.reference)
    assert all(float(jnp.max(jnp.abs(x))) == 0.0 for x in jax.tree.leaves(g))


def _scripted(script):
    """A policy whose row ``b`` always emits ``script[b, P:]`` (logits 50 on the scripted token)."""
    return FullRecompute(
        lambda s, tokens, valid: 50.0 * jax.nn.one_hot(jnp.concatenate([s[:, 1:], s[:, -1:]], axis=1), V)
    )


def test_score_sits_on_the_last_valid_response_token_and_the_eos_penalty_where_no_stop():
    # responses: stop (1) at slot 2; stop at slot 0; no stop (runs to T); stop at the last slot.
    # Token 1 in a prompt must not count as a stop.
    resp = np.array([[4, 5, 1, 0, 0], [1, 0, 0, 0, 0], [3, 3, 4, 5, 6], [6, 6, 6, 6, 1]])
    prompt = np.array([[0, 0, 2, 3], [2, 1, 2, 2], [0, 4, 4, 4], [0, 0, 0, 5]])
    pvalid = np.array([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]], bool)
    script = jnp.asarray(np.concatenate([prompt, resp], 1), jnp.int32)
    lm = _scripted(script)
    score = lambda _, p, pv, r, m: jnp.sum(jnp.where(m, r, 0), axis=1).astype(jnp.float32)  # noqa: E731
    gamma, penalty = 0.5, 2.0
    cfg = config(
        batch_size=4,
        num_minibatches=1,
        beta=0.0,
        gamma=gamma,
        gae_lambda=1.0,
        whiten_advantages=False,
        missing_eos_penalty=penalty,
    )
    models = experience.Models(lm, lm, lm, score)
    exp = experience.collect(
        models,
        {"policy": script, "critic": script},
        script,
        None,
        jax.random.split(jax.random.PRNGKey(0), 4),
        jnp.asarray(prompt),
        jnp.asarray(pvalid),
        cfg,
    )
    data, stats = experience.finish(exp, 0.0, cfg)
    np.testing.assert_array_equal(
        np.asarray(exp.tokens)[:, P:] * np.asarray(exp.mask)[:, P:], np.where(np.asarray(exp.mask)[:, P:], resp, 0)
    )
    # by hand: the response is valid up to and including the first stop; total = sum - penalty if none
    returns = np.zeros((4, P + T))
    for b in range(4):
        stop = [t for t in range(T) if resp[b, t] == 1]
        last = stop[0] if stop else T - 1
        total = resp[b, : last + 1].sum() - (0 if stop else penalty)
        for t in range(last + 1):
            returns[b, P + t] = gamma ** (last - t) * total  # values are 0: the return is the discounted score
    np.testing.assert_allclose(np.asarray(data.returns), returns, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(exp.has_stop), [True, True, False, True])
    assert float(stats["eos_rate"]) == 0.75


@pytest.mark.slow
def test_micro_batches_sum_to_the_one_pass_gradient(tiny):
    lm, params = tiny
    cfg = config(batch_size=B, num_minibatches=1)
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    models = experience.Models(lm, lm, lm, count_threes)
    prompt, valid = prompts(jax.random.PRNGKey(3), B)
    both = {"policy": params, "critic": params}
    data, _ = experience.finish(
        experience.collect(models, both, params, None, jax.random.split(jax.random.PRNGKey(4), B), prompt, valid, cfg),
        0.1,
        cfg,
    )

    def direct(p):  # the library's loss on the whole minibatch, with no shares at all
        logits, values = experience.heads(models, p, data.tokens, data.valid)
        logp, ent = experience.filtered_logprobs(logits, data.tokens, cfg)
        return tl.token_ppo_loss(
            logp,
            ent,
            values,
            data.logp_old,
            data.values_old,
            data.advantages,
            data.returns,
            data.mask,
            clip_eps=0.2,
            vf_coef=0.5,
            ent_coef=0.0,
            vf_clip_eps=0.2,
        )[0]

    # a perturbed point, so the ratio is not 1 and the clipping matters
    point = jax.tree.map(lambda x: x + 0.05 * jnp.sin(jnp.arange(x.size).reshape(x.shape)), both)
    want_loss, want = jax.value_and_grad(direct)(point)
    totals = {"units": jnp.sum(data.mask, dtype=jnp.float32)}
    for k in (1, 2, 4):
        (loss, _), got = jax.jit(accumulate_gradients(tp.loss, k))(point, data, totals)
        np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_each_network_has_its_own_learning_rate(tiny):
    lm, params = tiny
    labels = _labels({"policy": params, "critic": params})
    assert set(jax.tree.leaves(labels["critic"])) == {"critic"}
    flat = jax.tree_util.tree_flatten_with_path(labels["policy"])[0]
    assert {v for p, v in flat if "value_head" in str(p)} == {"critic"}
    assert {v for p, v in flat if "value_head" not in str(p)} == {"actor"}
    for critic in ("separate", "value_head"):  # actor frozen (lr ~0): only the critic's leaves move
        cfg = config(critic=critic, actor_lr=1e-30, critic_lr=1e-2, num_iterations=1)
        state, _ = jax.jit(make_token_ppo(cfg, lm, count_threes, prompts=prompts).train)(
            jax.random.PRNGKey(1), params, params
        )
        new = state.train.params
        moved = lambda a, b: float(max(jnp.max(jnp.abs(x - y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))  # noqa: E731
        if critic == "separate":
            assert moved(new["policy"], params) < 1e-20 and moved(new["critic"], params) > 1e-4
        else:
            trunk = lambda p: {k: v for k, v in p["params"].items() if k != "value_head"}  # noqa: E731
            assert moved(trunk(new["policy"]), trunk(params)) < 1e-20
            assert moved(new["policy"]["params"]["value_head"], params["params"]["value_head"]) > 1e-4


@pytest.mark.slow
def test_adaptive_kl_follows_the_controller_and_a_beta_sweep_equals_separate_runs(tiny):
    lm, params = tiny
    cfg = config(adaptive_kl=True, kl_target=0.05, kl_horizon=40.0, beta=0.2)
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    betas = jnp.array([0.2, 0.5])
    cfgs = jax.tree.map(lambda x: jnp.full((2,), x, jnp.float32), cfg).replace(beta=betas)
    key = jax.random.PRNGKey(2)
    state, m = jax.jit(jax.vmap(tp.train, in_axes=(None, None, None, None, None, 0)))(
        key, params, params, None, None, cfgs
    )
    for i, b0 in enumerate([0.2, 0.5]):
        kl, beta = np.asarray(m["kl_k1"][i], np.float64), np.asarray(m["beta"][i], np.float64)
        assert beta[0] == np.float32(b0)
        after = list(beta[1:]) + [float(state.beta[i])]
        for t in range(len(kl)):  # Ziegler et al.: beta *= 1 + clip(KL/target - 1, +-0.2) * B / horizon
            np.testing.assert_allclose(
                after[t], beta[t] * (1 + np.clip(kl[t] / 0.05 - 1, -0.2, 0.2) * B / 40.0), rtol=1e-6
            )
        assert after[-1] != beta[0]  # the controller moved it
    one, m1 = jax.jit(tp.train)(key, params, params, None, None, cfg.replace(beta=0.5))
    for k in ("score", "kl", "actor_loss", "critic_loss"):  # vmap vs one run: two programs, float tolerance
        np.testing.assert_allclose(np.asarray(m[k][1]), np.asarray(m1[k]), rtol=1e-4, atol=1e-6)


def test_ptx_adds_the_pretraining_nll(tiny):
    lm, params = tiny

    def ptx(key, b):
        toks = jax.random.randint(key, (b, P + T), 2, V).astype(jnp.int32)
        return toks, jnp.ones_like(toks, bool), jnp.arange(P + T)[None].repeat(b, 0) > 0

    cfg = config(ptx=True, ptx_coef=1.0, num_iterations=1, update_epochs=1, num_minibatches=1)
    _, m = jax.jit(make_token_ppo(cfg, lm, count_threes, prompts=prompts, ptx=ptx).train)(
        jax.random.PRNGKey(1), params, params
    )
    toks, valid, mask = ptx(jax.random.split(jax.random.PRNGKey(1), 5)[4], B)  # the iteration's ptx key
    want = -float(tk.masked_mean(tk.token_logprobs(lm.logits(params, toks, valid), toks), mask))
    # one minibatch, one step: the metric is the NLL at the parameters before the step
    np.testing.assert_allclose(float(m["ptx_loss"][0]), want, rtol=1e-5)


@pytest.mark.slow
def test_bf16_compute_keeps_float32_parameters_and_optimizer_state():
    model = TinyLM(V, 16, 1, 2, max_len=P + T, dtype=jnp.bfloat16)
    lm = FlaxLM(model)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    state, m = jax.jit(make_token_ppo(config(), lm, count_threes, prompts=prompts).train)(
        jax.random.PRNGKey(1), params, params
    )
    assert {str(x.dtype) for x in jax.tree.leaves((state.train, state.reference))} <= {"float32", "int32"}
    for k in ("score", "kl", "actor_loss", "critic_loss", "entropy", "grad_norm"):
        assert np.all(np.isfinite(np.asarray(m[k]))), k
    # against the same parameters computed in float32: bf16 rounds the activations to ~3
    # significant digits, so the first iteration's mean entropy (before the update moves far)
    # agrees to a few hundredths while the sampled tokens may differ
    f32 = make_token_ppo(config(), FlaxLM(TinyLM(V, 16, 1, 2, max_len=P + T)), count_threes, prompts=prompts)
    _, m32 = jax.jit(f32.train)(jax.random.PRNGKey(1), params, params)
    assert abs(float(m["entropy"][0]) - float(m32["entropy"][0])) < 0.05, (m["entropy"], m32["entropy"])


def test_bad_configs_are_refused_with_the_fix(tiny):
    lm, params = tiny
    with pytest.raises(ConfigError, match="divisible by num_minibatches"):
        make_token_ppo(config(batch_size=6, num_minibatches=4), lm, count_threes)
    with pytest.raises(ConfigError, match="pass no critic model"):
        make_token_ppo(config(critic="value_head"), lm, count_threes, critic=lm)
    with pytest.raises(ConfigError, match="no ptx batch function"):
        make_token_ppo(config(ptx=True), lm, count_threes)
    with pytest.raises(ConfigError, match="kl_estimator"):
        make_token_ppo(config(kl_estimator="k4"), lm, count_threes)
    with pytest.raises(ConfigError, match="split evenly over 3 devices"):
        make_token_ppo(config(), lm, count_threes, axis_name="data", num_devices=3)
    with pytest.raises(ConfigError, match="pad_id=0 is also a stop id"):  # HF's pad = EOS habit
        make_token_ppo(config(stop_ids=(1, 0)), lm, count_threes)


WORKER = r"""
import json, sys, jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
import functools
from test_token_ppo import tiny_model, config, count_threes, prompts
from purejaxppo.lm.ppo.data_parallel import data_parallel
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
lm, params = tiny_model()
out = {{}}
for critic in ("separate", "value_head"):
    cfg = config(critic=critic, micro_batches=2)
    res = []
    for n in (1, 2):
        tp = data_parallel(functools.partial(make_token_ppo, cfg, lm, count_threes, prompts=prompts), n)
        state, m = jax.jit(tp.train)(jax.random.PRNGKey(1), params, params)
        res.append((m, state.train.params))
    (m1, p1), (m2, p2) = res
    out[critic] = dict(
        metric=max(float(np.max(np.abs(np.asarray(m1[k]) - np.asarray(m2[k])) / (np.abs(np.asarray(m1[k])) + 1e-6)))
                   for k in ("score", "kl", "actor_loss", "critic_loss", "entropy")),
        params=max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
                   zip(jax.tree.leaves(p1), jax.tree.leaves(p2))),
        score=np.asarray(m1["score"]).tolist())
# FSDP-style: the parameters and optimizer state split over the 2 devices, jit partitions around them
from purejaxppo.lm.ppo.data_parallel import fsdp_sharding, prompt_mesh
cfg = config()
tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
state = jax.jit(tp.init)(jax.random.PRNGKey(1), params, params)
mesh = prompt_mesh(2)
sharded = jax.device_put(state, fsdp_sharding(state, mesh, min_size=16))
split = sum(len(set(x.sharding.spec) - {{None}}) > 0 for x in jax.tree.leaves(sharded))
run = jax.jit(tp.run, static_argnums=1)
(s1, m1), (s2, m2) = run(state, 2), run(sharded, 2)
out["fsdp"] = dict(split_leaves=split, metric=max(float(np.max(np.abs(np.asarray(m1[k]) - np.asarray(m2[k])) /
    (np.abs(np.asarray(m1[k])) + 1e-6))) for k in ("score", "kl", "actor_loss", "critic_loss")),
    params=max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
               zip(jax.tree.leaves(s1.train.params), jax.tree.leaves(s2.train.params))))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_two_devices_and_fsdp_sharding_equal_one_device():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    code = WORKER.format(root=ROOT, tests=os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][7:])
    assert out["fsdp"]["split_leaves"] > 10, out["fsdp"]  # the params and Adam moments really are split
    for layout, r in out.items():
        # two programs (each device's half, gathered; or a partitioned one): another reduction order.
        # Metrics: measured below 5e-5 relative. Parameters: 1e-5 for the data split (measured
        # below it); the partitioned program rounds gradients differently, and Adam moves an entry
        # whose gradient is at rounding level by up to lr per step whatever its size (measured 1e-3
        # after 8 steps at lr 1e-3), so its bound is lr x steps; its metrics are the tight check.
        bound = 8e-3 if layout == "fsdp" else 1e-5
        assert r["metric"] < 1e-4 and r["params"] < bound, (layout, r)
