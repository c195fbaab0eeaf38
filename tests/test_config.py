"""Bad input gives a ConfigError naming the field and the fix, before anything is traced."""

import subprocess
import sys

import pytest

from purejaxppo import ConfigError, PPOConfig, make_ppo, validate
from purejaxppo.cli import main

BAD = [
    ("num_envs", 0),
    ("num_envs", -4),
    ("num_steps", 0),
    ("total_timesteps", 0),
    ("update_epochs", 0),
    ("num_minibatches", 0),
    ("num_minibatches", 3),
    ("num_envs", 2.5),
    ("total_timesteps", 100),
    ("hidden_sizes", ()),
    ("hidden_sizes", (64, 0)),
    ("activation", "sigmoidish"),
    ("adv_norm", "global"),
    ("network", "transformer"),
    ("lr", -1e-3),
    ("lr", 0.0),
    ("clip_eps", 0.0),
    ("clip_eps", -0.1),
    ("gamma", 0.0),
    ("gamma", 1.5),
    ("gae_lambda", -0.1),
    ("gae_lambda", 1.01),
    ("max_grad_norm", 0.0),
    ("vf_coef", -1.0),
    ("ent_coef", -0.01),
    ("target_kl", 0.0),
    ("lr", float("nan")),
    ("anneal_lr", "yes"),
    ("max_episode_steps", 0),
    ("adam_eps", 0.0),
]


@pytest.mark.parametrize("field,value", BAD)
def test_invalid_field_raises_naming_it(field, value):
    cfg = PPOConfig().replace(**{field: value})
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    # the message names the field that is wrong (total_timesteps=100 is smaller than a batch)
    assert field in msg, msg


def test_minibatch_message_names_the_divisor_fix():
    with pytest.raises(ConfigError, match="choose a divisor of 512"):
        validate(PPOConfig(num_minibatches=3))


def test_defaults_are_valid_and_follow_ppo_md():
    cfg = validate(PPOConfig())
    assert (cfg.clip_eps, cfg.vf_coef, cfg.ent_coef, cfg.gamma, cfg.gae_lambda) == (0.2, 0.5, 0.01, 0.99, 0.95)
    assert (cfg.update_epochs, cfg.num_minibatches, cfg.lr, cfg.anneal_lr, cfg.max_grad_norm) == (
        4,
        4,
        2.5e-4,
        True,
        0.5,
    )
    assert (cfg.num_envs, cfg.num_steps, cfg.adam_eps, cfg.hidden_sizes, cfg.activation) == (
        4,
        128,
        1e-5,
        (64, 64),
        "tanh",
    )


def test_unknown_env_lists_close_names():
    with pytest.raises(ConfigError, match="CartPole-v1"):
        make_ppo(PPOConfig(env_name="Cartpole-v1"))
    with pytest.raises(ConfigError, match="Breakout-MinAtar"):
        make_ppo(PPOConfig(env_name="Breakout"))


def test_cnn_on_vector_observations_is_rejected():
    with pytest.raises(ConfigError, match="network='cnn'"):
        make_ppo(PPOConfig(network="cnn"))


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "--num-minibatches", "3"], "num_minibatches"),
        (["train", "--env", "Acrobat-v1"], "Acrobot-v1"),
        (["train", "--lr", "-0.1"], "lr"),
        (["train", "--gamma", "2"], "gamma"),
    ],
)
def test_cli_prints_problem_without_traceback(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_cli_bad_flag_value_exits_nonzero():
    p = subprocess.run(
        [sys.executable, "-m", "purejaxppo", "train", "--num-envs", "four"], capture_output=True, text=True
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr and "num-envs" in p.stderr


def test_every_config_flag_parses_to_a_valid_typed_value():
    from purejaxppo.cli.main import build_parser, config_from_args

    argv = [
        "train",
        "--obs-keep",
        "0,2",
        "--critic-lr",
        "1e-3",
        "--target-kl",
        "0.02",
        "--max-episode-steps",
        "200",
        "--hidden-sizes",
        "32,32",
        "--normalize-obs",
        "true",
        "--rollout-rng",
        "unsafe_rbg",
        "--gru-size",
        "16",
        "--adv-norm",
        "batch",
        "--clip-value",
        "false",
        "--gamma",
        "0.98",
    ]
    cfg = validate(config_from_args(build_parser().parse_args(argv)))
    assert cfg.obs_keep == (0, 2) and cfg.critic_lr == 1e-3 and cfg.target_kl == 0.02
    assert cfg.max_episode_steps == 200 and cfg.hidden_sizes == (32, 32) and cfg.normalize_obs is True
    assert cfg.rollout_rng == "unsafe_rbg" and cfg.gru_size == 16 and cfg.clip_value is False and cfg.gamma == 0.98


def test_check_structure_names_the_structural_field():
    from purejaxppo.config import check_structure

    built = PPOConfig(num_envs=8)
    check_structure(built, built.replace(lr=1e-3, gamma=0.9, target_kl=0.01))  # numeric fields may differ
    with pytest.raises(ConfigError, match="num_envs") as e:
        check_structure(built, built.replace(num_envs=4, lr=1e-3))
    assert "num_envs (built 8, passed 4)" in str(e.value) and "lr (built" not in str(e.value)
    with pytest.raises(ConfigError, match="network.*gru_size|gru_size.*network"):
        check_structure(built, built.replace(network="gru", gru_size=16))
    with pytest.raises(ConfigError, match="PPOConfig"):
        check_structure(built, {"num_envs": 8})
