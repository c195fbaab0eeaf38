"""Population-based training: the exploit/explore stage against hand-computed rankings, and
the PBT program (one compile) against itself chunked, resumed and repeated. Members on 2
devices == 1 device: tests/test_parallel.py (the worker's ``runs`` check)."""

import csv
import json
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import ConfigError, PPOConfig
from purejaxppo.algorithms.pbt import SearchSpace, exploit_explore, explore, parse_search, rank, search_space

SPACE = SearchSpace(("lr", "ent_coef"), (1e-5, 0.0), (1e-2, 0.05), (True, False))


class Toy(NamedTuple):  # a runner-like state: the exploit copies every field but rng
    params: dict
    rng: jax.Array


def toy_population(n):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"w": jax.random.normal(k1, (n, 3, 4)), "b": jax.random.normal(k2, (n, 4))}
    return Toy(params, jax.random.randint(k3, (n, 2), 0, 1000).astype(jnp.uint32))


EXPLOIT = jax.jit(exploit_explore, static_argnums=4)  # one compile for the tests below (16 members)


def reference_groups(scores, finite, q=0.25):
    """Independent reference: losers and winners by a stable NumPy sort of the valid members."""
    valid = [i for i in range(len(scores)) if np.isfinite(scores[i]) and finite[i]]
    order = sorted(valid, key=lambda i: (scores[i], i))
    k = max(1, int(np.floor(len(valid) * q))) if len(valid) >= 2 else 0
    return set(order[:k]) | {i for i in range(len(scores)) if not finite[i]}, set(order[len(order) - k :])


def test_exploit_copies_exactly_and_ranks_by_hand():
    n = 16
    pop = toy_population(n)
    hparams = jnp.stack([jnp.full(n, 1e-3), jnp.full(n, 0.01)], 1) * jnp.arange(1, n + 1)[:, None] / 8
    scores = np.array(
        [3.0, 1.0, np.nan, 1.0, 5.0, 99.0, 2.0, 6.0, 5.0, 3.0, np.nan, 8.0, 9.0, 7.0, 9.0, 3.0], np.float32
    )
    finite = np.ones(n, bool)
    finite[5] = False  # blew up (best score, but never a winner; always replaced)
    # members 2 and 10: no episode in the window (NaN), neither win nor lose
    exp_losers, exp_top = reference_groups(scores, finite)
    assert exp_losers == {1, 3, 6, 5} and exp_top == {12, 14, 11}  # 13 valid -> 3 per group, by hand
    for seed in range(3):
        new, new_h, parents = EXPLOIT(
            jax.random.PRNGKey(seed), pop, hparams, jnp.asarray(scores), SPACE, finite=jnp.asarray(finite)
        )
        parents = np.asarray(parents)
        for i in range(n):
            if i in exp_losers:
                assert parents[i] in exp_top
                for name in ("w", "b"):  # bit for bit
                    np.testing.assert_array_equal(new.params[name][i], pop.params[name][parents[i]])
                h = np.asarray(new_h[i])  # the winner's values, perturbed, inside the ranges
                assert np.all(h >= np.asarray(SPACE.lows, np.float32)) and np.all(
                    h <= np.asarray(SPACE.highs, np.float32)
                )
                assert not np.array_equal(h, np.asarray(hparams[parents[i]]))
            else:
                assert parents[i] == i
                for name in ("w", "b"):
                    np.testing.assert_array_equal(new.params[name][i], pop.params[name][i])
                np.testing.assert_array_equal(new_h[i], hparams[i])
        np.testing.assert_array_equal(new.rng, pop.rng)  # every member keeps its own key


def test_rank_and_no_evidence():
    scores = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0, 9.0, 7.0, 9.0, 3.0], np.float32)
    order = sorted(range(16), key=lambda i: (scores[i], i))  # stable sort (ties by index)
    np.testing.assert_array_equal(rank(jnp.asarray(scores), jnp.ones(16, bool)), np.argsort(order))
    pop = toy_population(16)
    h = jnp.full((16, 2), 1e-3)
    # nobody completed an episode: nothing to rank, nobody copies
    _, h2, parents = EXPLOIT(jax.random.PRNGKey(1), pop, h, jnp.full(16, jnp.nan), SPACE, finite=jnp.ones(16, bool))
    np.testing.assert_array_equal(parents, np.arange(16))
    np.testing.assert_array_equal(h2, h)


def test_explore_stays_in_range_and_perturbs_by_the_factors():
    n = 4000
    h = jnp.stack([jnp.full(n, 1e-2), jnp.full(n, 0.02)], 1)  # lr at its upper bound
    out = np.asarray(explore(jax.random.PRNGKey(3), h, SPACE, resample_prob=0.1))
    lo, hi = np.asarray(SPACE.lows, np.float32), np.asarray(SPACE.highs, np.float32)
    assert np.all(out >= lo) and np.all(out <= hi)
    ent = out[:, 1]
    up, down = np.isclose(ent, 0.025, rtol=1e-6), np.isclose(ent, 0.016, rtol=1e-6)
    assert 0.4 < up.mean() / (up.mean() + down.mean()) < 0.6  # x1.25 and x0.8, even odds
    assert 0.07 < 1 - (up | down).mean() < 0.13  # ~10% resampled
    assert np.mean(out[:, 0] == np.float32(1e-2)) > 0.4  # x1.25 clipped at the top of the range


def test_search_parsing_and_validation():
    assert parse_search(["lr=loguniform:1e-5:1e-2", "ent-coef=uniform:0:0.05"]) == {
        "lr": (1e-5, 1e-2, "loguniform"),
        "ent_coef": (0.0, 0.05, "uniform"),
    }
    base = PPOConfig()
    for bad, msg in (
        (["lr=1e-5:1e-2"], "name=DIST:LOW:HIGH"),
        (["lr=loguniform:0:1e-2"], "low > 0"),
        (["num_envs=uniform:1:8"], "cannot search"),
        (["lr=gauss:1e-5:1e-2"], "unknown"),
        (["lr=uniform:1e-2:1e-5"], "below"),
        (["gamma=uniform:0.5:1.5"], "gamma"),
    ):
        with pytest.raises(ConfigError, match=msg):
            search_space(base, parse_search(bad))


# --- the compiled program ----------------------------------------------------------------------
TINY = PPOConfig(
    num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=1, num_minibatches=1, hidden_sizes=(16,)
)


@pytest.fixture(scope="module")
def program():
    from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings

    space = search_space(TINY, parse_search(["lr=loguniform:1e-4:3e-1", "ent_coef=uniform:0:0.05"]))
    # 8 members, exploit after updates 2 and 4 (the window: the last 2 updates of each interval)
    return PBTProgram(TINY, PBTSettings(space, interval=2, window=2))


def _read(path):
    return open(path).read()


@pytest.fixture(scope="module")
def runs(program, tmp_path_factory):
    from purejaxppo.programs.pbt_run import resume_pbt, train_pbt

    root = tmp_path_factory.mktemp("pbt")
    whole = train_pbt(TINY, program.settings, 8, seed=3, run_dir=str(root / "whole"), program=program, chunk_updates=2)
    again = train_pbt(TINY, program.settings, 8, seed=3, run_dir=str(root / "again"), program=program, chunk_updates=2)
    part = train_pbt(
        TINY, program.settings, 8, seed=3, run_dir=str(root / "part"), program=program, chunk_updates=2, stop_after=4
    )
    resumed = resume_pbt(str(root / "part"), program=program)
    return root, whole, again, part, resumed


def test_one_compile_determinism_and_resume(program, runs):
    root, whole, again, part, resumed = runs
    assert program.traces == 1  # four sessions (whole, again, part, resume): one chunk program
    assert not part.finished and resumed.finished
    lineage = {}
    for name in ("whole", "again", "part"):
        lineage[name] = _read(root / name / "lineage.csv")
        assert _read(root / name / "metrics.csv") == _read(root / "whole" / "metrics.csv"), name  # exact: same chunks
    assert lineage["again"] == lineage["whole"] and lineage["part"] == lineage["whole"]
    for a, b in zip(jax.tree.leaves(resumed.runner_state), jax.tree.leaves(whole.runner_state)):
        np.testing.assert_array_equal(a, b)  # exact: the same chunk program (one trace) on the restored state
    rows = list(csv.DictReader(open(root / "whole" / "lineage.csv")))
    assert {int(r["update"]) for r in rows} == {0, 2, 4}  # never after the last update
    copies = [r for r in rows if r["parent"] != r["member"]]
    assert len(copies) >= 2, "the tiny run must exploit (else the test proves little)"
    for r in copies:  # the copied member keeps the winner's perturbed values, inside the range
        assert 1e-4 <= float(r["lr"]) <= 3e-1 * (1 + 1e-6) and 0 <= float(r["ent_coef"]) <= 0.05 * (1 + 1e-6)
    summary = json.load(open(root / "whole" / "summary.json"))
    fr = np.asarray(summary["final_return_per_seed"])
    assert summary["best_member"] == int(np.nanargmax(fr)) and summary["best_final_return"] == pytest.approx(
        np.nanmax(fr)
    )
    assert summary["best_schedule"][0]["from_update"] == 0 and summary["exploits"] == len(copies)
    assert json.load(open(root / "whole" / "config.json"))["kind"] == "pbt"


def test_loser_holds_the_winner_state_after_the_exploit(program, runs):
    """The exploit inside the compiled program (a chunk ends right after it): losers chosen as
    by hand from the scores, holding the winner's state; a member that blew up is replaced
    instead of stopping the run."""
    from purejaxppo.programs.pbt_program import PBTProgram, PBTSettings
    from purejaxppo.programs.pbt_run import initial_members
    from purejaxppo.run.run_folder import run_inputs

    members = initial_members(program.settings.space, 8, 3)
    keys, configs = run_inputs(TINY, 3, 1, members)
    state = program.init(keys, configs)
    (s2, m2), _ = program.chunk(2, state, configs)  # updates 1, 2, then the exploit
    parents = np.asarray(m2["pbt_parent"])[:, 1].astype(int)
    losers = np.flatnonzero(parents != np.arange(8))
    assert len(losers) == 2 and np.all(np.asarray(m2["pbt_exploit"])[:, 1] == 1)  # floor(8 * 0.25)
    scores = np.asarray(m2["pbt_score"])[:, 1]
    exp_losers, exp_top = reference_groups(scores, np.ones(8, bool))
    assert set(losers) == exp_losers and set(parents[losers]) <= exp_top
    for i in losers:  # the loser now holds the winner's state bit for bit, except its own PRNG key
        take = lambda tree, j: [np.asarray(x[j]) for x in jax.tree.leaves(tree)]
        for a, b in zip(
            take((s2.runner.train, s2.runner.env_state, s2.runner.obs), i),
            take((s2.runner.train, s2.runner.env_state, s2.runner.obs), parents[i]),
        ):
            np.testing.assert_array_equal(a, b)  # exact: a copy
        assert not np.array_equal(s2.runner.rng[i], s2.runner.rng[parents[i]])
        assert not np.array_equal(s2.hparams[i], s2.hparams[parents[i]])  # explored
    # a blown-up member is replaced at the next exploit and the population goes on
    bad = state._replace(
        runner=state.runner._replace(
            train=jax.tree.map(
                lambda x: x.at[5].set(jnp.nan) if jnp.issubdtype(x.dtype, jnp.floating) else x, state.runner.train
            )
        )
    )
    (s_bad, m_bad), finite_bad = program.chunk(2, bad, configs)
    assert np.asarray(m_bad["pbt_non_finite"])[5, 1] == 1 and np.asarray(m_bad["pbt_parent"])[5, 1] != 5
    assert np.all(finite_bad)
    assert program.check_finite(m_bad, np.asarray(finite_bad), 0, str) is None  # no NaN stop
    plain = PBTProgram(TINY, PBTSettings(program.settings.space, interval=0))  # not compiled
    assert plain.check_finite(m_bad, np.zeros(8, bool), 0, str) is not None  # without exploits it stops
    assert program.traces == 1


def test_cli_pbt_errors_and_eval_best_member(runs, capsys):
    from purejaxppo.cli import main

    root, whole, *_ = runs
    for argv, msg in (
        (["--search", "lr=loguniform:1e-5:1e-2"], "add --pbt N"),
        (["--pbt", "4"], "needs at least one --search"),
        (["--pbt", "4", "--search", "lr=1e-5"], "name=DIST:LOW:HIGH"),
        (["--pbt", "4", "--search", "lr=loguniform:1e-5:1e-2", "--sweep", "lr=1e-3,1e-4"], "--sweep cannot"),
        (["--pbt", "4", "--search", "lr=loguniform:1e-5:1e-2", "--pbt-quantile", "0.7"], "quantile"),
    ):
        assert main(["train", "--devices", "1", "--quiet"] + argv) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (argv, err)
    best = json.load(open(root / "whole" / "summary.json"))["best_member"]
    assert main(["eval", str(root / "whole"), "--episodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["member"] == best and len(out["per_seed_mean"]) == 1
    assert main(["eval", str(root / "whole"), "--member", "9"]) == 2
    assert "has 8 members" in capsys.readouterr().err
