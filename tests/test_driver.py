"""Chunked driver: exact resume after Ctrl-C / SIGTERM / a lost checkpoint, non-finite
detection, metrics files, loggers. References are single ``train`` calls (no driver)."""

import csv
import json
import os
import shutil
import signal
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.checkpoint import list_checkpoints, restore_checkpoint
from purejaxppo.driver import (NonFiniteError, TrainingInterrupted, WandbLogger, read_metrics, resume_run,
                               seed_keys, train_chunked)

CFG = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 8, update_epochs=2, num_minibatches=2)
SEED, SEEDS = 3, 2


@pytest.fixture(scope="module")
def ppo():
    return make_ppo(CFG)


@pytest.fixture(scope="module")
def reference(ppo):
    """Uninterrupted reference: one jitted, vmapped ``train`` call (all 8 updates)."""
    state, metrics = jax.jit(jax.vmap(ppo.train))(seed_keys(SEED, SEEDS))
    return jax.device_get(state), {k: np.asarray(v) for k, v in metrics.items()}


def _assert_same_state(a, b):
    la, lb = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)
    assert len(la) == len(lb)
    for (path, x), y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


def _assert_csv_matches(run_dir, metrics):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.reader(f))[1:]
    keys = [(int(r[0]), int(r[1])) for r in rows]
    assert len(keys) == len(set(keys)) == SEEDS * CFG.num_updates  # no duplicated or missing rows
    back = read_metrics(run_dir, SEEDS)
    for k, v in metrics.items():  # 9 significant digits: float32 values come back exactly
        np.testing.assert_array_equal(back[k].astype(v.dtype), v, err_msg=k)


def _stop_at(update, exc=KeyboardInterrupt):
    def on_chunk(info):
        if info["updates"] == update:
            raise exc()
    return on_chunk


def test_interrupt_then_resume_equals_uninterrupted(ppo, reference, tmp_path):
    ref_state, ref_metrics = reference
    run = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt) as e:
        train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=2, checkpoint_every=100,
                      on_chunk=_stop_at(4), ppo=ppo)
    assert e.value.updates_done == 4 and e.value.checkpoint.endswith("update_00000004")
    assert [u for u, _ in list_checkpoints(os.path.join(run, "checkpoints"))] == [4]
    res = resume_run(run, ppo=ppo)
    assert res.finished and res.updates_done == 8
    _assert_same_state(ref_state, res.runner_state)  # params, opt state, env states, rng, counter
    for k, v in ref_metrics.items():
        np.testing.assert_array_equal(res.metrics[k], v, err_msg=k)
    _assert_csv_matches(run, ref_metrics)
    info = json.load(open(os.path.join(run, "config.json")))
    assert info["config"]["num_envs"] == 4 and "jax" in info["versions"] and info["resumes"][0]["from_update"] == 4


def test_sigterm_saves_and_lost_checkpoint_rows_are_rewritten(ppo, reference, tmp_path):
    """SIGTERM at update 6 saves a checkpoint; we then delete it, as if the process had been
    killed before saving: resuming from update 4 must drop the CSV rows of updates 4-5."""
    ref_state, ref_metrics = reference
    run = str(tmp_path / "run")

    def on_chunk(info):
        if info["updates"] == 6:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted):
        train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=2, checkpoint_every=2,
                      on_chunk=on_chunk, ppo=ppo)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    ckpts = list_checkpoints(os.path.join(run, "checkpoints"))
    assert [u for u, _ in ckpts] == [4, 6]  # keep=2
    shutil.rmtree(ckpts[-1][1])
    assert read_metrics(run, SEEDS)["actor_loss"].shape == (SEEDS, 6)  # rows beyond the checkpoint exist
    res = resume_run(run, ppo=ppo)
    _assert_same_state(ref_state, res.runner_state)
    _assert_csv_matches(run, ref_metrics)


def test_stop_after_then_resume_and_finished_run_summary(ppo, reference, tmp_path):
    ref_state, ref_metrics = reference
    run = str(tmp_path / "run")
    part = train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=4, stop_after=4, ppo=ppo)
    assert not part.finished and not os.path.exists(os.path.join(run, "summary.json"))
    res = resume_run(run, ppo=ppo)
    _assert_same_state(ref_state.train.params, res.runner_state.train.params)
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["checkpoint"].endswith("update_00000008") and len(summary["final_return_per_seed"]) == SEEDS


def _nan_reward_env(venv, after_steps):
    """Rewards become NaN once ``after_steps`` env steps are done (deterministic failure)."""
    def reset(key):
        obs, s = venv.reset(key)
        return obs, (s, jnp.zeros((), jnp.int32))

    def step(key, state, action):
        obs, s, r, term, trunc, info = venv.step(key, state[0], action)
        r = jnp.where(state[1] >= after_steps, jnp.nan, r)
        return obs, (s, state[1] + 1), r, term, trunc, info

    return venv._replace(reset=reset, step=step)


def test_non_finite_stops_with_update_and_metric_and_keeps_finite_checkpoint(tmp_path):
    from purejaxppo.train import make_env

    venv = _nan_reward_env(make_env(CFG), after_steps=3 * CFG.num_steps)  # 4th update gets NaN rewards
    ppo = make_ppo(CFG, venv=venv)
    run = str(tmp_path / "run")
    with pytest.raises(NonFiniteError) as e:
        train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=2, checkpoint_every=100, ppo=ppo)
    msg = str(e.value)
    assert "non-finite" in msg and "at update 4" in msg and "update_00000002" in msg, msg
    assert any(m in msg for m in ("actor_loss", "critic_loss", "approx_kl", "grad_norm", "entropy")), msg
    ckpts = list_checkpoints(os.path.join(run, "checkpoints"))
    assert [u for u, _ in ckpts] == [2]
    # the kept checkpoint is the (finite) state after 2 updates
    template = jax.eval_shape(jax.vmap(lambda k: ppo.init(k, CFG)), seed_keys(SEED, SEEDS))
    restored, meta = restore_checkpoint(ckpts[0][1], template)
    np.testing.assert_array_equal(restored.update, [2, 2])
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(restored.train))


def test_loggers_receive_every_update(ppo, reference, tmp_path):
    ref_metrics = reference[1]
    seen = []

    class Logger:
        closed = False

        def write(self, metrics, first_update):
            seen.append((first_update, {k: np.array(v) for k, v in metrics.items()}))

        def close(self):
            Logger.closed = True

    train_chunked(CFG, seed=SEED, num_seeds=SEEDS, chunk_updates=4, ppo=ppo, loggers=[Logger()])
    assert [f for f, _ in seen] == [0, 4] and Logger.closed
    got = np.concatenate([m["critic_loss"] for _, m in seen], axis=1)
    np.testing.assert_array_equal(got, ref_metrics["critic_loss"])


def test_wandb_logger_logs_seed_means_at_env_steps(monkeypatch, tmp_path):
    logged = []

    class Run:
        def log(self, row, step):
            logged.append((step, row))

        def finish(self):
            logged.append("finished")

    fake = types.SimpleNamespace(init=lambda **kw: Run())
    monkeypatch.setitem(__import__("sys").modules, "wandb", fake)
    w = WandbLogger(str(tmp_path), batch_size=128, config={})
    w.write({"x": np.array([[1.0, 2.0], [3.0, np.nan]])}, first_update=5)
    w.close()
    assert logged == [(6 * 128, {"x": 2.0}), (7 * 128, {"x": 2.0}), "finished"]
