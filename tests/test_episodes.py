"""Multi-turn episodes: the compiled episode, the host loop, and the masks and credit.

References are independent: NumPy loops for GAE and the clipped loss, hand-built episodes, a
Python copy of the guessing game for the Python-environment path, and the teacher-forced pass
for the sampled log-probs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _episode_fixtures import TOK, PyGuess

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.envs.episode import Episode, EpisodeConfig, run_episode
from purejaxppo.lm.envs.episode_credit import episode_gae, episode_sequences, score_episode
from purejaxppo.lm.envs.episode_host import host_jax_episode, host_python_episode
from purejaxppo.lm.envs.guess_number import FEEDBACK_TEXTS, GuessNumber
from purejaxppo.lm.envs.python_env import TextStep
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.ppo.experience import Models
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.token_loss import token_ppo_loss
from purejaxppo.lm.ppo.token_update import kl_loss

ENV = GuessNumber.from_tokenizer(TOK, lo=1, hi=3, max_turns=6, intro="Guess 1 to 3.\n")  # the driver cuts at 4
B, P = 8, 2
# max_turns binds in LONG; the budget binds in SHORT (2 * 14 + 3 = 31 slots hold one turn, 51 two)
LONG = EpisodeConfig(max_turns=4, turn_tokens=3, budget=72, stop_ids=TOK.stop_ids, pad_id=TOK.pad_id)
SHORT = EpisodeConfig(max_turns=4, turn_tokens=3, budget=52, stop_ids=TOK.stop_ids, pad_id=TOK.pad_id)


@pytest.fixture(scope="module")
def model():
    lm = FlaxLM(TinyLM(TOK.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=P + LONG.budget))
    params = lm.model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    return lm, params


def batch():
    prompt = jnp.asarray([[TOK.pad_id, TOK.encode("G")[0]]] * B, jnp.int32)
    return jax.random.split(jax.random.PRNGKey(3), B), prompt, prompt != TOK.pad_id, jnp.arange(B, dtype=jnp.int32)


@pytest.fixture(scope="module")
def compiled(model):
    lm, params = model
    keys, prompt, valid, rows = batch()
    run = jax.jit(run_episode, static_argnums=(0, 2, 7))
    return {
        name: run(lm, params, ENV, keys, prompt, valid, rows, cfg) for name, cfg in (("long", LONG), ("short", SHORT))
    }


@pytest.mark.parametrize("name,cfg", [("long", LONG), ("short", SHORT)])
def test_compiled_episode_equals_host_loop(model, compiled, name, cfg):
    lm, params = model
    keys, prompt, valid, rows = batch()
    ep, host = compiled[name], host_jax_episode(lm, params, ENV, keys, prompt, valid, rows, cfg)
    for field in Episode._fields:
        a, b = np.asarray(getattr(ep, field)), np.asarray(getattr(host, field))
        if field == "logp":  # the same sampler program on the same context: float rounding at most
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=field)
        else:
            np.testing.assert_array_equal(a, b, err_msg=field)
    # the batch exercises what it claims to: several turns, both ends, the right end rule
    assert np.asarray(ep.turns).max() >= 2 and np.asarray(ep.terminated).any() and np.asarray(ep.truncated).any()
    assert (np.asarray(ep.length) <= cfg.budget).all()
    if name == "short":  # truncated by the budget before max_turns
        assert (np.asarray(ep.turns)[np.asarray(ep.truncated)] < cfg.max_turns).all()


def test_a_rows_episode_does_not_depend_on_its_batch(model, compiled):
    lm, params = model
    keys, prompt, valid, rows = batch()
    part = jax.jit(run_episode, static_argnums=(0, 2, 7))(
        lm, params, ENV, keys[2:5], prompt[2:5], valid[2:5], rows[2:5], LONG
    )
    for field in Episode._fields:
        want = np.asarray(getattr(compiled["long"], field))[2:5]
        np.testing.assert_allclose(np.asarray(getattr(part, field)), want, atol=1e-5, err_msg=field)


def test_episode_layout(compiled):
    """Each row reads: intro, then per turn the action (the mask) and its feedback text."""
    ep = compiled["long"]
    feedback = [f for f in FEEDBACK_TEXTS]
    for i in range(B):
        n = int(ep.length[i])
        toks, amask = np.asarray(ep.tokens[i]), np.asarray(ep.action_mask[i])
        assert TOK.decode(toks[:14]) == "Guess 1 to 3.\n" and not amask[:14].any()
        assert (toks[n:] == TOK.pad_id).all() and not amask[n:].any()
        # split the rest into alternating runs of action / observation
        runs, start = [], 14
        for j in range(15, n + 1):
            if j == n or amask[j] != amask[j - 1]:
                runs.append((bool(amask[start]), toks[start:j]))
                start = j
        assert [a for a, _ in runs] == [True, False] * int(ep.turns[i])
        assert all(TOK.decode(o) in feedback for a, o in runs if not a)
        reward_at = np.nonzero(np.asarray(ep.rewards[i]))[0]
        assert bool(ep.terminated[i]) == (len(reward_at) == 1)
        if ep.terminated[i]:  # the reward sits on the last token of the correct guess
            last_action_end = 14 + sum(len(t) for _, t in runs[:-1]) - 1
            assert reward_at[0] == last_action_end and TOK.decode(runs[-1][1]) == FEEDBACK_TEXTS[2]


def test_teacher_forced_logprobs_equal_sampled(model, compiled):
    """Recomputed in one teacher-forced pass over the whole episode (prompt, every action and
    observation), the actions' log-probs equal the sampler's: float32, the KV-cache decode and
    the full pass differ only by the order of float sums (~1e-6 on logits of size ~1)."""
    lm, params = model
    ep = compiled["long"]
    _, prompt, valid, _ = batch()
    cfg = TokenPPOConfig(batch_size=B, max_new_tokens=LONG.budget, stop_ids=TOK.stop_ids, pad_id=TOK.pad_id)
    models = Models(lm, lm, None, None)
    exp, _ = score_episode(models, {"policy": params, "critic": None}, params, prompt, valid, ep, cfg)
    mask = np.asarray(exp.mask)
    assert mask.sum() == int(np.asarray(ep.action_mask).sum()) and np.asarray(ep.turns).max() >= 2
    err = np.abs(np.asarray(exp.logp_old) - np.asarray(exp.logp_sampled))[mask]
    assert err.max() < 1e-5, err.max()
    assert np.all(np.asarray(exp.logp_old)[~mask] == 0.0)


def test_python_env_host_loop_equals_compiled_jax_game(model, compiled):
    lm, params = model
    keys, prompt, valid, _ = batch()
    rows = [{"row": i} for i in range(B)]
    host = host_python_episode(lm, params, PyGuess(max_guesses=6), TOK, keys, prompt, valid, rows, LONG, ENV.obs_width)
    ep = compiled["long"]
    for field in Episode._fields:
        np.testing.assert_allclose(np.asarray(getattr(ep, field)), np.asarray(getattr(host, field)), atol=1e-5)


class Loud:
    """Every observation 20 characters long, over a bound of 5; ends after two turns."""

    def reset(self, rows):
        self.n = 0
        return ["a" * 20] * len(rows)

    def step(self, actions, active):
        self.n += 1
        return [TextStep("b" * 20, 0.5, self.n == 2, False) for _ in actions]


def test_python_env_observations_cut_and_counted(model):
    lm, params = model
    keys, prompt, valid, _ = batch()
    cfg = EpisodeConfig(max_turns=4, turn_tokens=3, budget=30, stop_ids=TOK.stop_ids, pad_id=TOK.pad_id)
    ep = host_python_episode(lm, params, Loud(), TOK, keys, prompt, valid, [{}] * B, cfg, obs_width=5)
    np.testing.assert_array_equal(np.asarray(ep.obs_cut), 15 * 3)  # reset and two steps, 15 dropped each
    np.testing.assert_array_equal(np.asarray(ep.turns), 2)
    assert np.asarray(ep.terminated).all() and np.asarray(ep.rewards).sum(axis=1).tolist() == [1.0] * B
    toks = np.asarray(ep.tokens)
    assert TOK.decode(toks[0, :5]) == "aaaaa"


def test_mismatched_inputs_and_a_short_model_are_refused(model):
    lm, params = model
    keys, prompt, valid, rows = batch()
    with pytest.raises(ConfigError, match="one per episode"):
        run_episode(lm, params, ENV, keys[:3], prompt, valid, rows, LONG)
    with pytest.raises(ConfigError, match="one per episode"):
        host_python_episode(lm, params, PyGuess(6), TOK, keys, prompt, valid, [{"row": 0}], LONG, ENV.obs_width)
    with pytest.raises(ConfigError, match="must both be"):
        run_episode(lm, params, ENV, keys, prompt, valid[:, :1], rows, LONG)
    short = FlaxLM(TinyLM(TOK.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=P + LONG.budget - 1))
    with pytest.raises(ConfigError, match="positions"):
        run_episode(short, params, ENV, keys, prompt, valid, rows, LONG)


def test_budget_that_cannot_hold_a_turn_is_refused(model):
    lm, params = model
    keys, prompt, valid, rows = batch()
    cfg = EpisodeConfig(max_turns=2, turn_tokens=3, budget=2 * ENV.obs_width + 2, stop_ids=(1,), pad_id=0)
    with pytest.raises(ConfigError, match="budget"):
        run_episode(lm, params, ENV, keys, prompt, valid, rows, cfg)


# --- masks and credit on a hand-built two-turn episode ---------------------------------------
# response slots: obs0 0-1, action 1, obs1, action 2, obs2, padding (T = 12)
ACTIONS = [[2, 3, 4, 7, 8], [2, 3, 7, 8, 9]]
OBSERVATIONS = [[0, 1, 5, 6, 9], [0, 1, 4, 5, 6, 10]]
TURN_ENDS = [[4, 8], [3, 9]]
T_HAND = 12


def hand_episode() -> tuple:
    action_mask = np.zeros((2, T_HAND), bool)
    valid = np.zeros((2, T_HAND), bool)
    rewards = np.zeros((2, T_HAND), np.float32)
    for i in range(2):
        action_mask[i, ACTIONS[i]] = True
        valid[i, ACTIONS[i] + OBSERVATIONS[i]] = True
        rewards[i, TURN_ENDS[i]] = [0.5, 1.0] if i == 0 else [-1.0, 2.0]
    tokens = np.where(valid, np.arange(T_HAND) % 7 + 2, 0).astype(np.int32)
    length = valid.sum(1).astype(np.int32)
    z = np.zeros(2, bool)
    ep = Episode(
        tokens,
        valid,
        action_mask,
        np.zeros((2, T_HAND), np.float32),
        rewards,
        np.int32([2, 2]),
        z,
        z,
        length,
        np.int32([0, 0]),
    )
    prompt = np.asarray([[0, 5], [6, 5]], np.int32)
    return jax.tree.map(jnp.asarray, ep), jnp.asarray(prompt), jnp.asarray(prompt != 0)


LOSS_KW = dict(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, vf_clip_eps=0.2)
BETA = 0.1


def loss_inputs(seed=0):
    rng = np.random.default_rng(seed)
    shape = (2, P + T_HAND)
    f = lambda scale=1.0: jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)  # noqa: E731
    new = dict(logp_new=f(0.5) - 1.0, entropy=jnp.abs(f()), values_new=f())
    old = dict(logp_old=f(0.5) - 1.0, values_old=f(), advantages=f(), returns=f(), logp_ref=f(0.5) - 1.0)
    return new, old


def episode_loss(new, old, mask):
    cfg = TokenPPOConfig(batch_size=2, max_new_tokens=T_HAND, kl_in="loss", kl_estimator="k3")
    loss, _ = token_ppo_loss(
        new["logp_new"], new["entropy"], new["values_new"], old["logp_old"], old["values_old"],
        old["advantages"], old["returns"], mask, **LOSS_KW,
    )  # fmt: skip
    return loss + BETA * kl_loss(new["logp_new"], old["logp_ref"], mask, cfg)


def numpy_loss(new, old, idx):
    """The clipped PPO loss, value loss, entropy bonus and k3 KL over the slots ``idx`` alone."""
    g = {k: np.asarray(v, np.float64)[idx] for k, v in {**new, **old}.items()}
    r = np.exp(g["logp_new"] - g["logp_old"])
    actor = -np.mean(np.minimum(r * g["advantages"], np.clip(r, 0.8, 1.2) * g["advantages"]))
    vclip = g["values_old"] + np.clip(g["values_new"] - g["values_old"], -0.2, 0.2)
    critic = 0.5 * np.mean(np.maximum((g["values_new"] - g["returns"]) ** 2, (vclip - g["returns"]) ** 2))
    d = g["logp_new"] - g["logp_ref"]
    return actor + 0.5 * critic - 0.01 * np.mean(g["entropy"]) + BETA * np.mean(np.exp(-d) - 1 + d)


def test_environment_tokens_get_exactly_zero_gradient():
    ep, prompt, prompt_valid = hand_episode()
    _, _, mask = episode_sequences(prompt, prompt_valid, ep)
    new, old = loss_inputs()
    env_slots = np.zeros((2, P + T_HAND), bool)  # the observations, listed by hand
    for i in range(2):
        env_slots[i, P + np.asarray(OBSERVATIONS[i])] = True
    old = {k: jnp.where(env_slots, jnp.nan, v) for k, v in old.items()}  # garbage there changes nothing
    grads = jax.grad(lambda n: episode_loss(n, old, mask))(new)
    for name, g in grads.items():
        g = np.asarray(g)
        assert np.all(g[env_slots] == 0.0), name
        assert np.all(np.isfinite(g)) and np.any(g[np.asarray(mask)] != 0.0), name


def test_two_turn_loss_equals_single_turn_loss_with_observations_masked():
    ep, prompt, prompt_valid = hand_episode()
    _, valid, mask = episode_sequences(prompt, prompt_valid, ep)
    new, old = loss_inputs(1)
    single = np.concatenate([np.zeros((2, P), bool), np.asarray(ep.valid)], axis=1)  # one response ...
    for i in range(2):
        single[i, P + np.asarray(OBSERVATIONS[i])] = False  # ... its observation slots masked out by hand
    got = float(episode_loss(new, old, mask))
    assert got == pytest.approx(float(episode_loss(new, old, jnp.asarray(single))), abs=1e-6)
    assert got == pytest.approx(numpy_loss(new, old, single), abs=1e-5)


def numpy_gae(rewards, values, idx, gamma, lam, bootstrap=None):
    """GAE over the action slots ``idx`` of one row only, in order; ``bootstrap``: V after the end."""
    adv, last = np.zeros(len(idx)), 0.0
    for k in range(len(idx) - 1, -1, -1):
        nxt = values[idx[k + 1]] if k + 1 < len(idx) else (bootstrap or 0.0)
        delta = rewards[idx[k]] + gamma * nxt - values[idx[k]]
        last = delta + gamma * lam * (last if k + 1 < len(idx) else 0.0)
        adv[k] = last
    return adv, adv + values[idx]


@pytest.mark.parametrize("truncated", [False, True])
def test_gae_over_two_turns_equals_numpy_loop_over_actions(truncated):
    ep, prompt, prompt_valid = hand_episode()
    _, _, mask = episode_sequences(prompt, prompt_valid, ep)
    rng = np.random.default_rng(2)
    rewards = np.concatenate([np.zeros((2, P), np.float32), np.asarray(ep.rewards)], axis=1)
    values = rng.normal(size=rewards.shape).astype(np.float32)
    boot = np.float32([0.7, -0.3])
    trunc = np.asarray([truncated, False])
    adv, ret = episode_gae(
        jnp.asarray(rewards), jnp.asarray(values), mask, jnp.asarray(trunc), jnp.asarray(boot), 0.9, 0.8
    )
    for i in range(2):
        idx = P + np.asarray(ACTIONS[i])
        want_a, want_r = numpy_gae(rewards[i], values[i], idx, 0.9, 0.8, boot[i] if trunc[i] else None)
        np.testing.assert_allclose(np.asarray(adv)[i, idx], want_a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ret)[i, idx], want_r, rtol=1e-5, atol=1e-5)
        off = np.ones(P + T_HAND, bool)
        off[idx] = False
        assert np.all(np.asarray(adv)[i, off] == 0.0)
