"""PBT combined with the options it used to refuse: several seeds (independent populations),
evaluation during training, a warm start; and the one combination it still refuses
(``--split envs``) with its reason."""

import csv
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.cli import main
from purejaxppo.programs.pbt_program import PBTSettings, exploit_populations
from purejaxppo.programs import kinds
from purejaxppo.programs.pbt_run import train_pbt
from purejaxppo.programs.runs import train_chunked
from purejaxppo.run.run_folder import load_run
from purejaxppo.algorithms.pbt import SearchSpace, exploit_explore, parse_search, search_space

CFG = PPOConfig(
    env_name="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 8, update_epochs=1, num_minibatches=1
)
SETTINGS = PBTSettings(search_space(CFG, parse_search(["lr=loguniform:1e-4:1e-2"])), interval=2)
TINY = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "4",
    "--num-steps",
    "16",
    "--total-timesteps",
    "512",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "1",
    "--chunk",
    "4",
    "--checkpoint-every",
    "1",
    "--quiet",
    "--no-compile-cache",
    "--pbt",
    "4",
    "--search",
    "lr=loguniform:1e-4:1e-2",
    "--pbt-interval",
    "2",
]


def test_exploit_populations_equals_one_exploit_per_population():
    """Reference: the single-population stage run on each population's runs by hand."""
    n, seeds = 8, 3
    space = SearchSpace(("lr",), (1e-5,), (1e-2,), (True,))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
    runners = {"w": jax.random.normal(k1, (n * seeds, 5))}
    hparams = jax.random.uniform(k2, (n * seeds, 1), minval=1e-4, maxval=1e-3)
    scores = jax.random.normal(k3, (n * seeds,))
    finite = jnp.ones((n * seeds,), bool).at[4].set(False)
    key = jax.random.PRNGKey(7)
    got_r, got_h, got_p = exploit_populations(key, runners, hparams, scores, finite, space, seeds, 0.25, 0.1)
    for s in range(seeds):
        runs = np.arange(s, n * seeds, seeds)  # run m*S + s: member m of population s
        ref_r, ref_h, ref_p = exploit_explore(
            jax.random.fold_in(key, s),
            {"w": runners["w"][runs]},
            hparams[runs],
            scores[runs],
            space,
            quantile=0.25,
            resample_prob=0.1,
            finite=finite[runs],
        )
        np.testing.assert_array_equal(np.asarray(got_p)[runs], ref_p)  # same program pieces: exact
        np.testing.assert_array_equal(np.asarray(got_r["w"])[runs], ref_r["w"])
        np.testing.assert_allclose(np.asarray(got_h)[runs], ref_h, rtol=1e-6)  # explore's float math, vmapped
    assert (np.asarray(got_p) != np.arange(n * seeds) // seeds).any()  # some member really copied another


def test_pbt_with_seeds_trains_independent_populations_and_resumes_exactly(tmp_path):
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    assert main(["train", *TINY, "--seeds", "2", "--run-dir", whole]) == 0
    assert main(["train", *TINY, "--seeds", "2", "--run-dir", part, "--stop-after", "4"]) == 0
    assert main(["train", "--resume", part, "--quiet", "--no-compile-cache"]) == 0
    for name in ("metrics.csv", "lineage.csv"):  # exact by construction: the same chunk executables
        assert open(os.path.join(part, name)).read() == open(os.path.join(whole, name)).read(), name
    rows = list(csv.DictReader(open(os.path.join(whole, "lineage.csv"))))
    assert {r["seed"] for r in rows} == {"0", "1"} and {r["member"] for r in rows} == {"0", "1", "2", "3"}
    assert all(0 <= int(r["parent"]) < 4 for r in rows)  # parents are members of the same population
    metrics = list(csv.DictReader(open(os.path.join(whole, "metrics.csv"))))
    assert len(metrics) == 4 * 2 * 8
    # the two populations are different runs (their own seed keys), not copies of one
    loss = {(r["member"], r["seed"]): r["actor_loss"] for r in metrics if r["update"] == "7"}
    assert loss["0", "0"] != loss["0", "1"]


def test_pbt_with_evaluation_during_training_leaves_training_unchanged(tmp_path):
    plain, evald = str(tmp_path / "plain"), str(tmp_path / "eval")
    assert main(["train", *TINY, "--run-dir", plain]) == 0
    assert main(["train", *TINY, "--run-dir", evald, "--eval-every", "4", "--eval-episodes", "2"]) == 0
    a = list(csv.DictReader(open(os.path.join(plain, "metrics.csv"))))
    b = list(csv.DictReader(open(os.path.join(evald, "metrics.csv"))))
    assert len(a) == len(b) == 4 * 8
    for ra, rb in zip(a, b):  # exact by construction: the same chunk executables, evaluation apart
        assert {k: v for k, v in rb.items() if not k.startswith("eval_")} == ra
    evaluated = [r for r in b if r["update"] in ("3", "7")]
    assert all(float(r["eval_episodes"]) >= 1 and np.isfinite(float(r["eval_return"])) for r in evaluated)
    assert all(r["eval_return"] == "nan" for r in b if r["update"] not in ("3", "7"))


def test_pbt_warm_started_from_a_run_starts_every_member_from_its_params(tmp_path):
    src = str(tmp_path / "src")
    train_chunked(CFG, seed=5, run_dir=src, chunk_updates=4, stop_after=4)
    _, _, source, _ = load_run(src)
    run = str(tmp_path / "pbt")
    train_pbt(CFG, SETTINGS, 4, seed=0, run_dir=run, chunk_updates=4, init_from=src, stop_after=0)
    loaded = kinds.load(run)
    runner = loaded.runner
    assert loaded.update == 0 and loaded.record.init_from["update"] == 4
    for got, want in zip(jax.tree.leaves(runner.train.params), jax.tree.leaves(source.train.params)):
        for m in range(4):  # copied leaves: exact
            np.testing.assert_array_equal(np.asarray(got)[m], np.asarray(want)[0])


def test_pbt_refuses_split_envs_with_the_reason(capsys):
    assert main(["train", *TINY, "--split", "envs", "--run-dir", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pbt splits its members over the devices") and "Traceback" not in err
    assert not os.path.exists("unused")


@pytest.mark.parametrize("flag", [["--sweep", "lr=1e-3,1e-4"]])
def test_pbt_refuses_a_sweep_with_the_reason(capsys, flag):
    assert main(["train", *TINY, *flag, "--run-dir", "unused"]) == 2
    assert "--pbt searches its hyperparameters itself" in capsys.readouterr().err
