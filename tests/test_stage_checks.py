"""Public stages refuse wrongly shaped inputs and float masks instead of broadcasting them."""

import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.lm.ppo import token_stages as tk

from purejaxppo.lm.ppo import token_loss as tl
from purejaxppo.stages.gae import gae
from purejaxppo.stages.losses import actor_loss, masked_mean, ppo_loss, value_loss

N, T, B = 6, 5, 3
v = jnp.arange(N, dtype=jnp.float32) / N
col = v[:, None]  # [N, 1]: broadcasts against [N] to [N, N] if not caught
tb = jnp.ones((T, B))
tbool = jnp.zeros((T, B), bool)


def _gae(**kw):
    args = dict(rewards=tb, values=tb, next_values=tb, terminated=tbool, truncated=tbool, gamma=0.99, gae_lambda=0.95)
    args.update(kw)
    return gae(**args)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: actor_loss(v, v, v, 0.2, mask=jnp.ones((N, 1), bool)), "mask has shape (6, 1), expected (6,)"),
        (lambda: actor_loss(v, col, v, 0.2), "logp_old has shape (6, 1), expected (6,)"),
        (lambda: actor_loss(v, v, col, 0.2), "advantages"),
        (lambda: actor_loss(v, v, v, 0.2, mask=jnp.full((N,), 0.5)), "mask must be bool"),
        (lambda: value_loss(v, v, col), "returns has shape (6, 1)"),
        (lambda: value_loss(v, col, v, 0.2), "values_old"),
        (lambda: masked_mean(v, jnp.ones((N, 1), bool)), "masked_mean: mask"),
        (lambda: ppo_loss(v, col, v, v, v, v, v, clip_eps=0.2, vf_coef=0.5, ent_coef=0.0), "entropy"),
        (lambda: _gae(terminated=jnp.zeros((B,), bool)), "terminated has shape (3,), expected (5, 3)"),
        (lambda: _gae(values=jnp.ones((1, B))), "values has shape (1, 3)"),
        (lambda: _gae(next_values=jnp.ones((T, 1))), "next_values has shape (5, 1)"),
        (lambda: _gae(terminated=jnp.zeros((T, B))), "terminated must be bool"),
        (lambda: _gae(mask=jnp.full((T, B), 0.5)), "mask must be bool"),
        (lambda: tk.token_gae(tb.T, tb.T, jnp.full((B, T), 0.5), 1.0, 1.0), "mask must be bool"),
        (lambda: tk.token_gae(tb.T, jnp.ones((B, 1)), tbool.T, 1.0, 1.0), "values has shape (3, 1)"),
        (lambda: tk.kl_penalty(tb.T, tb, "k1"), "logp_ref"),
        (lambda: tk.shaped_rewards(jnp.ones((B, 1)), tb.T, tbool.T, 0.1), "score has shape (3, 1), expected (3,)"),
        (lambda: tk.sequence_kl(tb.T, tbool), "mask has shape (5, 3)"),
        (lambda: tl.token_ppo_loss(*(tb.T,) * 6, tb, tbool.T, clip_eps=0.2, vf_coef=0.5, ent_coef=0.0), "returns"),
    ],
)
def test_wrong_shapes_and_float_masks_raise_naming_the_argument(call, needle):
    with pytest.raises(ValueError) as e:
        call()
    assert needle in str(e.value), str(e.value)


def test_integer_masks_are_still_accepted_and_equal_bool_masks():
    m = np.arange(N) < 4
    a = actor_loss(v, v * 0.5, v, 0.2, mask=jnp.asarray(m))[0]
    b = actor_loss(v, v * 0.5, v, 0.2, mask=jnp.asarray(m.astype(np.int32)))[0]
    # reference: the clipped surrogate over the 4 valid entries by hand
    ratio = np.exp(np.asarray(v)[:4] * 0.5)
    adv = np.asarray(v)[:4]
    ref = -np.mean(np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv))
    np.testing.assert_allclose([a, b], [ref, ref], rtol=1e-6)
