"""Network building blocks against independent references."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.networks import patches3x3


def test_patch_conv_equals_flax_conv_valid():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 10, 10, 4))
    conv = nn.Conv(16, (3, 3), padding="VALID")
    params = conv.init(jax.random.PRNGKey(1), x)
    ref = conv.apply(params, x)
    kernel, bias = params["params"]["kernel"], params["params"]["bias"]  # [3, 3, C, O]
    ours = patches3x3(x) @ kernel.reshape(9 * 4, 16) + bias
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_minatar_cnn_network_shapes():
    cfg = PPOConfig(env_name="Breakout-MinAtar", network="cnn", activation="relu", hidden_sizes=(32,),
                    num_envs=4, num_steps=16, total_timesteps=64, update_epochs=1, num_minibatches=2)
    ppo = make_ppo(cfg)
    s = ppo.init(jax.random.PRNGKey(0), cfg)
    obs = jnp.zeros((7,) + ppo.venv.spec.obs_shape)
    from purejaxppo.rollout import Batch
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
    from purejaxppo.networks import orthogonal

    key = jax.random.PRNGKey(3)
    for shape, scale in [((4, 64), 1.4), ((64, 64), 1.0), ((64, 2), 0.01), ((64, 1), 1.0), ((36, 16), 2.0)]:
        ours = orthogonal(scale)(key, shape)
        ref = nn.initializers.orthogonal(scale)(key, shape)  # LAPACK QR with sign fix
        np.testing.assert_allclose(ours, ref, atol=2e-5, err_msg=str(shape))
    # batched over seeds it is the per-seed result (and needs no LAPACK thread pool)
    keys = jax.random.split(key, 3)
    batched = jax.jit(jax.vmap(lambda k: orthogonal(1.0)(k, (64, 64))))(keys)
    np.testing.assert_allclose(batched[1], orthogonal(1.0)(keys[1], (64, 64)), atol=1e-6)
