"""A population trains in one compile and each member equals its separate run."""

import jax
import numpy as np
import pytest

from purejaxppo import ConfigError, PPOConfig, make_ppo
from purejaxppo.population import make_population, member, parse_sweep, population_keys, results_table, vmap_population

SMALL = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 4, update_epochs=2, num_minibatches=2)


def test_member_equals_separate_run_and_one_compile():
    pop = make_population(SMALL, {"lr": [1e-4, 1e-3], "clip_eps": [0.1, 0.3], "gamma": [0.9]}, num_seeds=2)
    assert len(pop.members) == 4
    ppo = make_ppo(SMALL)
    traces = []

    def counted_train(key, cfg):
        traces.append(1)  # runs once per trace, not per call
        return ppo.train(key, cfg)

    train_pop = jax.jit(vmap_population(counted_train))
    keys = population_keys(jax.random.PRNGKey(0), pop)
    state, metrics = train_pop(keys, pop.configs)
    assert len(traces) == 1 and train_pop._cache_size() == 1
    assert metrics["actor_loss"].shape == (4, 2, SMALL.num_updates)
    for i in (0, 3):
        cfg, st = member(pop, i, state)
        # a separate run with the member's plain (Python float) config
        single = jax.jit(make_ppo(cfg).train)(keys[i, 1], cfg)[1]
        for k in ("actor_loss", "critic_loss", "approx_kl", "episode_return", "lr"):
            np.testing.assert_allclose(metrics[k][i, 1], single[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # members differ
    assert not np.allclose(metrics["actor_loss"][0], metrics["actor_loss"][3])


def test_random_search_and_validation():
    pop = make_population(SMALL, random={"lr": (1e-5, 1e-2, "log"), "ent_coef": (0.0, 0.05, "linear")}, num_random=5)
    lrs = np.asarray(pop.configs.lr)
    assert lrs.shape == (5,) and np.all((lrs >= 1e-5) & (lrs <= 1e-2))
    with pytest.raises(ConfigError, match="num_envs"):
        make_population(SMALL, {"num_envs": [4, 8]})
    with pytest.raises(ConfigError, match="lr"):
        make_population(SMALL, {"lr": [1e-3, -1.0]})


def test_parse_sweep_and_table():
    grid = parse_sweep(["lr=1e-4,3e-4", "clip-eps=0.1"])
    assert grid == {"lr": [1e-4, 3e-4], "clip_eps": [0.1]}
    with pytest.raises(ConfigError):
        parse_sweep(["lr"])
    pop = make_population(SMALL, grid, num_seeds=2)
    table = results_table(pop, np.array([[10.0, 20.0], [30.0, 50.0]]))
    lines = table.splitlines()
    assert lines[2].startswith("| 1 |") and "40.0 | 30.0 | 50.0" in lines[2]  # best first


def test_cli_sweep_writes_table_best_first(tmp_path, capsys):
    from purejaxppo.cli import main

    out = tmp_path / "sweep"
    rc = main(["train", "--env", "CartPole-v1", "--sweep", "lr=1e-4,3e-3", "--seeds", "2", "--devices", "1",
               "--num-steps", "32", "--total-timesteps", "4096", "--run-dir", str(out), "--quiet"])
    assert rc == 0
    table = (out / "results.md").read_text().splitlines()
    means = [float(line.split("|")[3]) for line in table[2:]]
    assert len(means) == 2 and means[0] >= means[1]
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("member,seed,update") and len(rows) == 1 + 2 * 2 * 32
    assert main(["train", "--sweep", "hidden_sizes=1,2"]) == 2
    assert "cannot sweep" in capsys.readouterr().err
    # --devices splits members x seeds runs (2-device equality: tests/test_parallel.py)
    assert main(["train", "--sweep", "lr=1e-4,3e-4,1e-3", "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert "--devices=2" in err and "3 members x 1 seed(s) = 3 runs" in err and "Traceback" not in err


def test_cli_preset_applies_per_env_defaults(monkeypatch):
    from purejaxppo import cli

    args = cli.build_parser().parse_args(["train", "--env", "Pendulum-v1", "--preset", "--lr", "5e-4"])
    cfg = cli.config_from_args(args)
    assert cfg.gamma == 0.9 and cfg.update_epochs == 10 and cfg.lr == 5e-4  # preset + override
    plain = cli.config_from_args(cli.build_parser().parse_args(["train", "--env", "Pendulum-v1"]))
    assert plain.gamma == 0.99


def test_gamma_sweep_with_reward_scaling_is_refused():
    """Reward scaling fixes ONE discount at env construction: a population varying gamma
    with it on would silently scale with the wrong gamma, so both entry points refuse it."""
    from purejaxppo.parallel import stack_configs

    scaled = SMALL.replace(normalize_reward=True)
    with pytest.raises(ConfigError, match="normalize_reward"):
        make_population(scaled, {"gamma": [0.9, 0.99]})
    with pytest.raises(ConfigError, match="normalize_reward"):
        stack_configs([scaled, scaled.replace(gamma=0.9)])
    # allowed: one gamma with scaling, or varying gamma without it
    assert make_population(scaled, {"lr": [1e-3, 3e-4]}).configs.gamma.shape == (2,)
    assert make_population(SMALL, {"gamma": [0.9, 0.99]}).configs.gamma.shape == (2,)
    assert stack_configs([scaled, scaled.replace(lr=1e-4)]).gamma.shape == (2,)
