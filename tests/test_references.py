"""Published baselines' configurations (--reference), the lr ramp and bootstrap_truncated knobs."""

import json
import os

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from purejaxppo.cli.main import build_parser, main
from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.cli.flags import config_from_args
from purejaxppo.stages.gae import gae
from purejaxppo.config.references import reference_config
from purejaxppo.step.train import gae_terminated, learning_rate


def _resolved(*flags):
    return validate(config_from_args(build_parser().parse_args(["train", *flags])))


def test_breakout_reference_is_gymnax_blines_yaml():
    # agents/Breakout-MinAtar/ppo.yaml: 64 envs, n_steps 128, 8 minibatches, 4 epochs, gamma 0.999,
    # 2 x 256 units, lr 5e-4 constant, max_grad_norm 0.5, 1e7 steps -> (1e7 // 64 + 1) // 129 = 1211 updates
    c = _resolved("--env", "Breakout-MinAtar", "--reference", "gymnax-blines")
    assert (c.network, c.hidden_sizes, c.activation, c.shared_torso) == ("mlp", (256, 256), "relu", False)
    assert (c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs) == (64, 128, 8, 4)
    assert (c.gamma, c.gae_lambda, c.clip_eps, c.vf_clip_eps, c.ent_coef, c.vf_coef) == (
        0.999,
        0.95,
        0.2,
        0.2,
        0.01,
        0.5,
    )
    assert (c.max_grad_norm, c.lr, c.anneal_lr, c.lr_end, c.adam_eps) == (0.5, 5e-4, False, None, 1e-5)
    assert c.num_updates == 1211 and c.total_timesteps == 1211 * 64 * 128
    assert c.bootstrap_truncated is False and not c.normalize_obs and not c.normalize_reward
    assert c.action_std == "softplus"  # their Gaussian scale (unused by Breakout's discrete actions)


def test_reference_flags_override_and_errors():
    c = _resolved("--env", "Acrobot-v1", "--reference", "gymnax-blines", "--num-envs", "8", "--lr", "1e-3")
    assert (c.num_envs, c.lr, c.max_grad_norm) == (8, 1e-3, 1.0)  # yaml: 16 envs, max_grad_norm 1.0
    mc = reference_config("gymnax-blines", "MountainCar-v0")  # their only lr ramp: 5e-3 -> 5e-4 over 0.05 * 250k steps
    assert (mc.lr, mc.lr_end, mc.lr_ramp_steps, mc.update_epochs, mc.ent_coef) == (5e-3, 5e-4, 12_500, 64, 0.003)
    with pytest.raises(ConfigError, match="no PPO configuration for 'Seaquest-MinAtar'"):
        reference_config("gymnax-blines", "Seaquest-MinAtar")
    with pytest.raises(ConfigError, match="anneal_lr=False"):
        validate(PPOConfig(lr_end=1e-4, lr_ramp_steps=10))
    with pytest.raises(ConfigError, match="lr_ramp_steps"):
        validate(PPOConfig(lr_end=1e-4, anneal_lr=False))


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "--env", "Acrobot-v1", "--preset", "--reference", "gymnax-blines"], "--preset and --reference"),
        (["train", "--env", "Seaquest-MinAtar", "--reference", "gymnax-blines"], "no PPO configuration"),
        (["eval", "/nowhere", "--protocol", "gymnax-blines", "--episodes", "5"], "drop --episodes"),
    ],
)
def test_reference_user_errors(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


def test_lr_ramp_against_hand_computed_schedule():
    # 4 epochs x 4 minibatches = 16 optimizer steps per update; lr 5e-3 -> 5e-4 over 100 steps
    cfg = PPOConfig(lr=5e-3, lr_end=5e-4, lr_ramp_steps=100, anneal_lr=False, update_epochs=4, num_minibatches=4)
    updates = np.array([0, 1, 3, 6, 7, 50])
    by_hand = [5e-3, 5e-3 - 4.5e-3 * 0.16, 5e-3 - 4.5e-3 * 0.48, 5e-3 - 4.5e-3 * 0.96, 5e-4, 5e-4]
    got = [float(learning_rate(cfg, jnp.asarray(u, jnp.int32))) for u in updates]
    np.testing.assert_allclose(got, by_hand, rtol=1e-6)
    np.testing.assert_allclose(got, optax.linear_schedule(5e-3, 5e-4, 100)(updates * 16), rtol=1e-6)
    # the old schedules are unchanged: constant, and annealed to 0
    assert float(learning_rate(cfg.replace(lr_end=None), jnp.asarray(9))) == pytest.approx(5e-3)
    annealed = PPOConfig(lr=1e-3, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 10)
    assert float(learning_rate(annealed, jnp.asarray(4))) == pytest.approx(6e-4)


def test_config_json_records_the_reference(tmp_path, monkeypatch, capsys):
    """The CLI passes the reference to the run folder's config.json (written before the first
    compile; init and compile are stubbed out to keep this test cheap)."""
    from purejaxppo.programs.program import Program

    class Stop(Exception):
        pass

    def no_compile(self, *a, **k):
        raise Stop

    monkeypatch.setattr(Program, "init", lambda self, *a, **k: None)
    monkeypatch.setattr(Program, "compile", no_compile)
    run = str(tmp_path / "run")
    with pytest.raises(Stop):
        main(
            [
                "train",
                "--env",
                "Acrobot-v1",
                "--reference",
                "gymnax-blines",
                "--hidden-sizes",
                "4",
                "--quiet",
                "--devices",
                "1",
                "--no-compile-cache",
                "--run-dir",
                run,
            ]
        )
    info = json.load(open(os.path.join(run, "config.json")))
    assert info["reference"] == "gymnax-blines"
    assert (info["config"]["num_envs"], info["config"]["hidden_sizes"], info["config"]["bootstrap_truncated"]) == (
        16,
        [4],
        False,
    )


def test_truncation_bootstraps_or_ends_the_return():
    # one env, 3 steps, reward 1, V = 0.5 everywhere, the episode is cut by its time limit after
    # step 1 (the true final state's value is 2.0); gamma 0.9, lambda 1
    r, v = jnp.ones((3, 1)), jnp.full((3, 1), 0.5)
    nv = jnp.array([[0.5], [2.0], [0.5]])
    term, trunc = jnp.zeros((3, 1), bool), jnp.array([[False], [True], [False]])
    boot, _ = gae(r, v, nv, gae_terminated(term, trunc, True), trunc, 0.9, 1.0)
    cut, _ = gae(r, v, nv, gae_terminated(term, trunc, False), trunc, 0.9, 1.0)
    # bootstrapped: d = [0.95, 1 + 0.9 * 2 - 0.5, 0.95]; A1 = 2.3, A0 = 0.95 + 0.9 * 2.3
    np.testing.assert_allclose(boot[:, 0], [3.02, 2.3, 0.95], rtol=1e-6)
    # terminal: d1 = 1 - 0.5; A0 = 0.95 + 0.9 * 0.5
    np.testing.assert_allclose(cut[:, 0], [1.4, 0.5, 0.95], rtol=1e-6)


def test_checkpoints_older_than_new_config_fields_still_resume():
    """A checkpoint written before bootstrap_truncated/lr_end/lr_ramp_steps/action_std existed had their
    default behaviour: it compares equal to a config with the defaults, and unequal otherwise."""
    from purejaxppo.run.checkpoint import CheckpointError
    from purejaxppo.run.record import RunRecord
    from purejaxppo.run.run_folder import check_same_setup

    old = PPOConfig(env_name="Acrobot-v1").to_dict()
    for name in ("bootstrap_truncated", "lr_end", "lr_ramp_steps", "action_std"):
        del old[name]
    meta = {"config": old, "seed": 0, "num_seeds": 2, "members": None}
    record = RunRecord("run", PPOConfig(env_name="Acrobot-v1"), seed=0, num_seeds=2)
    check_same_setup(meta, record, "ckpt")
    record = record.replace(config=record.config.replace(bootstrap_truncated=False))
    with pytest.raises(CheckpointError, match="bootstrap_truncated"):
        check_same_setup(meta, record, "ckpt")
