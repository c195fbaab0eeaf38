"""Training options: separate critic LR, advantage normalisation modes, value clipping."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo, ppo_loss_fn

SMALL = PPOConfig(num_envs=4, num_steps=32, total_timesteps=128, update_epochs=1, num_minibatches=1)


def _one_step(cfg, loss_fn=ppo_loss_fn):
    ppo = make_ppo(cfg, loss_fn=loss_fn)
    s0 = ppo.init(jax.random.PRNGKey(0), cfg)
    s1, m = jax.jit(ppo.step)(s0, cfg)
    return s0, s1, m


def _max_move(s0, s1, name):
    a, b = s0.train.params["params"][name], s1.train.params["params"][name]
    return max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_separate_critic_learning_rate():
    # Adam's first step moves each coordinate by at most lr (exactly lr where |g| >> eps)
    s0, s1, m = _one_step(SMALL.replace(lr=1e-4, critic_lr=3e-3))
    assert _max_move(s0, s1, "policy_head") == pytest.approx(1e-4, rel=1e-2)
    assert _max_move(s0, s1, "actor_torso") <= 1e-4 * 1.01
    assert _max_move(s0, s1, "value_head") == pytest.approx(3e-3, rel=1e-2)
    assert _max_move(s0, s1, "critic_torso") == pytest.approx(3e-3, rel=1e-2)
    assert float(m["critic_lr"]) == pytest.approx(3e-3) and float(m["lr"]) == pytest.approx(1e-4)


def _minibatch_advantages(cfg):
    """The advantages each minibatch's loss receives, in order (one epoch), and the metrics."""
    seen = []

    def probe(agent, params, mb, c):
        jax.debug.callback(lambda a: seen.append(np.asarray(a, np.float64)), mb.advantage)
        return ppo_loss_fn(agent, params, mb, c)

    _, _, m = _one_step(cfg, probe)
    unique = list({a.tobytes(): a for a in seen}.values())  # grad tracing may call back more than once
    assert len(unique) == cfg.num_minibatches
    return unique, m


@pytest.mark.slow
def test_advantage_normalisation_modes():
    # one epoch: the rollout and the minibatch split are the same in every mode (same keys, and
    # neither depends on the params), so raw advantages (adv_norm="none") are the reference
    cfg = SMALL.replace(num_minibatches=4, update_epochs=1)
    raw, none = _minibatch_advantages(cfg.replace(adv_norm="none"))
    mini, m_mini = _minibatch_advantages(cfg.replace(adv_norm="minibatch"))
    whole, _ = _minibatch_advantages(cfg.replace(adv_norm="batch"))
    everything = np.concatenate(raw)
    assert everything.shape == (cfg.batch_size,) and np.mean(everything**2) > 2.0  # raw CartPole advantages
    for r, mn, wh in zip(raw, mini, whole):
        # per minibatch: (A - mean) / (std + eps) over that minibatch
        np.testing.assert_allclose(mn, (r - r.mean()) / (r.std() + 1e-8), rtol=1e-4, atol=1e-5)
        # whole batch: over all H*E advantages, so a minibatch is not itself standardised
        np.testing.assert_allclose(wh, (r - everything.mean()) / (everything.std() + 1e-8), rtol=1e-4, atol=1e-5)
    assert max(abs(w.mean()) for w in whole) > 1e-2
    assert float(m_mini["actor_loss"]) != pytest.approx(float(none["actor_loss"]), rel=1e-3)


def test_value_clipping_switch_changes_only_the_critic_loss():
    cfg = SMALL.replace(update_epochs=4, num_minibatches=4, vf_clip_eps=0.01)
    _, _, clipped = _one_step(cfg.replace(clip_value=True))
    _, _, plain = _one_step(cfg.replace(clip_value=False))
    assert float(clipped["critic_loss"]) > float(plain["critic_loss"])  # the max() is pessimistic


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(shared_torso=True), dict(activation="relu", hidden_sizes=(32, 32, 32))])
def test_network_options_train(kw):
    cfg = SMALL.replace(**kw)
    s0, s1, m = _one_step(cfg)
    names = set(s0.train.params["params"])
    if kw.get("shared_torso"):
        assert names == {"actor_torso", "policy_head", "value_head"}  # one torso, two heads
    else:
        k = s0.train.params["params"]["actor_torso"]
        assert len(k) == 3 and k["Dense_0"]["kernel"].shape == (4, 32)
    assert np.isfinite(float(m["actor_loss"]))
