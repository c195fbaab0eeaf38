"""The teacher-forced passes an iteration skips (purejaxppo/lm/ppo/token_update.py's ``detached`` and
``kl_off``, experience.py's ``score``, token_phases.py's ``score_phase``).

On-policy (one gradient step per batch) the update's own log-probs, gradient stopped, are the old
ones: no policy pass after sampling. With no KL term (``beta`` 0, no adaptive KL) there is no
reference pass. Independent references: the gradient at ratio 1 written out as REINFORCE's
``-sum_t A_t grad log pi(a_t) / N`` (log-probs by a plain ``log_softmax`` of the model's logits, pad
removed), against both the detached and the rescored loss; the passes counted as the matrix
products of one model forward in the iteration's jaxpr; the program where the setting does not
apply compared as text.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.ppo import experience
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
from purejaxppo.lm.ppo.token_records import TokenBatch
from purejaxppo.lm.ppo.token_update import detached, kl_off, minibatch_totals, share_loss

V, P, T, B, G = 9, 4, 5, 8, 4


def prompts(key, n):
    lens = jax.random.randint(key, (n,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (n, P), 2, V)
    return jnp.where(valid, toks, 0).astype(jnp.int32), valid


def count_threes(_, prompt, prompt_valid, response, mask):
    return jnp.sum((response == 3) & mask, axis=1).astype(jnp.float32)


@pytest.fixture(scope="module")
def tiny():
    model = TinyLM(V, 16, 1, 2, max_len=P + T)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    return FlaxLM(model), params


def config(**kw):
    base = dict(
        batch_size=B,
        group_size=G,
        advantage="grpo",
        num_iterations=1,
        update_epochs=1,
        num_minibatches=1,
        max_new_tokens=T,
        stop_ids=(1,),
        length_buckets=0,  # one response width: one branch of the width switch
        kl_in="loss",
        kl_estimator="k3",
        beta=0.0,
        actor_lr=1e-3,
    )
    return TokenPPOConfig(**{**base, **kw})


def test_when_the_passes_are_skipped():
    assert detached(config()) and kl_off(config())
    assert detached(config(beta=0.1)) and not kl_off(config(beta=0.1))  # the KL is a loss term: read in the update
    assert not detached(config(rescore_old_logprobs=True))
    assert not detached(config(update_epochs=2)) and not detached(config(num_minibatches=2, batch_size=8))
    assert not detached(config(kl_in="reward", beta=0.1))  # the rewards read the policy's log-probs first
    assert detached(config(kl_in="reward", beta=0.0))  # beta 0: no KL in the rewards
    assert not detached(config(adaptive_kl=True)) and not kl_off(config(adaptive_kl=True))
    assert not kl_off(config(beta=jnp.float32(0.0)))  # not a Python number (a sweep's, traced): kept


def _np_reinforce_grad_loss(lm, params, batch: TokenBatch):
    """At ratio 1 the clipped loss's gradient is REINFORCE's: the loss ``-sum A_t log pi(a_t) / N``
    over the valid tokens, log pi by a plain log_softmax of the logits with the pad id (0) removed."""

    def loss(p):
        logits = lm.logits(p, batch.tokens, batch.valid)[:, :-1]
        logits = logits.at[..., 0].set(-jnp.inf)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), batch.tokens[:, 1:, None], -1)[..., 0]
        m = batch.mask[:, 1:]
        return -jnp.sum(jnp.where(m, batch.advantages[:, 1:] * logp, 0.0)) / jnp.sum(m)

    return jax.grad(loss)(params)


def _batch(lm, params, cfg):
    """A sampled, scored batch (the rescoring pass run: its logp_old is the teacher-forced one)."""
    models = experience.Models(lm, lm, None, count_threes, values=False)
    prompt, valid = prompts(jax.random.PRNGKey(3), B)
    exp = experience.collect(
        models, {"policy": params}, params, None, jax.random.split(jax.random.PRNGKey(4), B), prompt, valid, cfg
    )
    data, _ = experience.finish(exp, 0.0, cfg)
    return models, data


def test_the_detached_gradient_is_the_rescored_one_and_reinforces(tiny):
    lm, params = tiny
    on, rescore = config(), config(rescore_old_logprobs=True)
    models, data = _batch(lm, params, rescore)
    assert np.abs(np.asarray(data.advantages)).max() > 0.1  # the groups' scores differ: a gradient

    def grad(cfg):
        f = lambda p: share_loss(models, {"policy": p}, data, minibatch_totals(data, cfg, 0.0), cfg, 1)  # noqa: E731
        return jax.jit(jax.grad(f, has_aux=True))(params)

    (g_on, m_on), (g_re, m_re) = grad(on), grad(rescore)
    want = _np_reinforce_grad_loss(lm, params, data)
    for a, b, c in zip(*(jax.tree.leaves(x) for x in (g_on, g_re, want))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(b), np.asarray(c), rtol=1e-4, atol=1e-6)
    assert float(m_on["approx_kl"]) == 0.0 and float(m_on["clip_frac"]) == 0.0  # ratio exactly 1
    assert abs(float(m_re["approx_kl"])) < 1e-6 and float(m_re["clip_frac"]) == 0.0


def _count_dots(jaxpr) -> int:
    """``dot_general`` equations in a jaxpr and every jaxpr nested in it (scan, switch, pjit bodies)."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == "dot_general"
        for v in eqn.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _count_dots(inner)
    return n


def _iteration_dots(lm, params, cfg) -> int:
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    state = tp.init(jax.random.PRNGKey(1), params, params)
    return _count_dots(jax.make_jaxpr(tp.iteration)(state).jaxpr)


def test_the_iteration_runs_one_forward_fewer_per_skipped_pass(tiny):
    lm, params = tiny
    tokens, valid = jnp.zeros((2, P + T), jnp.int32), jnp.ones((2, P + T), bool)
    forward = _count_dots(jax.make_jaxpr(lambda p: lm.logits(p, tokens, valid))(params).jaxpr)
    assert forward >= 5  # the four projections and the head at least
    both = _iteration_dots(lm, params, config(beta=0.1, rescore_old_logprobs=True))
    no_policy = _iteration_dots(lm, params, config(beta=0.1))
    no_reference = _iteration_dots(lm, params, config(rescore_old_logprobs=True))
    neither = _iteration_dots(lm, params, config())
    assert both - no_policy == forward
    assert both - no_reference == forward
    assert both - neither == 2 * forward


def test_where_the_setting_does_not_apply_the_program_is_the_same(tiny):
    lm, params = tiny
    cases = (dict(update_epochs=2), dict(num_minibatches=2), dict(kl_in="reward", beta=0.05))
    for kw in cases + (dict(advantage="gae", group_size=1, kl_in="reward", beta=0.05),):
        a, b = config(**kw), config(**kw, rescore_old_logprobs=True)
        texts = []
        for cfg in (a, b):
            tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
            state = tp.init(jax.random.PRNGKey(1), params, params)
            texts.append(str(jax.make_jaxpr(tp.iteration)(state)))
        assert texts[0] == texts[1], kw


def test_an_iteration_without_the_reference_pass_learns_the_same_and_reports_what_it_can(tiny):
    """beta 0 bound (no reference pass) against the same config passed traced (beta no longer a
    Python 0: the reference pass and the 0 x KL term run): the same new parameters; the metrics
    without the pass lack the KL ones, and on-policy neither has a mismatch or a ratio off 1."""
    lm, params = tiny
    cfg = config()
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    state = tp.init(jax.random.PRNGKey(1), params, params)
    skip, m_skip = jax.jit(tp.iteration)(state)
    kept, m_kept = jax.jit(lambda s, c: tp.iteration(s, None, c))(state, cfg)
    kl_names = {"kl", "kl_k1", "kl_loss"}
    assert kl_names <= set(m_kept) and not kl_names & set(m_skip)
    assert "logp_mismatch" not in m_skip and "logp_mismatch" not in m_kept
    for m in (m_skip, m_kept):
        assert float(m["approx_kl"]) == 0.0 and float(m["clip_frac"]) == 0.0
    for k in ("score", "response_length", "actor_loss", "grad_norm"):
        np.testing.assert_allclose(float(m_skip[k]), float(m_kept[k]), rtol=1e-6, atol=1e-7)
    for a, b in zip(jax.tree.leaves(skip.train.params), jax.tree.leaves(kept.train.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_on_policy_with_a_kl_loss_term_keeps_the_kl_statistics(tiny):
    """No policy pass, a reference pass: the KL statistics read the sampler's log-probs."""
    lm, params = tiny
    tp = make_token_ppo(config(beta=0.1), lm, count_threes, prompts=prompts)
    _, m = jax.jit(tp.iteration)(tp.init(jax.random.PRNGKey(1), params, params))
    assert "logp_mismatch" not in m and float(m["kl"]) == pytest.approx(0.0, abs=1e-5)  # the policy is the reference
    assert np.isfinite(float(m["kl_loss"]))
