"""Property-based: every config is either rejected with a ConfigError before tracing, or
it traces. The expected verdict comes from an independent oracle written from the rules
in docs/conventions.md and the field docs, not from ``validate`` itself."""

import math
import numbers

import jax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from purejaxppo import ConfigError, PPOConfig, make_ppo, validate

ints = st.one_of(st.integers(-3, 12), st.sampled_from([2.5, "4", None, True]))
# Numeric strings are left out here; test_numeric_strings_are_rejected covers them.
floats = st.one_of(st.floats(-1.0, 2.0), st.sampled_from([0.0, 1.0, float("nan"), float("inf"), None]))

FIELDS = {
    "num_envs": ints,
    "num_steps": ints,
    "update_epochs": ints,
    "num_minibatches": ints,
    "total_timesteps": st.one_of(st.integers(0, 300), st.sampled_from([1.5, None])),
    "hidden_sizes": st.one_of(
        st.lists(st.integers(-1, 8), max_size=3).map(tuple), st.sampled_from([[8], (8.0,), None])
    ),
    "activation": st.sampled_from(["tanh", "relu", "gelu", "elu", "swish", "sigmoid", "", None]),
    "adv_norm": st.sampled_from(["minibatch", "batch", "none", "global", None]),
    "network": st.sampled_from(["mlp", "cnn", "gru", "resnet"]),
    "anneal_lr": st.sampled_from([True, False, "yes", 1]),
    "clip_value": st.sampled_from([True, False, 0]),
    "max_episode_steps": st.one_of(st.none(), st.integers(-2, 50)),
    "lr": floats,
    "clip_eps": floats,
    "vf_clip_eps": floats,
    "vf_coef": floats,
    "ent_coef": floats,
    "gamma": floats,
    "gae_lambda": floats,
    "max_grad_norm": floats,
    "adam_eps": floats,
    "target_kl": st.one_of(st.none(), floats),
}


def oracle_is_valid(c: PPOConfig) -> bool:
    def pos_int(x):
        return isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1

    def num(x, lo, hi, lo_open, hi_open=False):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
            return False
        return (x > lo if lo_open else x >= lo) and (hi is None or (x < hi if hi_open else x <= hi))

    if not all(
        pos_int(getattr(c, f)) for f in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "total_timesteps")
    ):
        return False
    batch = c.num_envs * c.num_steps
    return all(
        [
            batch % c.num_minibatches == 0,
            c.total_timesteps >= batch,
            c.max_episode_steps is None or pos_int(c.max_episode_steps),
            isinstance(c.hidden_sizes, tuple) and len(c.hidden_sizes) > 0 and all(pos_int(h) for h in c.hidden_sizes),
            c.activation in ("tanh", "relu", "gelu", "elu", "swish"),
            c.adv_norm in ("minibatch", "batch", "none"),
            c.network in ("mlp", "cnn", "gru"),
            c.network != "gru" or c.num_envs % c.num_minibatches == 0,  # minibatches are whole env sequences
            all(isinstance(getattr(c, f), bool) for f in ("anneal_lr", "clip_value")),
            num(c.lr, 0, None, True),
            num(c.clip_eps, 0, None, True),
            num(c.vf_clip_eps, 0, None, True),
            num(c.vf_coef, 0, None, False),
            num(c.ent_coef, 0, None, False),
            num(c.gamma, 0, 1, True),
            num(c.gae_lambda, 0, 1, False),
            num(c.max_grad_norm, 0, None, True),
            num(c.adam_eps, 0, None, True),
            c.target_kl is None or num(c.target_kl, 0, None, True),
        ]
    )


BASE = PPOConfig(num_envs=2, num_steps=4, total_timesteps=16, update_epochs=1, num_minibatches=2, hidden_sizes=(8,))


@st.composite
def configs(draw):
    names = draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=4))
    return BASE.replace(**{n: draw(FIELDS[n]) for n in names})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_validate_agrees_with_the_oracle(cfg):
    if oracle_is_valid(cfg):
        assert validate(cfg) is cfg
    else:
        with pytest.raises(ConfigError):
            validate(cfg)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_every_config_is_rejected_before_tracing_or_traces(cfg):
    """``make_ppo`` either raises ConfigError (nothing traced yet: it happens before any
    jax function is built) or the whole ``train`` traces to metrics of the right length."""
    try:
        ppo = make_ppo(cfg)
    except ConfigError:
        assert not oracle_is_valid(cfg) or cfg.network == "cnn"  # cnn needs image observations
        return
    assert oracle_is_valid(cfg)
    _, metrics = jax.eval_shape(ppo.train, jax.random.PRNGKey(0))
    assert metrics["actor_loss"].shape == (cfg.num_updates,)


@pytest.mark.parametrize("field", ["lr", "adam_eps", "gamma"])
def test_numeric_strings_are_rejected(field):
    with pytest.raises(ConfigError):
        validate(BASE.replace(**{field: "0.1"}))


@st.composite
def valid_configs(draw):
    e, h = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    network = draw(st.sampled_from(["mlp", "gru"]))
    units = e if network == "gru" else e * h  # the GRU splits whole env sequences
    m = draw(st.sampled_from([d for d in range(1, units + 1) if units % d == 0]))
    return BASE.replace(
        network=network,
        gru_size=draw(st.integers(1, 8)),
        num_envs=e,
        num_steps=h,
        num_minibatches=m,
        total_timesteps=e * h * draw(st.integers(1, 3)),
        update_epochs=draw(st.integers(1, 2)),
        hidden_sizes=tuple(draw(st.lists(st.integers(1, 8), min_size=1, max_size=2))),
        activation=draw(st.sampled_from(["tanh", "relu", "gelu", "elu", "swish"])),
        adv_norm=draw(st.sampled_from(["minibatch", "batch", "none"])),
        anneal_lr=draw(st.booleans()),
        clip_value=draw(st.booleans()),
        shared_torso=draw(st.booleans()),
        env_name=draw(st.sampled_from(["CartPole-v1", "Pendulum-v1"])),
        gamma=draw(st.floats(0.01, 1.0)),
        gae_lambda=draw(st.floats(0.0, 1.0)),
        target_kl=draw(st.one_of(st.none(), st.floats(1e-4, 1.0))),
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs())
def test_accepted_configs_trace(cfg):
    assert oracle_is_valid(cfg)
    _, metrics = jax.eval_shape(make_ppo(cfg).train, jax.random.PRNGKey(0))
    assert metrics["actor_loss"].shape == (cfg.num_updates,)
