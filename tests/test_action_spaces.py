"""Masked categorical, multi-discrete actions and structured observations, against NumPy;
the mask travelling with the observation through rollout and update (a toy masked env)."""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.envs import observation
from purejaxppo.config import PPOConfig
from purejaxppo.stages.distributions import MASKED_CATEGORICAL, multi_discrete
from purejaxppo.envs import EnvSpec, auto_reset_vec_env, discrete_action_fields, episode_statistics
from purejaxppo.agents.networks import make_network
from purejaxppo.envs.observation import MaskedObs
from purejaxppo.step.train import make_ppo


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _random_masks(rng, shape):
    mask = rng.random(shape) < 0.3
    mask[..., 0] |= ~mask.any(-1)  # at least one legal action per row
    return mask


# --- masked categorical ---------------------------------------------------------------------
def test_masked_log_prob_entropy_mode_match_numpy_over_the_legal_set():
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(16, 9)) * 4).astype(np.float32)
    mask = _random_masks(rng, (16, 9))
    params = (jnp.asarray(logits), jnp.asarray(mask))
    for i in range(16):  # reference: a categorical over the legal actions only
        legal = np.flatnonzero(mask[i])
        logp = _np_log_softmax(logits[i, legal].astype(np.float64))
        a = legal[i % len(legal)]
        np.testing.assert_allclose(
            MASKED_CATEGORICAL.log_prob((params[0][i], params[1][i]), jnp.asarray(a)),
            logp[i % len(legal)],
            rtol=1e-5,
            atol=1e-5,
        )
        np.testing.assert_allclose(
            MASKED_CATEGORICAL.entropy((params[0][i], params[1][i])), -np.sum(np.exp(logp) * logp), rtol=1e-5, atol=1e-5
        )
        assert int(MASKED_CATEGORICAL.mode((params[0][i], params[1][i]))) == legal[np.argmax(logits[i, legal])]


def test_masked_samples_are_legal_and_follow_the_legal_softmax():
    rng = np.random.default_rng(1)
    logits = np.array([3.0, 0.5, -1.0, 2.0, 0.0], np.float32)  # the illegal 0 and 3 are the likeliest
    mask = np.array([False, True, True, False, True])
    n = 20000
    a = np.asarray(
        MASKED_CATEGORICAL.sample(
            jax.random.PRNGKey(0), (jnp.broadcast_to(logits, (n, 5)), jnp.broadcast_to(mask, (n, 5)))
        )
    )
    assert mask[a].all()
    p = np.exp(_np_log_softmax(logits[mask].astype(np.float64)))
    np.testing.assert_allclose(np.bincount(a, minlength=5)[mask] / n, p, atol=0.015)
    # many rows, random masks: never an illegal action
    lg = jnp.asarray(rng.normal(size=(4096, 7)).astype(np.float32) * 5)
    mk = _random_masks(rng, (4096, 7))
    s = np.asarray(MASKED_CATEGORICAL.sample(jax.random.PRNGKey(1), (lg, jnp.asarray(mk))))
    assert mk[np.arange(4096), s].all()


def test_masked_one_legal_action_is_finite_with_finite_gradients():
    logits = jnp.asarray(np.random.default_rng(2).normal(size=(200,)).astype(np.float32) * 30)
    mask = jnp.zeros(200, bool).at[137].set(True)  # 1 of 200 legal
    f = lambda lg: MASKED_CATEGORICAL.log_prob((lg, mask), jnp.asarray(137)) + MASKED_CATEGORICAL.entropy((lg, mask))
    assert float(f(logits)) == pytest.approx(0.0, abs=1e-6)  # log 1 + entropy 0
    g = jax.grad(f)(logits)
    assert np.isfinite(np.asarray(g)).all()
    assert int(MASKED_CATEGORICAL.mode((logits, mask))) == 137


# --- multi-discrete ---------------------------------------------------------------------------
def test_multi_discrete_matches_numpy_product_of_categoricals():
    nvec = (3, 2, 4)
    dist = multi_discrete(nvec)
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(10, 9)).astype(np.float32) * 2
    actions = np.stack([rng.integers(0, n, 10) for n in nvec], -1)
    parts = np.split(logits.astype(np.float64), [3, 5], axis=-1)
    lps = [_np_log_softmax(p) for p in parts]
    ref_lp = sum(lp[np.arange(10), actions[:, k]] for k, lp in enumerate(lps))
    ref_ent = sum(-(np.exp(lp) * lp).sum(-1) for lp in lps)
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(logits), jnp.asarray(actions)), ref_lp, rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(jnp.asarray(logits)), ref_ent, rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(jnp.asarray(logits)), np.stack([p.argmax(-1) for p in parts], -1))
    s = np.asarray(dist.sample(jax.random.PRNGKey(0), jnp.broadcast_to(jnp.asarray(logits[0]), (20000, 9))))
    assert s.shape == (20000, 3)
    for k, lp in enumerate(lps):  # each component's marginal
        np.testing.assert_allclose(np.bincount(s[:, k], minlength=nvec[k]) / 20000, np.exp(lp[0]), atol=0.015)


# --- structured observations -----------------------------------------------------------------
class Obs(NamedTuple):
    grid: jax.Array
    step: jax.Array


def test_flatten_structured_observation_matches_numpy_concatenation():
    rng = np.random.default_rng(4)
    obs = {"b": Obs(rng.normal(size=(2, 3, 4, 4, 2)), rng.normal(size=(2, 3))), "a": rng.normal(size=(2, 3, 5))}
    structure = observation.structure_of(jax.tree.map(lambda x: x[0, 0], obs))
    # pytree order: dict keys sorted ("a" before "b"), named-tuple fields in order
    ref = np.concatenate([obs["a"], obs["b"].grid.reshape(2, 3, 32), obs["b"].step[..., None]], -1)
    np.testing.assert_allclose(observation.flatten(jax.tree.map(jnp.asarray, obs), structure), ref, rtol=1e-6)
    assert observation.flat_size(structure) == 5 + 32 + 1


class _GridTorso(nn.Module):  # a custom torso sees the structure, not the flattening
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(8)(obs.grid.reshape(obs.grid.shape[:-3] + (-1,)) * obs.step[..., None])


def test_custom_torso_receives_the_structure():
    structure = Obs(jax.ShapeDtypeStruct((4, 4, 2), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
    spec = EnvSpec("toy", (33,), max_episode_steps=5, obs_structure=structure, **discrete_action_fields(3))
    net = make_network(spec, torso_fn=_GridTorso)
    params = net.init(jax.random.PRNGKey(0))
    obs = Obs(jnp.ones((6, 4, 4, 2)), jnp.zeros((6,)))  # step 0 -> features 0 -> logits = head bias = 0
    np.testing.assert_allclose(net.actor(params, obs), np.zeros((6, 3)), atol=1e-7)
    assert net.critic(params, obs).shape == (6,)


# --- the mask through rollout and update: a toy env --------------------------------------------
N_STATES, N_ACTIONS, HORIZON = 5, 4, 7


class ToyState(NamedTuple):
    s: jax.Array
    t: jax.Array
    illegal: jax.Array  # number of illegal actions received (must stay 0)


def _toy_mask(s):
    return jnp.arange(N_ACTIONS) <= s % N_ACTIONS  # state 0 and 4: a single legal action


def _toy_venv(num_envs):
    def obs_of(st):
        return MaskedObs({"pos": jax.nn.one_hot(st.s, N_STATES), "t": st.t.astype(jnp.float32)}, _toy_mask(st.s))

    def reset1(key):
        st = ToyState(jax.random.randint(key, (), 0, N_STATES), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return obs_of(st), st

    def step1(key, st, a):
        illegal = st.illegal + jnp.logical_not(_toy_mask(st.s)[a])
        nxt = ToyState((st.s + a + 1) % N_STATES, st.t + 1, illegal)
        reward = (a == st.s % N_ACTIONS).astype(jnp.float32)
        return obs_of(nxt), nxt, reward, nxt.t >= HORIZON, jnp.asarray(False)

    structure = {"pos": jax.ShapeDtypeStruct((N_STATES,), jnp.float32), "t": jax.ShapeDtypeStruct((), jnp.float32)}
    spec = EnvSpec(
        "toy-masked",
        (N_STATES + 1,),
        max_episode_steps=HORIZON,
        obs_structure=structure,
        action_mask=True,
        **discrete_action_fields(N_ACTIONS),
    )
    return auto_reset_vec_env(spec, num_envs, reset1, step1)


def test_mask_travels_through_rollout_and_update():
    cfg = PPOConfig(
        env_name="toy-masked",
        num_envs=8,
        num_steps=16,
        total_timesteps=8 * 16 * 2,
        update_epochs=1,
        num_minibatches=1,
        hidden_sizes=(16,),
        ent_coef=0.0,
    )
    ppo = make_ppo(cfg, venv=episode_statistics(_toy_venv(8)))
    runner = ppo.init(jax.random.PRNGKey(0))
    p0 = runner.train.params
    runner, metrics = jax.jit(ppo.run)(runner)
    # the env counted every action it received that its mask forbade: none
    assert int(jnp.sum(runner.env_state.env_state.illegal)) == 0
    assert all(np.isfinite(np.asarray(v)).all() for k, v in metrics.items() if not k.startswith("episode_"))
    assert float(metrics["episode_return"][-1]) > 0
    # the stored mask is what the minibatch replay scores under: log-probs of the stored
    # actions re-evaluated from the stored (obs, mask) equal the behaviour log-probs
    from purejaxppo.stages.rollout import collect

    def policy(key, carry, obs, reset):
        carry, dp, rec = ppo.agent.act(p0, carry, obs, reset)
        a = ppo.agent.dist.sample(key, dp)
        return carry, a, ppo.agent.dist.log_prob(dp, a), rec

    venv = _toy_venv(8)
    obs, st = venv.reset(jax.random.PRNGKey(3))
    _, tr = collect(jax.random.PRNGKey(4), policy, venv.step, st, obs, 16)
    assert isinstance(tr.obs, MaskedObs) and tr.obs.action_mask.shape == (16, 8, N_ACTIONS)
    assert bool(jnp.all(jnp.take_along_axis(tr.obs.action_mask, tr.action[..., None], -1)))
    dp, _ = ppo.agent.evaluate(p0, jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tr)._replace(info={}))
    np.testing.assert_allclose(
        ppo.agent.dist.log_prob(dp, tr.action.reshape(-1)), tr.log_prob.reshape(-1), rtol=1e-5, atol=1e-6
    )
    # ... and dropping the mask would change them (the test can fail)
    unmasked = jax.nn.log_softmax(dp[0])[jnp.arange(128), tr.action.reshape(-1)]
    assert not np.allclose(unmasked, tr.log_prob.reshape(-1), atol=1e-3)
