"""Scoring and the update over the batch's actual response length (purejaxppo/lm/models/length_buckets.py)
equal the iteration over the whole budget.

References: the ladder and the rung by hand / NumPy; the bucketed iteration against the same
iteration with ``length_buckets=0`` (every pass over all ``P + T`` slots), on batches whose
longest response falls in different rungs, the cap included. Two different programs (other
shapes, other reduction orders): float tolerances, never bit equality.
"""

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.models.length_buckets import bucket_index, bucket_sizes, smallest_width
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.ppo.token_ppo import make_token_ppo

V, P, T, B = 9, 4, 12, 8


def test_the_ladder_by_hand():
    assert bucket_sizes(256, 16) == (16, 32, 64, 128, 256)
    assert bucket_sizes(100, 16) == (16, 32, 64, 100)
    assert bucket_sizes(12, 2) == (2, 4, 8, 12)
    assert bucket_sizes(16, 16) == (16,) and bucket_sizes(8, 16) == (8,) and bucket_sizes(64, 0) == (64,)


@pytest.mark.parametrize(
    "lengths, rung",
    [([0, 0], 0), ([1, 2], 0), ([3, 1], 1), ([4, 4], 1), ([5, 0], 2), ([8, 2], 2), ([9, 12], 3), ([12, 12], 3)],
)
def test_the_rung_holds_the_longest_response(lengths, rung):
    mask = np.arange(T)[None, :] < np.asarray(lengths)[:, None]  # right-padded responses
    assert int(bucket_index(jnp.asarray(mask), bucket_sizes(T, 2))) == rung
    widths = np.array(bucket_sizes(T, 2))
    assert widths[rung] >= max(lengths) and (rung == 0 or widths[rung - 1] < max(lengths))  # the NumPy rule


def prompts(key, b):
    lens = jax.random.randint(key, (b,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (b, P), 4, V)
    return jnp.where(valid, toks, 0).astype(jnp.int32), valid


def count_sevens(_, prompt, prompt_valid, response, mask):
    return jnp.sum((response == 7) & mask, axis=1).astype(jnp.float32)


def _run(length_buckets, stop_ids, iterations=3):
    model = TinyLM(V, 16, 1, 2, max_len=P + T)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    cfg = TokenPPOConfig(
        batch_size=B,
        num_iterations=iterations,
        update_epochs=2,
        num_minibatches=2,
        max_new_tokens=T,
        stop_ids=stop_ids,
        actor_lr=1e-3,
        critic_lr=1e-3,
        beta=0.1,
        length_buckets=length_buckets,
    )
    tp = make_token_ppo(cfg, FlaxLM(model), count_sevens, prompts=prompts)
    return jax.jit(tp.train)(jax.random.PRNGKey(3), params, params)


@pytest.mark.parametrize("stop_ids", [(1, 2, 3), ()])  # early stops in several rungs; () every response at the cap
def test_bucketed_iterations_equal_the_whole_budget(stop_ids):
    (state_b, m_b), (state_f, m_f) = _run(2, stop_ids), _run(0, stop_ids)
    widths = np.asarray(m_b["response_width"])
    if stop_ids:
        assert len(set(widths.tolist())) >= 2 and widths.min() < T  # the batches fell in different rungs
    else:
        assert np.all(widths == T)  # at the cap: the widest rung, which is the whole budget
    assert np.all(np.asarray(m_f["response_width"]) == T)
    # the same responses were sampled (sampling is outside the width switch) and trained on
    np.testing.assert_array_equal(np.asarray(m_b["response_length"]), np.asarray(m_f["response_length"]))
    for k in ("score", "kl", "kl_k1", "non_score_reward", "eos_rate"):
        np.testing.assert_allclose(np.asarray(m_b[k]), np.asarray(m_f[k]), rtol=1e-4, atol=1e-5, err_msg=k)
    for k in m_f:
        if k != "response_width":
            np.testing.assert_allclose(np.asarray(m_b[k]), np.asarray(m_f[k]), rtol=2e-3, atol=2e-4, err_msg=k)
    # parameters after the iterations: float32 rounding of two programs, amplified by Adam's
    # normalised steps at most to a small fraction of one step (lr 1e-3)
    for a, b in zip(jax.tree.leaves(state_b.train.params), jax.tree.leaves(state_f.train.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)


def _branch_counts(jaxpr) -> tuple[list, int]:
    """``(branches of every cond/switch, number of while loops)`` in a jaxpr, nested ones included."""
    conds, whiles = [], 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            conds.append(len(eqn.params["branches"]))
        whiles += eqn.primitive.name == "while"
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            c, w = _branch_counts(sub)
            conds, whiles = conds + c, whiles + w
    return conds, whiles


def test_without_stop_ids_one_width_is_compiled():
    """No stop id: every response fills the budget, so the teacher-forced passes and the update
    are built for ``T`` alone (no width switch); with stop ids the ladder ``2, 4, 8, 12`` is a
    4-way switch. The sampler's decode loops (one per rung) stay in both. By hand: ``smallest_width``."""
    assert smallest_width(16, (2,)) == 16 and smallest_width(16, ()) == 0 and smallest_width(0, (2,)) == 0
    model = TinyLM(V, 16, 1, 2, max_len=P + T)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    counts = {}
    for stops in [(1, 2, 3), ()]:
        cfg = TokenPPOConfig(batch_size=B, max_new_tokens=T, stop_ids=stops, num_minibatches=2, length_buckets=2)
        tp = make_token_ppo(cfg, FlaxLM(model), count_sevens, prompts=prompts)
        state = tp.init(jax.random.PRNGKey(3), params, params)
        counts[stops] = _branch_counts(jax.make_jaxpr(tp.iteration)(state).jaxpr)
    (conds, whiles), (conds0, whiles0) = counts[(1, 2, 3)], counts[()]
    assert 4 in conds and whiles >= 4
    assert max(conds0, default=0) <= 2 and whiles0 == whiles  # the decode rungs stay
