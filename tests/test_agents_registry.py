"""Agents by name (purejaxppo.agents.registry): a user-registered agent goes through the
whole life of a run folder (train, load, evaluate, resume, warm-start) like a built-in
one, because the folder's config names it and ``load_run`` rebuilds it by that name; unknown
names and the registry's own rules give errors that list what is registered."""

import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from purejaxppo import ConfigError, PPOConfig, make_ppo, validate
from purejaxppo.agents import registry
from purejaxppo.agents.agent import feed_forward
from purejaxppo.agents.networks import make_network
from purejaxppo.programs.runs import resume_run, train_chunked
from purejaxppo.run import warm_start
from purejaxppo.programs import kinds
from purejaxppo.run.run_folder import load_run
from purejaxppo.step.evaluate import evaluate_runner

NAME = "tiny-relu"
CFG = PPOConfig(
    network=NAME,
    num_envs=4,
    num_steps=16,
    total_timesteps=4 * 16 * 4,
    update_epochs=1,
    num_minibatches=2,
    max_episode_steps=20,
)


class TinyTorso(nn.Module):
    """Not the MLP torso: one 8-wide ReLU layer named ``tiny``."""

    @nn.compact
    def __call__(self, obs):
        return nn.relu(nn.Dense(8, name="tiny")(obs))


def build_tiny(config, spec):
    return feed_forward(make_network(spec, torso_fn=TinyTorso))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The agent registered; a full run in ``whole/``, the same run stopped after 2 of its 4
    updates in ``half/`` (resumed by the tests). Unregistered at the end."""
    registry.register_agent(NAME, build_tiny, fields=("hidden_sizes",))
    root = tmp_path_factory.mktemp("custom-agent")
    whole, half = str(root / "whole"), str(root / "half")
    kw = dict(chunk_updates=2, checkpoint_every=1)
    full = train_chunked(CFG, run_dir=whole, **kw)
    train_chunked(CFG, run_dir=half, stop_after=2, **kw)
    yield {"whole": whole, "half": half, "full": full, "root": root}
    registry.unregister_agent(NAME)


def _tiny_kernel(params):
    return params["params"]["actor_torso"]["tiny"]["kernel"]


def test_a_registered_agent_trains_and_loads_from_its_folder_by_name(runs):
    config, _, runner, ppo = load_run(runs["whole"])
    assert config.network == NAME and kinds.load(runs["whole"]).update == CFG.num_updates
    assert _tiny_kernel(runner.train.params).shape == (1, 4, 8)  # [runs, obs, 8]: the custom torso, rebuilt
    for a, b in zip(jax.tree.leaves(runner.train.params), jax.tree.leaves(runs["full"].runner_state.train.params)):
        np.testing.assert_array_equal(a, b)  # the checkpoint is the trained state
    assert np.isfinite(runs["full"].metrics["actor_loss"]).all()


def test_a_registered_agent_is_evaluated_from_its_folder(runs):
    config, _, runner, ppo = load_run(runs["whole"])
    ret, length = evaluate_runner(config, ppo.agent, runner, jax.random.PRNGKey(0), num_episodes=4)
    # CartPole pays 1 per step: each episode's return is its length, within the 20-step limit
    assert ret.shape == (1, 4) and np.isfinite(ret).all()
    np.testing.assert_array_equal(ret, length)
    assert (length >= 1).all() and (length <= 20).all()


def test_a_registered_agent_resumes_to_the_numbers_of_an_uninterrupted_run(runs):
    res = resume_run(runs["half"])
    assert res.finished and res.updates_done == CFG.num_updates
    for name in ("actor_loss", "critic_loss", "entropy", "approx_kl"):
        np.testing.assert_allclose(res.metrics[name], runs["full"].metrics[name], rtol=1e-5, atol=1e-7, err_msg=name)
    _, _, a, _ = load_run(runs["half"])
    np.testing.assert_allclose(
        _tiny_kernel(a.train.params), _tiny_kernel(runs["full"].runner_state.train.params), rtol=1e-5, atol=1e-7
    )


def test_a_registered_agent_warm_starts_from_its_folder(runs):
    new = CFG.replace(lr=1e-3)
    record = warm_start.describe(runs["whole"], None, new, 1)
    ppo = make_ppo(new)
    fresh = jax.vmap(lambda k: ppo.init(k, new))(jax.random.split(jax.random.PRNGKey(7), 1))
    started = warm_start.apply(record, fresh, 1)
    np.testing.assert_array_equal(
        _tiny_kernel(started.train.params), _tiny_kernel(runs["full"].runner_state.train.params)
    )
    assert not np.array_equal(_tiny_kernel(fresh.train.params), _tiny_kernel(started.train.params))
    res = train_chunked(new, run_dir=os.path.join(runs["root"], "warm"), init_from=runs["whole"], chunk_updates=4)
    assert res.finished and np.isfinite(res.metrics["actor_loss"]).all()
    # the agent's own fields decide what must match: hidden_sizes (named at registration) ...
    with pytest.raises(Exception, match="hidden_sizes"):
        warm_start.describe(runs["whole"], None, new.replace(hidden_sizes=(32,)), 1)
    # ... and a field it does not read may differ
    warm_start.describe(runs["whole"], None, new.replace(gru_size=7), 1)


def test_a_folder_whose_agent_is_not_registered_says_how_to_load_it(runs):
    registry.unregister_agent(NAME)
    try:
        with pytest.raises(ConfigError, match=f"network='{NAME}' is not a registered agent.*'gru'.*register_agent"):
            load_run(runs["whole"])
    finally:
        registry.register_agent(NAME, build_tiny, fields=("hidden_sizes",))


def test_unknown_names_list_the_registered_agents():
    for call in (lambda c: make_ppo(c), validate, registry.check_agent):
        with pytest.raises(ConfigError) as e:
            call(PPOConfig(network="transformer"))
        msg = str(e.value)
        assert "network='transformer' is not a registered agent" in msg
        assert registry.registered_agents()[:3] == ("cnn", "gru", "mlp")
        assert f"choose one of {registry.registered_agents()}" in msg, msg


def test_registry_rules():
    with pytest.raises(ConfigError, match="already registered"):
        registry.register_agent("gru", build_tiny)
    with pytest.raises(ConfigError, match="not structural PPOConfig fields"):
        registry.register_agent("bad-fields", build_tiny, fields=("lr",))
    with pytest.raises(ConfigError, match="no agent named"):
        registry.unregister_agent("never-registered")
    assert "bad-fields" not in registry.registered_agents()

    def check(config):
        if config.hidden_sizes != (16,):
            raise ConfigError("seq-agent wants hidden_sizes=(16,)")

    registry.register_agent("seq-agent", build_tiny, sequence_units=True, check=check)
    try:
        seq = PPOConfig(network="seq-agent", num_envs=4, num_minibatches=8, num_steps=16, hidden_sizes=(16,))
        with pytest.raises(ConfigError, match="must divide num_envs=4 for the 'seq-agent' agent"):
            registry.check_agent(seq)  # its minibatches are whole sequences
        validate(PPOConfig(num_envs=4, num_minibatches=8, num_steps=16))  # transitions: 64/8 is fine
        with pytest.raises(ConfigError, match="wants hidden_sizes"):
            registry.check_agent(seq.replace(num_minibatches=2, hidden_sizes=(8,)))
        assert registry.minibatch_units(seq.replace(num_minibatches=2)) == (
            2,
            "env sequences (num_envs/num_minibatches)",
        )
        assert registry.minibatch_units(PPOConfig(num_envs=4, num_steps=16, num_minibatches=2))[0] == 32
    finally:
        registry.unregister_agent("seq-agent")
