"""``init_from`` (``train --init-from RUN_DIR``): which leaves a new run takes from the source
checkpoint (params, optimizer state, observation / reward-scale statistics) and which are its
own, seed and member mapping, and the refusals. No training step is compiled here: source
checkpoints are hand-made from perturbed init states (the full run is in test_driver.py)."""

import json
import os

import jax
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.run.checkpoint import CheckpointError, save_checkpoint
from purejaxppo.cli import main
from purejaxppo.parallel.runs_axis import seed_keys
from purejaxppo.run.warm_start import apply, describe

CFG = PPOConfig(
    num_envs=2,
    num_steps=8,
    total_timesteps=64,
    update_epochs=1,
    num_minibatches=1,
    hidden_sizes=(8,),
    normalize_obs=True,
    normalize_reward=True,
)


@pytest.fixture(scope="module")
def init():
    """``init(seed, runs)``: a fresh runner state ``[runs, ...]`` (<= 3 runs: one compile)."""
    ppo = make_ppo(CFG)
    fn = jax.jit(jax.vmap(lambda k: ppo.init(k, CFG)))
    cache = {}

    def make(seed, runs):
        if seed not in cache:
            cache[seed] = jax.device_get(fn(seed_keys(seed, 3)))
        return jax.device_put(jax.tree.map(lambda x: x[:runs], cache[seed]))

    return make


def _source(init, folder, num_seeds=2, members=None, kind="run"):
    """A checkpoint at update 5 of a hand-made "trained" state: every float leaf shifted by a
    per-run offset (so runs and the fresh state all differ); returns that state."""
    runs = num_seeds * len(members or [None])
    state = jax.device_get(init(0, runs))
    offsets = np.arange(1, runs + 1, dtype=np.float32)
    state = jax.tree.map(
        lambda x: (
            x + offsets.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
            if jax.dtypes.issubdtype(x.dtype, np.floating)
            else x
        ),
        state,
    )
    meta = {"kind": kind, "config": CFG.to_dict(), "seed": 0, "num_seeds": num_seeds, "members": members}
    save_checkpoint(os.path.join(folder, "checkpoints"), 5, state, meta)
    return state


def _carried(s):
    return (s.train, s.env_state.obs_stats, s.reward_scale.return_stats)


def _own(s):
    return (
        s.env_state.env_state,
        s.obs,
        s.update,
        s.carry,
        s.done,
        s.reward_scale.discounted_return,
        jax.random.key_data(s.rng) if jax.dtypes.issubdtype(s.rng.dtype, jax.dtypes.prng_key) else s.rng,
    )


def _equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) > 0
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # exact: leaves copied, not computed


def test_carries_params_optimizer_and_normaliser_state_and_nothing_else(init, tmp_path):
    src = _source(init, str(tmp_path / "src"))
    fresh = init(7, 2)
    new_cfg = CFG.replace(lr=1e-3, total_timesteps=128)  # its own schedule: numbers may differ
    record = describe(str(tmp_path / "src"), None, new_cfg, 2)
    assert record["update"] == 5 and record["checkpoint"].endswith("update_00000005")
    out = jax.device_get(apply(record, fresh, 2))
    _equal(_carried(out), _carried(src))  # seed s from seed s
    _equal(_own(out), _own(jax.device_get(fresh)))
    assert int(np.asarray(src.env_state.obs_stats.count)[0]) != int(np.asarray(fresh.env_state.obs_stats.count)[0])


def test_one_seed_source_starts_every_seed_and_member_k_of_a_sweep(init, tmp_path):
    one = _source(init, str(tmp_path / "one"), num_seeds=1)
    out = jax.device_get(apply(describe(str(tmp_path / "one"), None, CFG, 3), init(1, 3), 3))
    _equal(_carried(out), jax.tree.map(lambda x: np.repeat(x, 3, axis=0), _carried(one)))
    members = [{"lr": 1e-3}, {"lr": 3e-3}, {"lr": 1e-2}]
    sweep = _source(init, str(tmp_path / "sweep"), num_seeds=1, members=members, kind="sweep")
    record = describe(str(tmp_path / "sweep"), 2, CFG, 2)
    out = jax.device_get(apply(record, init(1, 2), 2))
    _equal(_carried(out), jax.tree.map(lambda x: np.repeat(x[2:3], 2, axis=0), _carried(sweep)))


def test_refusals_name_the_problem(init, tmp_path):
    src = str(tmp_path / "src")
    _source(init, src)
    sweep = str(tmp_path / "sweep")
    _source(init, sweep, num_seeds=1, members=[{"lr": 1e-3}, {"lr": 3e-3}], kind="sweep")
    cases = [
        ((src, None, CFG.replace(hidden_sizes=(16,)), 2), r"hidden_sizes: \[8\] there, \[16\] here"),
        ((src, None, CFG.replace(normalize_obs=False, activation="relu"), 2), "activation: 'tanh' there"),
        ((src, None, CFG, 3), "has 2 seeds and this one 3"),
        ((src, 0, CFG, 2), "is a single run"),
        ((sweep, None, CFG, 1), "is a sweep of 2 members; choose the one to start from with --member K"),
        ((sweep, 2, CFG, 1), "has 2 members"),
        ((str(tmp_path / "nothing"), None, CFG, 1), "no such run folder"),
        ((str(tmp_path), None, CFG, 1), "no complete checkpoint"),
    ]
    for args, needle in cases:
        with pytest.raises(CheckpointError, match=needle):
            describe(*args)
    assert describe(src, None, CFG, 2)["seeds"] == "seed s from seed s"  # accepted (a PBT population too)
    # a checkpoint whose leaves do not fit (config.json edited by hand): named by apply, not a trace
    meta_path = os.path.join(src, "checkpoints", "update_00000005", "meta.json")
    meta = json.load(open(meta_path))
    for e in meta["leaves"]:
        e["path"] = e["path"].replace("obs_stats", "obs_moments")
    json.dump(meta, open(meta_path, "w"))
    with pytest.raises(CheckpointError, match=r"\.env_state\.obs_stats\.count is nothing there"):
        apply(describe(src, None, CFG, 2), init(1, 2), 2)


def test_cli_refuses_before_making_the_folder(tmp_path, capsys):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    os.makedirs(os.path.join(src, "checkpoints"))
    base = ["train", "--devices", "1", "--quiet", "--run-dir", dst]
    for argv, needle in [
        (["--init-from", src], "no complete checkpoint"),
        (["--member", "1"], "add --init-from RUN_DIR"),
        (["--init-from", src, "--pbt", "4", "--search", "lr=loguniform:1e-5:1e-2"], "no complete checkpoint"),
    ]:
        assert main(base + argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and needle in err and err.count("\n") == 1, err
        assert not os.path.exists(dst)
    assert main(["train", "--resume", src, "--init-from", src]) == 2
    assert "--init-from" in capsys.readouterr().err
