"""Every suite's episode ends mapped onto our contract, checked against the suite's own env
stepped by hand; the missing-extra error. A suite whose package is not installed is
skipped; `pip install -e ".[dev]"` (what CI runs) installs all seven.

Per suite, with a short time limit: at every step and env, our ``terminated`` /
``truncated`` equal the suite's own flags and ``info["final_observation"]`` equals the
observation the suite itself returns for that step (stepping its env by hand from our
pre-step state, with the same key) and, where the episode goes on, our next observation;
then GAE with a fixed critic bootstraps a truncated step from V of that observation and a
terminal step from 0 (NumPy reference).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.envs import observation
from purejaxppo.cli import main
from purejaxppo.envs import registry
from purejaxppo.stages.gae import gae
from purejaxppo.envs.observation import MaskedObs

E, GAMMA, LAM = 2, 0.9, 0.8


def _keys(step_key):
    """The per-env step keys our auto-reset hands the suite (core.auto_reset_vec_env)."""
    from purejaxppo.envs.core import raw_key

    return [raw_key(jax.random.split(k)[0]) for k in jax.random.split(step_key, E)]


def _flat(obs, spec):
    x = obs.obs if isinstance(obs, MaskedObs) else obs
    if spec.obs_structure is not None:
        return np.asarray(observation.flatten(x, spec.obs_structure))
    return np.asarray(x, np.float64).reshape(
        np.shape(jax.tree.leaves(x)[0])[: np.ndim(x) - len(spec.obs_shape)] + (-1,)
    )


# --- the suites, stepped by hand: (state of one env, action, key) -> (obs, terminated, truncated)
def _brax_hand(name, limit, kind):
    from brax.envs.wrappers.training import EpisodeWrapper

    if kind == "brax":
        from brax import envs

        env = EpisodeWrapper(envs.get_environment(name), limit, 1)
    else:
        from mujoco_playground import registry as pg

        env = EpisodeWrapper(pg.load(name, config_overrides={"impl": "jax"}), limit, 1)

    env_step = jax.jit(env.step)  # the suite's own step, compiled once (not our adapter)

    def hand(s, a, key):
        s = env_step(s, a)
        trunc = bool(s.info["truncation"])
        return s.obs, bool(s.done) and not trunc, trunc

    return hand


def _jumanji_hand(name, limit):
    import jumanji
    from jumanji.types import StepType

    env = jumanji.make(name, time_limit=limit)

    env_step = jax.jit(env.step)

    def hand(s, a, key):
        s, ts = env_step(s, a)
        last = int(ts.step_type) == int(StepType.LAST)
        o = ts.observation
        return (
            MaskedObs({"grid": o.grid, "step_count": o.step_count}, o.action_mask),
            last and float(ts.discount) == 0,
            last and float(ts.discount) != 0,
        )

    return hand


def _craftax_hand(name, limit):
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params.replace(max_timesteps=limit)

    env_step = jax.jit(env.step)

    def hand(s, a, key):
        o, s2, r, done, _ = env_step(key, s, a, params)
        return o, bool(done) and int(s2.timestep) < limit, bool(done) and int(s2.timestep) >= limit

    return hand


def _navix_hand(name, limit):
    import navix

    env = navix.make(name, max_steps=limit)

    env_step = jax.jit(env._step)

    def hand(ts, a, key):
        ts = env_step(ts, a)
        return ts.observation, int(ts.step_type) == 2, int(ts.step_type) == 1  # navix: 2 termination, 1 truncation

    return hand


def _xminigrid_hand(name, limit):
    import xminigrid

    env, params = xminigrid.make(name)
    params = params.replace(max_steps=limit)

    env_step = jax.jit(env.step)

    def hand(ts, a, key):
        ts = env_step(params, ts, a)
        last = bool(ts.last())
        return ts.observation, last and float(ts.discount) == 0, last and float(ts.discount) == 1

    return hand


def _pgx_hand(name, limit):
    import pgx

    env = pgx.make(name)
    env_step = jax.jit(env.step)

    def hand(carry, a, key):
        s, t = carry
        s = env_step(s, a, key)
        term = bool(s.terminated)
        return MaskedObs(s.observation, s.legal_action_mask), term, (not term) and (bool(s.truncated) or t + 1 >= limit)

    return hand


SUITE_CASES = [  # (suite package, env name, time limit, steps, hand-stepper)
    pytest.param(
        "brax", "brax:inverted_pendulum", 12, 30, lambda: _brax_hand("inverted_pendulum", 12, "brax"), id="brax"
    ),
    pytest.param(
        "mujoco_playground",
        "playground:CartpoleBalance",
        6,
        14,
        lambda: _brax_hand("CartpoleBalance", 6, "playground"),
        id="playground",
        marks=pytest.mark.slow,
    ),
    pytest.param("jumanji", "jumanji:Snake-v1", 9, 24, lambda: _jumanji_hand("Snake-v1", 9), id="jumanji"),
    pytest.param(
        "craftax",
        "craftax:Craftax-Classic-Symbolic-v1",
        5,
        12,
        lambda: _craftax_hand("Craftax-Classic-Symbolic-v1", 5),
        id="craftax",
    ),
    pytest.param("navix", "navix:Navix-Empty-5x5-v0", 7, 20, lambda: _navix_hand("Navix-Empty-5x5-v0", 7), id="navix"),
    pytest.param(
        "xminigrid",
        "xminigrid:MiniGrid-Empty-6x6",
        7,
        20,
        lambda: _xminigrid_hand("MiniGrid-Empty-6x6", 7),
        id="xminigrid",
    ),
    pytest.param("pgx", "pgx:2048", 6, 14, lambda: _pgx_hand("2048", 6), id="pgx"),
]


def _action(spec, obs, t):
    """A fixed policy: push +1 (continuous); first legal action (masked); cycle otherwise."""
    if not spec.discrete:
        return jnp.ones((E,) + spec.action_shape)
    if spec.action_mask:
        return jnp.argmax(obs.action_mask, -1)
    return (jnp.arange(E) + t // 3) % spec.num_actions


@pytest.fixture
def little_optimisation():
    """XLA with most optimisations off for this test: it runs a few dozen steps, so its time is
    compile time (Craftax, Brax and Playground steps compile for tens of seconds), and what it
    checks (episode-end flags, observations, GAE) does not depend on how the step is optimised."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.mark.slow
@pytest.mark.parametrize("package,name,limit,steps,make_hand", SUITE_CASES)
def test_suite_episode_ends_and_bootstrap_match_the_suite(package, name, limit, steps, make_hand, little_optimisation):
    pytest.importorskip(package)
    venv = registry.make_vec_env(name, E, max_episode_steps=limit)
    spec, hand = venv.spec, make_hand()
    step = jax.jit(venv.step)
    obs, state = jax.jit(venv.reset)(jax.random.PRNGKey(0))
    w = (
        np.random.default_rng(0).normal(
            size=(spec.obs_shape[0] if spec.obs_structure is not None else int(np.prod(spec.obs_shape)),)
        )
        * 0.1
    )
    value = lambda o: _flat(o, spec) @ w  # a fixed critic on the (flattened) observation
    rec = {k: [] for k in ("v", "v_next_ours", "v_next_ref", "r", "term", "trunc")}
    for t in range(steps):
        key = jax.random.PRNGKey(100 + t)
        action = _action(spec, obs, t)
        nobs, nstate, reward, term, trunc, info = step(key, state, action)
        final = info["final_observation"]
        host_state, host_action = jax.device_get((state, action))  # slice on the host: no tiny compiles per leaf
        refs = [hand(jax.tree.map(lambda x: x[e], host_state), host_action[e], k) for e, k in enumerate(_keys(key))]
        ref_obs = jax.tree.map(lambda *xs: np.stack([np.asarray(x, np.float32) for x in xs]), *[r[0] for r in refs])
        np.testing.assert_array_equal(np.asarray(term), [r[1] for r in refs], err_msg=f"terminated at t={t}")
        np.testing.assert_array_equal(np.asarray(trunc), [r[2] for r in refs], err_msg=f"truncated at t={t}")
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(np.asarray(a, np.float32), b, rtol=1e-5, atol=1e-5), final, ref_obs
        )
        # where the episode goes on, the final observation IS the next one (the VecEnv contract)
        going_on = ~(np.asarray(term) | np.asarray(trunc))
        jax.tree.map(
            lambda f, n: np.testing.assert_array_equal(
                np.asarray(f)[going_on], np.asarray(n)[going_on], err_msg=f"final != next observation at t={t}"
            ),
            final,
            nobs,
        )
        rec["v"].append(value(obs)), rec["v_next_ours"].append(value(final)), rec["v_next_ref"].append(value(ref_obs))
        (
            rec["r"].append(np.asarray(reward)),
            rec["term"].append(np.asarray(term)),
            rec["trunc"].append(np.asarray(trunc)),
        )
        if t == 0:  # reset and step give the same types (weak types too): jit(step) compiles once
            typ = lambda tree: (
                jax.tree.structure(tree),
                [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(tree)],
            )
            assert typ((nobs, nstate)) == typ((obs, state)), "reset's types differ from step's"
        obs, state = nobs, nstate
    R = {k: np.stack(v) for k, v in rec.items()}
    assert (R["term"] | R["trunc"]).any(), "the short time limit must end some episodes"
    adv, _ = gae(
        jnp.asarray(R["r"], jnp.float32),
        jnp.asarray(R["v"], jnp.float32),
        jnp.asarray(R["v_next_ours"], jnp.float32),
        jnp.asarray(R["term"]),
        jnp.asarray(R["trunc"]),
        GAMMA,
        LAM,
    )
    ref, last = np.zeros_like(R["r"], np.float64), np.zeros(E)
    for t in reversed(range(steps)):  # NumPy GAE: bootstrap V(suite's own next obs), 0 at terminal states
        boot = np.where(R["term"][t], 0.0, R["v_next_ref"][t])
        delta = R["r"][t] + GAMMA * boot - R["v"][t]
        last = delta + GAMMA * LAM * np.where(R["term"][t] | R["trunc"][t], 0.0, last)
        ref[t] = last
    np.testing.assert_allclose(np.asarray(adv), ref, rtol=1e-4, atol=1e-4)


def test_missing_extra_is_one_line_naming_the_pip_command(monkeypatch, capsys):
    monkeypatch.setattr(registry, "installed", lambda suite: False)
    assert main(["train", "--env", "craftax:Craftax-Classic-Symbolic-v1", "--total-timesteps", "512"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == 'error: the craftax suite is not installed; install it with: pip install "purejaxppo[craftax]"'
    assert main(["train", "--env", "nosuch:Thing"]) == 2
    assert "unknown environment suite 'nosuch'" in capsys.readouterr().err


def test_envs_command_lists_every_suite(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for suite in ("gymnax", "brax", "playground", "jumanji", "craftax", "navix", "xminigrid", "pgx"):
        assert any(line.startswith(suite + " ") for line in out.splitlines()), suite
    assert main(["envs", "--suite", "gymnax"]) == 0 and "CartPole-v1" in capsys.readouterr().out
