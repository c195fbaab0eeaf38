"""The GRU agent on every observation kind the feed-forward one takes, and ``obs_keep`` on
structured and masked observations, with real envs that have them: ``pgx:2048`` (a masked
image ``[4, 4, 31]``) and ``jumanji:Snake-v1`` (a masked dict ``{grid, step_count}``). Each
trains a few updates and is held to a check that does not go through the code under test:
the stored masks against the sampled actions, NumPy's flattening against the network's input,
NumPy's index selection against the kept observation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.agents.recurrent import make_recurrent_network
from purejaxppo.envs.observation import MaskedObs
from purejaxppo.stages.gae import gae
from purejaxppo.stages.rollout import Batch, collect
from purejaxppo.step.train import make_env

TINY = dict(
    gru_size=8,
    hidden_sizes=(16,),
    num_envs=4,
    num_steps=8,
    total_timesteps=4 * 8 * 2,
    update_epochs=1,
    num_minibatches=2,
    max_episode_steps=20,
)
ENVS = [
    pytest.param("pgx:2048", "pgx", id="pgx-2048-masked-image"),
    pytest.param("jumanji:Snake-v1", "jumanji", id="snake-masked-dict"),
]


def _rollout(ppo, runner, key):
    """One rollout of the step's policy with ``runner``'s params (sampled actions)."""
    agent, params = ppo.agent, runner.train.params

    def policy(k, carry, obs, reset):
        carry, dp, rec = agent.act(params, carry, obs, reset)
        a = agent.dist.sample(k, dp)
        return carry, a, agent.dist.log_prob(dp, a), rec

    return jax.jit(
        lambda r: collect(key, policy, ppo.venv.step, r.env_state, r.obs, ppo.config.num_steps, r.carry, r.done)
    )(runner)


def _np_flat(obs) -> np.ndarray:
    """NumPy's flattening of a (dict) observation ``[E, ...]``: leaves in sorted key order."""
    if not isinstance(obs, dict):
        return np.asarray(obs, np.float32).reshape(np.shape(obs)[0], -1)
    return np.concatenate([np.asarray(obs[k], np.float32).reshape(np.shape(obs[k])[0], -1) for k in sorted(obs)], -1)


@pytest.mark.slow
@pytest.mark.parametrize("env,package", ENVS)
def test_gru_trains_on_masked_observations_and_samples_only_legal_actions(env, package):
    pytest.importorskip(package)
    cfg = PPOConfig(env_name=env, network="gru", **TINY)
    ppo = make_ppo(cfg)
    assert ppo.venv.spec.action_mask
    runner, m = jax.jit(ppo.train)(jax.random.PRNGKey(0))
    for k, v in m.items():
        assert np.all(np.isfinite(np.asarray(v))) or k.startswith("episode_"), k
    carry0 = runner.carry
    (_, _, _, _), tr = _rollout(ppo, runner, jax.random.PRNGKey(5))
    assert isinstance(tr.obs, MaskedObs)
    mask, action = np.asarray(tr.obs.action_mask), np.asarray(tr.action)
    assert not mask.all()  # some actions are illegal, so the check below can fail
    assert np.take_along_axis(mask, action[..., None], -1).all()  # never an illegal action
    # the mask travels with the sequences: replaying them scores the stored actions as the rollout did
    params = runner.train.params
    values, next_values = ppo.agent.values(params, tr)
    adv, ret = gae(tr.reward, values, next_values, tr.terminated, tr.truncated, cfg.gamma, cfg.gae_lambda)
    units = ppo.agent.units(Batch(tr.obs, tr.action, tr.log_prob, values, adv, ret), carry0, tr.reset)
    dp, v = ppo.agent.evaluate(params, units)
    np.testing.assert_allclose(ppo.agent.dist.log_prob(dp, units.action), units.log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v, units.value, rtol=1e-5, atol=1e-5)
    unmasked = jnp.take_along_axis(jax.nn.log_softmax(dp[0]), units.action[..., None], -1)[..., 0]
    assert not np.allclose(unmasked, units.log_prob, atol=1e-3)  # ... which needs the mask


def test_gru_flattens_a_structured_observation_as_numpy_does():
    """The GRU on Snake's dict observation equals the same GRU (same params) fed NumPy's
    concatenation of the flattened leaves as one plain array."""
    pytest.importorskip("jumanji")
    cfg = PPOConfig(env_name="jumanji:Snake-v1", network="gru", **TINY)
    venv = make_env(cfg)
    spec = venv.spec
    assert spec.obs_structure is not None and spec.action_mask
    net = make_recurrent_network(spec, cfg.gru_size, cfg.hidden_sizes, cfg.activation)
    plain = make_recurrent_network(
        spec._replace(obs_structure=None, action_mask=False), cfg.gru_size, cfg.hidden_sizes, cfg.activation
    )
    params = net.init(jax.random.PRNGKey(1))
    obs, _ = venv.reset(jax.random.PRNGKey(2))
    carry = jax.random.normal(jax.random.PRNGKey(3), (cfg.num_envs, cfg.gru_size))
    reset = jnp.array([True, False, False, True])
    c1, (logits, mask), v1 = net.step(params, carry, obs, reset)
    c2, logits2, v2 = plain.step(params, carry, jnp.asarray(_np_flat(obs.obs)), reset)
    np.testing.assert_allclose(c1, c2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(logits, logits2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v1, v2, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(mask, obs.action_mask)


@pytest.mark.slow
@pytest.mark.parametrize("env,package", ENVS)
def test_obs_keep_selects_flat_components_and_keeps_the_mask(env, package):
    pytest.importorskip(package)
    base = PPOConfig(env_name=env, **TINY)
    raw = make_env(base)
    size = int(np.prod(raw.spec.obs_shape))
    keep = (0, 3, size - 1)  # Snake: the last component is step_count
    kept = make_env(base.replace(obs_keep=keep))
    assert kept.spec.obs_shape == (3,) and kept.spec.obs_structure is None and kept.spec.action_mask
    key = jax.random.PRNGKey(4)
    (o_raw, s_raw), (o_kept, s_kept) = raw.reset(key), kept.reset(key)
    np.testing.assert_array_equal(o_kept.obs, _np_flat(o_raw.obs)[:, keep])
    np.testing.assert_array_equal(o_kept.action_mask, o_raw.action_mask)
    action = jnp.argmax(o_raw.action_mask, -1)  # a legal action in every env
    step_raw, step_kept = raw.step(key, s_raw, action), kept.step(key, s_kept, action)
    np.testing.assert_array_equal(step_kept[0].obs, _np_flat(step_raw[0].obs)[:, keep])
    np.testing.assert_array_equal(
        step_kept[5]["final_observation"].obs, _np_flat(step_raw[5]["final_observation"].obs)[:, keep]
    )


def test_obs_keep_on_a_structured_observation_trains_with_the_gru():
    pytest.importorskip("jumanji")
    cfg = PPOConfig(env_name="jumanji:Snake-v1", network="gru", obs_keep=(0, 1, 2, 720), **TINY)
    _, m = jax.jit(make_ppo(cfg).train)(jax.random.PRNGKey(0))
    for k, v in m.items():
        assert np.all(np.isfinite(np.asarray(v))) or k.startswith("episode_"), k


def test_gru_trains_on_multi_discrete_actions():
    """A toy MultiDiscrete env (``nvec = (3, 2)``; reward when component 0 equals the state):
    the GRU's actions are in range in every component, and its log-probs are NumPy's sum of
    per-component log-softmaxes of its logits."""
    from purejaxppo.envs import EnvSpec, auto_reset_vec_env, episode_statistics

    nvec = (3, 2)

    def reset1(key):
        s = jax.random.randint(key, (), 0, 3)
        return jax.nn.one_hot(s, 3), (s, jnp.zeros((), jnp.int32))

    def step1(key, st, a):
        s, t = st
        nxt = (s + 1 + a[1]) % 3
        return jax.nn.one_hot(nxt, 3), (nxt, t + 1), (a[0] == s).astype(jnp.float32), t + 1 >= 6, jnp.asarray(False)

    spec = EnvSpec("toy-multi", (3,), True, sum(nvec), (2,), None, None, 6, action_nvec=nvec)
    cfg = PPOConfig(env_name="toy-multi", network="gru", **TINY)
    ppo = make_ppo(cfg, venv=episode_statistics(auto_reset_vec_env(spec, cfg.num_envs, reset1, step1)))
    runner, m = jax.jit(ppo.train)(jax.random.PRNGKey(0))
    assert np.isfinite(np.asarray(m["actor_loss"])).all()
    (_, _, _, _), tr = _rollout(ppo, runner, jax.random.PRNGKey(1))
    a = np.asarray(tr.action)
    assert a.shape == (cfg.num_steps, cfg.num_envs, 2) and (a >= 0).all() and (a < np.array(nvec)).all()
    _, logits, _ = ppo.agent.act(runner.train.params, runner.carry, tr.obs[0], tr.reset[0])
    logits = np.asarray(logits, np.float64)
    parts = [logits[:, :3], logits[:, 3:]]
    lsm = [
        p - p.max(-1, keepdims=True) - np.log(np.exp(p - p.max(-1, keepdims=True)).sum(-1, keepdims=True))
        for p in parts
    ]
    ref = sum(lp[np.arange(cfg.num_envs), a[0, :, k]] for k, lp in enumerate(lsm))
    np.testing.assert_allclose(tr.log_prob[0], ref, rtol=1e-5, atol=1e-5)
