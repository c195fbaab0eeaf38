"""Network building blocks against independent references."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.agents.networks import patches3x3


def test_patch_conv_equals_flax_conv_valid():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 10, 10, 4))
    conv = nn.Conv(16, (3, 3), padding="VALID")
    params = conv.init(jax.random.PRNGKey(1), x)
    ref = conv.apply(params, x)
    kernel, bias = params["params"]["kernel"], params["params"]["bias"]  # [3, 3, C, O]
    ours = patches3x3(x) @ kernel.reshape(9 * 4, 16) + bias
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_minatar_cnn_network_shapes():
    cfg = PPOConfig(
        env_name="Breakout-MinAtar",
        network="cnn",
        activation="relu",
        hidden_sizes=(32,),
        num_envs=4,
        num_steps=16,
        total_timesteps=64,
        update_epochs=1,
        num_minibatches=2,
    )
    ppo = make_ppo(cfg)
    s = ppo.init(jax.random.PRNGKey(0), cfg)
    obs = jnp.zeros((7,) + ppo.venv.spec.obs_shape)
    from purejaxppo.stages.rollout import Batch

    logits, value = ppo.agent.evaluate(s.train.params, Batch(obs, None, None, None, None, None))
    assert logits.shape == (7, ppo.venv.spec.num_actions) and value.shape == (7,)
    # the whole step traces (compiling it is slow on CPU: MinAtar's env; the learning run is in experiments/)
    _, m = jax.eval_shape(ppo.step, s, cfg)
    assert m["actor_loss"].shape == ()


def test_init_scales_follow_ppo_practice():
    ppo = make_ppo(PPOConfig(total_timesteps=512))
    p = ppo.init(jax.random.PRNGKey(0)).train.params["params"]
    w = np.asarray(p["actor_torso"]["Dense_1"]["kernel"])  # 64x64 orthogonal, gain sqrt(2)
    np.testing.assert_allclose(w.T @ w, 2.0 * np.eye(64), atol=1e-4)
    head = np.asarray(p["policy_head"]["kernel"])  # gain 0.01: near-uniform initial policy
    np.testing.assert_allclose(np.linalg.norm(head, axis=0), 0.01, rtol=1e-4)
    np.testing.assert_array_equal(p["value_head"]["bias"], 0.0)


def test_lapack_free_orthogonal_matches_flax_and_vmaps():
    from purejaxppo.agents.networks import orthogonal

    key = jax.random.PRNGKey(3)
    for shape, scale in [((4, 64), 1.4), ((64, 64), 1.0), ((64, 2), 0.01), ((64, 1), 1.0), ((36, 16), 2.0)]:
        ours = orthogonal(scale)(key, shape)
        ref = nn.initializers.orthogonal(scale)(key, shape)  # LAPACK QR with sign fix
        np.testing.assert_allclose(ours, ref, atol=2e-5, err_msg=str(shape))
    # batched over seeds it is the per-seed result (and needs no LAPACK thread pool)
    keys = jax.random.split(key, 3)
    batched = jax.jit(jax.vmap(lambda k: orthogonal(1.0)(k, (64, 64))))(keys)
    np.testing.assert_allclose(batched[1], orthogonal(1.0)(keys[1], (64, 64)), atol=1e-6)


def test_softplus_action_std_head_against_numpy_and_in_training():
    """``action_std="softplus"``: log_std = log(softplus(h @ W + b) + 0.001) of the actor torso's
    features h (a plain NumPy forward pass of the params), varying with the state; the default
    stays one learned log-std per action dimension; it trains; and the GRU refuses it."""
    import pytest

    from purejaxppo.config import ConfigError
    from purejaxppo.envs import make_vec_env
    from purejaxppo.agents.networks import make_network

    spec = make_vec_env("Pendulum-v1", 2).spec
    net = make_network(spec, (8, 8), "relu", action_std="softplus")
    p = jax.tree.map(np.asarray, net.init(jax.random.PRNGKey(0))["params"])
    p["std_head"]["kernel"] = np.random.default_rng(0).normal(size=(8, 1)).astype(np.float32)  # not ~0
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    mean, log_std = net.actor({"params": p}, jnp.asarray(obs))
    h = obs
    for layer in ("Dense_0", "Dense_1"):
        h = np.maximum(h @ p["actor_torso"][layer]["kernel"] + p["actor_torso"][layer]["bias"], 0.0)
    z = h @ p["std_head"]["kernel"] + p["std_head"]["bias"]
    np.testing.assert_allclose(np.asarray(log_std), np.log(np.log1p(np.exp(z)) + 0.001), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(mean), h @ p["policy_head"]["kernel"] + p["policy_head"]["bias"], rtol=1e-5, atol=1e-6
    )
    assert np.ptp(np.asarray(log_std)) > 1e-3  # state-dependent
    default = make_network(spec, (8, 8), "relu").init(jax.random.PRNGKey(0))["params"]
    assert "std_head" not in default and default["log_std"].shape == (1,)
    cfg = PPOConfig(
        env_name="Pendulum-v1",
        action_std="softplus",
        num_envs=4,
        num_steps=16,
        total_timesteps=4 * 16 * 3,
        hidden_sizes=(8, 8),
    )
    _, m = jax.jit(make_ppo(cfg).train)(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(m["actor_loss"]))) and np.all(np.isfinite(np.asarray(m["entropy"])))
    # entropy of a Gaussian with std ~0.69 at init: 0.5 * log(2 pi e) + log(0.69) ~ 1.05 (std 1: 1.42)
    assert abs(float(m["entropy"][0]) - (0.5 * np.log(2 * np.pi * np.e) + np.log(np.log(2) + 0.001))) < 0.1
    with pytest.raises(ConfigError, match="action_std"):
        make_ppo(cfg.replace(network="gru"))
