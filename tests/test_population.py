"""A population trains in one compile and each member equals its separate run."""

import jax
import numpy as np
import pytest

from purejaxppo import ConfigError, PPOConfig, make_ppo
from purejaxppo.parallel.runs_axis import make_population, member, parse_sweep, results_table, runs

SMALL = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 4, update_epochs=2, num_minibatches=2)


@pytest.mark.slow
def test_member_equals_separate_run_and_one_compile():
    """Including a gamma sweep with reward scaling: the scaler uses each member's (traced) gamma."""
    base = SMALL.replace(normalize_reward=True)
    pop = make_population(base, {"lr": [1e-4, 1e-3], "clip_eps": [0.1, 0.3], "gamma": [0.9, 0.99]}, num_seeds=2)
    assert len(pop.members) == 8
    ppo = make_ppo(base)
    traces = []

    def counted_train(key, cfg):
        traces.append(1)  # runs once per trace, not per call
        return ppo.train(key, cfg)

    train_pop = jax.jit(jax.vmap(counted_train))
    keys, configs = runs(base, pop.members, num_seeds=2, seed=0)  # R = 8 members x 2 seeds
    assert keys.shape[0] == 16 and configs.lr.shape == (16,)
    state, metrics = train_pop(keys, configs)
    assert len(traces) == 1 and train_pop._cache_size() == 1
    assert metrics["actor_loss"].shape == (16, SMALL.num_updates)
    seed_key = jax.random.split(jax.random.PRNGKey(0), 2)[1]  # seed 1 of a plain --seeds 2 run
    for i in (0, 7):  # (lr 1e-4, clip 0.1, gamma 0.9) and (1e-3, 0.3, 0.99)
        cfg, st = member(pop, i, state)
        for x, y in zip(jax.tree.leaves(st.train.params), jax.tree.leaves(state.train.params)):
            np.testing.assert_array_equal(x, y[2 * i : 2 * i + 2])  # exact: a slice; member i = runs 2i, 2i+1
        # a separate run with the member's plain (Python float) config; run i*S + 1
        single = jax.jit(make_ppo(cfg).train)(seed_key, cfg)[1]
        for k in ("actor_loss", "critic_loss", "approx_kl", "episode_return", "lr"):
            # tolerance: the vmapped population and a separate run (Python-float config) are two programs
            np.testing.assert_allclose(metrics[k][2 * i + 1], single[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # members differ
    assert not np.allclose(metrics["actor_loss"][1], metrics["actor_loss"][15])


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
    rc = main(
        [
            "train",
            "--env",
            "CartPole-v1",
            "--sweep",
            "lr=1e-4,3e-3",
            "--seeds",
            "2",
            "--devices",
            "1",
            "--num-steps",
            "32",
            "--total-timesteps",
            "4096",
            "--run-dir",
            str(out),
            "--quiet",
        ]
    )
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
    from purejaxppo.cli.main import build_parser, config_from_args

    args = build_parser().parse_args(["train", "--env", "Pendulum-v1", "--preset", "--lr", "5e-4"])
    cfg = config_from_args(args)
    assert cfg.gamma == 0.98 and cfg.update_epochs == 10 and cfg.lr == 5e-4  # preset + override
    plain = config_from_args(build_parser().parse_args(["train", "--env", "Pendulum-v1"]))
    assert plain.gamma == 0.99
