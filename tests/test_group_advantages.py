"""GRPO / RLOO group advantages (purejaxppo/lm/ppo/group_advantages.py) against hand-computed numbers."""

import numpy as np
import pytest

from purejaxppo.lm.ppo.group_advantages import group_advantages, k3_kl, repeat_prompts, token_advantages


def test_grpo_and_rloo_on_hand_computed_groups_with_ties_and_a_flat_group():
    # group 1: [1, 0, 0, 1] (ties): mean 0.5, unbiased std sqrt(4*0.25/3) = 0.57735
    # group 2: [2, 2, 2, 2]: no signal -> exactly 0
    # group 3: [3, 1, 0, 0]: mean 1, deviations [2, 0, -1, -1], unbiased std sqrt(6/3) = sqrt(2)
    r = np.array([1, 0, 0, 1, 2, 2, 2, 2, 3, 1, 0, 0], np.float32)
    s1, s3 = np.sqrt(1 / 3), np.sqrt(2.0)
    grpo = np.array([0.5 / s1, -0.5 / s1, -0.5 / s1, 0.5 / s1, 0, 0, 0, 0, 2 / s3, 0, -1 / s3, -1 / s3])
    eps = 1e-4
    grpo_eps = grpo * np.array([s1 / (s1 + eps)] * 4 + [1] * 4 + [s3 / (s3 + eps)] * 4)
    np.testing.assert_allclose(np.asarray(group_advantages(r, 4, "grpo", eps)), grpo_eps, rtol=1e-5, atol=1e-6)
    # RLOO by its definition: r_i minus the mean of the other three
    rloo = np.array([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 0, 0, 0, 0, 3 - 1 / 3, 1 - 1, 0 - 4 / 3, 0 - 4 / 3])
    np.testing.assert_allclose(np.asarray(group_advantages(r, 4, "rloo")), rloo, rtol=1e-5, atol=1e-6)


def test_a_flat_group_is_exactly_zero_and_never_nan():
    for value in (0.1, 1e-20, -3.7, 0.0):
        r = np.full(4, value, np.float32)
        for method in ("grpo", "rloo"):
            out = np.asarray(group_advantages(r, 4, method, eps=0.0))  # eps 0: a 0/0 would be NaN
            assert np.all(out == 0.0), (method, value, out)


def test_token_advantages_broadcast_over_the_response_mask():
    adv = np.array([2.0, -1.0], np.float32)
    mask = np.array([[0, 1, 1, 0], [0, 0, 1, 1]], bool)
    np.testing.assert_array_equal(np.asarray(token_advantages(adv, mask)), [[0, 2, 2, 0], [0, 0, -1, -1]])


def test_repeat_prompts_keeps_groups_contiguous():
    p = np.array([[5, 6], [7, 8]])
    v = np.array([[1, 1], [0, 1]], bool)
    rp, rv = repeat_prompts(p, v, 3)
    np.testing.assert_array_equal(np.asarray(rp), [[5, 6]] * 3 + [[7, 8]] * 3)
    np.testing.assert_array_equal(np.asarray(rv), [[1, 1]] * 3 + [[0, 1]] * 3)


def test_k3_matches_its_closed_form_and_is_nonnegative():
    logp = np.log(np.array([0.5, 0.1, 0.9], np.float32))
    ref = np.log(np.array([0.25, 0.3, 0.9], np.float32))
    ratio = np.exp(ref - logp)
    np.testing.assert_allclose(np.asarray(k3_kl(logp, ref)), ratio - np.log(ratio) - 1, rtol=1e-6, atol=1e-7)
    assert np.all(np.asarray(k3_kl(logp, ref)) >= 0)


@pytest.mark.parametrize("bad", [dict(group_size=1), dict(group_size=3), dict(method="ppo")])
def test_bad_groups_are_refused(bad):
    args = dict(rewards=np.zeros(4, np.float32), group_size=2, method="grpo") | bad
    with pytest.raises(ValueError):
        group_advantages(**args)
