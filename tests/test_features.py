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


def _adv_probe(network, params, mb, cfg):
    loss, metrics = ppo_loss_fn(network, params, mb, cfg)
    return loss, {**metrics, "adv_mean": jnp.mean(mb.advantage), "adv_sq": jnp.mean(mb.advantage ** 2)}


def test_advantage_normalisation_modes():
    cfg = SMALL.replace(num_minibatches=4, update_epochs=1)
    _, _, batch = _one_step(cfg.replace(adv_norm="batch"), _adv_probe)
    # whole-batch normalisation: the minibatches' (equal-size) pieces average to mean 0, var 1
    assert abs(float(batch["adv_mean"])) < 1e-5 and float(batch["adv_sq"]) == pytest.approx(1.0, rel=1e-4)
    _, _, mini = _one_step(cfg.replace(adv_norm="minibatch"), _adv_probe)
    _, _, none = _one_step(cfg.replace(adv_norm="none"), _adv_probe)
    # raw advantages reach the loss (per-minibatch normalisation happens inside it)
    assert float(mini["adv_sq"]) > 2.0 and float(mini["adv_mean"]) == pytest.approx(float(none["adv_mean"]))
    assert float(mini["actor_loss"]) != pytest.approx(float(none["actor_loss"]), rel=1e-3)


def test_value_clipping_switch_changes_only_the_critic_loss():
    cfg = SMALL.replace(update_epochs=4, num_minibatches=4, vf_clip_eps=0.01)
    _, _, clipped = _one_step(cfg.replace(clip_value=True))
    _, _, plain = _one_step(cfg.replace(clip_value=False))
    assert float(clipped["critic_loss"]) > float(plain["critic_loss"])  # the max() is pessimistic


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
