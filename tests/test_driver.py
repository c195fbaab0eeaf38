"""The chunk loop: exact resume after Ctrl-C / SIGTERM / a lost checkpoint, non-finite
detection, metrics files, sinks, sweeps on the same runs axis.

Two references, two kinds of equality:

* exact by construction: an uninterrupted run through the SAME compiled chunks (same chunk
  length, same Program): a resumed run applies the same executables to the restored state,
  so it must equal that run to the last bit, on any CPU;
* to float tolerance: ONE ``jax.jit(jax.vmap(train))`` call (no loop). That is another
  program: XLA fuses and orders its float arithmetic as it likes, and what it does differs with
  the CPU's instruction set (``--xla_cpu_max_isa``) and the optimisation level, so the two
  agree to a few float32 rounding steps accumulated over the run, not bitwise
  (``tests/_equality.py``: the tolerances and how they were measured).
"""

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
from purejaxppo.run.checkpoint import list_checkpoints, restore_checkpoint
from purejaxppo.run.guards import NonFiniteError, TrainingInterrupted
from purejaxppo.programs.runs import resume_run, train_chunked
from purejaxppo.parallel.runs_axis import seed_keys
from purejaxppo.programs.program import Program
from purejaxppo.run.run_folder import read_metrics, run_inputs
from purejaxppo.run.sinks import WandbLogger

from _equality import METRIC_TOL, assert_close_metrics, assert_close_state, assert_same_state

CFG = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 8, update_epochs=2, num_minibatches=2)
SEED, SEEDS = 3, 2


TRACES = {}  # (chunk length, stacked configs) -> times its function was traced (a Python side effect: once per trace)


def _counting(ppo):
    def run(runner, cfg=CFG, num_updates=None):
        key = (num_updates, cfg is not CFG)
        TRACES[key] = TRACES.get(key, 0) + 1
        return ppo.run(runner, cfg, num_updates)

    return ppo._replace(run=run)


COMPILES = []  # XLA compiles, as JAX reports them
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(secs) if event == "/jax/core/compile/backend_compile_duration" else None
)


@pytest.fixture(scope="module")
def program():
    """Shared compiled functions: each chunk length compiles once for the whole module."""
    return Program(CFG, ppo=_counting(make_ppo(CFG)))


@pytest.fixture(scope="module")
def ppo(program):
    return program.ppo


@pytest.fixture(scope="module")
def reference(ppo):
    """The other program: one jitted, vmapped ``train`` call (all 8 updates)."""
    state, metrics = jax.jit(jax.vmap(ppo.train))(jax.random.split(jax.random.PRNGKey(SEED), SEEDS))
    return jax.device_get(state), {k: np.asarray(v) for k, v in metrics.items()}


@pytest.fixture(scope="module")
def chunked(program):
    """Uninterrupted reference through the same executables: all 8 updates in chunks of 2
    (the chunk length of every interrupted run below), no run folder."""
    res = train_chunked(CFG, seed=SEED, num_seeds=SEEDS, chunk_updates=2, program=program)
    return jax.device_get(res.runner_state), res.metrics


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


def test_interrupt_then_resume_equals_uninterrupted(program, chunked, reference, tmp_path):
    ref_state, ref_metrics = chunked
    run = str(tmp_path / "run")
    with pytest.raises(TrainingInterrupted) as e:  # a KeyboardInterrupt carrying the checkpoint
        train_chunked(
            CFG,
            seed=SEED,
            num_seeds=SEEDS,
            run_dir=run,
            chunk_updates=2,
            checkpoint_every=100,
            on_chunk=_stop_at(4),
            program=program,
        )
    assert isinstance(e.value, KeyboardInterrupt)
    assert e.value.updates_done == 4 and e.value.checkpoint.endswith("update_00000004")
    assert [u for u, _ in list_checkpoints(os.path.join(run, "checkpoints"))] == [4]
    res = resume_run(run, program=program)
    assert res.finished and res.updates_done == 8
    assert_same_state(ref_state, res.runner_state)  # exact: same chunks; params, opt state, env states, rng, counter
    for k, v in ref_metrics.items():
        np.testing.assert_array_equal(res.metrics[k], v, err_msg=k)  # exact: same chunks
    _assert_csv_matches(run, ref_metrics)  # exact: float32 through the CSV and back
    assert_close_state(reference[0], res.runner_state)  # tolerance: one train call is another program
    assert_close_metrics(res.metrics, reference[1])  # tolerance: one train call is another program
    info = json.load(open(os.path.join(run, "config.json")))
    assert info["config"]["num_envs"] == 4 and "jax" in info["versions"] and info["resumes"][0]["from_update"] == 4


def test_sigterm_saves_and_lost_checkpoint_rows_are_rewritten(program, chunked, reference, tmp_path):
    """SIGTERM at update 6 saves a checkpoint; we then delete it, as if the process had been
    killed before saving: resuming from update 4 must drop the CSV rows of updates 4-5."""
    ref_state, ref_metrics = chunked
    run = str(tmp_path / "run")

    def on_chunk(info):
        if info["updates"] == 6:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as e:
        train_chunked(
            CFG,
            seed=SEED,
            num_seeds=SEEDS,
            run_dir=run,
            chunk_updates=2,
            checkpoint_every=2,
            on_chunk=on_chunk,
            program=program,
        )
    assert e.value.reason == "SIGTERM" and e.value.updates_done == 6
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    ckpts = list_checkpoints(os.path.join(run, "checkpoints"))
    assert [u for u, _ in ckpts] == [4, 6]  # keep=2
    shutil.rmtree(ckpts[-1][1])
    assert read_metrics(run, SEEDS)["actor_loss"].shape == (SEEDS, 6)  # rows beyond the checkpoint exist
    res = resume_run(run, program=program)
    assert_same_state(ref_state, res.runner_state)  # exact: same chunks
    _assert_csv_matches(run, ref_metrics)  # exact: same chunks
    assert_close_state(reference[0], res.runner_state)  # tolerance: one train call is another program


def test_stop_after_then_resume_and_finished_run_summary(program, chunked, reference, tmp_path):
    ref_state, ref_metrics = chunked
    run = str(tmp_path / "run")
    part = train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=2, stop_after=4, program=program)
    assert not part.finished and not os.path.exists(os.path.join(run, "summary.json"))
    compiles = len(COMPILES)
    res = resume_run(run, program=program)
    assert_same_state(ref_state.train.params, res.runner_state.train.params)  # exact: same chunks
    assert_close_state(reference[0].train.params, res.runner_state.train.params)  # tolerance: another program
    # the restored state has the fresh state's types (no weak leaves) and placement (uncommitted):
    # the resumed chunks reuse the one compiled program (a weak fresh `time` vs a strong restored
    # one traced it again; committed restored arrays compiled it again)
    assert TRACES[2, False] == 1 and len(COMPILES) == compiles and program.compile(2, res.runner_state) == 0.0
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
    from purejaxppo.step.train import make_env

    venv = _nan_reward_env(make_env(CFG), after_steps=3 * CFG.num_steps)  # 4th update gets NaN rewards
    ppo = make_ppo(CFG, venv=venv)
    run = str(tmp_path / "run")
    with pytest.raises(NonFiniteError) as e:
        train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=run, chunk_updates=2, checkpoint_every=100, ppo=ppo)
    msg = str(e.value)
    assert "non-finite" in msg and "at update 3 of metrics.csv" in msg and "update_00000002" in msg, msg
    assert e.value.updates_done == 2 and e.value.checkpoint.endswith("update_00000002")
    assert any(m in msg for m in ("actor_loss", "critic_loss", "approx_kl", "grad_norm", "entropy")), msg
    ckpts = list_checkpoints(os.path.join(run, "checkpoints"))
    assert [u for u, _ in ckpts] == [2]
    # the kept checkpoint is the (finite) state after 2 updates
    template = jax.eval_shape(jax.vmap(lambda k: ppo.init(k, CFG)), seed_keys(SEED, SEEDS))
    restored, meta = restore_checkpoint(ckpts[0][1], template)
    np.testing.assert_array_equal(restored.update, [2, 2])  # exact: an integer counter
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(restored.train))


def test_loggers_receive_every_update(program, chunked, reference, tmp_path):
    ref_metrics = chunked[1]
    seen = []

    class Logger:
        closed = False

        def write(self, metrics, first_update):
            seen.append((first_update, {k: np.array(v) for k, v in metrics.items()}))

        def close(self):
            Logger.closed = True

    train_chunked(CFG, seed=SEED, num_seeds=SEEDS, chunk_updates=2, program=program, loggers=[Logger()])
    assert [f for f, _ in seen] == [0, 2, 4, 6] and Logger.closed
    got = np.concatenate([m["critic_loss"] for _, m in seen], axis=1)
    np.testing.assert_array_equal(got, ref_metrics["critic_loss"])  # exact: the same chunks' own numbers
    assert_close_metrics(
        {"critic_loss": got}, {"critic_loss": reference[1]["critic_loss"]}
    )  # tolerance: another program


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
    logged.clear()  # a sweep: one curve per member (runs m*S + s), means over its seeds
    w = WandbLogger(str(tmp_path), batch_size=128, config={}, num_members=2)
    w.write({"x": np.array([[1.0], [3.0], [10.0], [np.nan]])}, first_update=0)
    assert logged == [(128, {"member0/x": 2.0, "member1/x": 10.0})]


MEMBERS = [{"lr": 1e-3, "clip_eps": 0.2}, {"lr": 3e-3, "clip_eps": 0.1}]


@pytest.mark.slow
def test_sweep_stopped_and_resumed_equals_uninterrupted_and_one_call(program, tmp_path):
    """A sweep is R = M*S runs on the same loop: run m*S + s = member m, seed key s. Stopped
    at update 4 and resumed, it equals the uninterrupted sweep through the same chunks bit for
    bit, and ONE jitted vmapped train call over those runs to float tolerance."""
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(SEED), SEEDS), (len(MEMBERS), 1))
    cfgs = [CFG.replace(**m) for m in MEMBERS for _ in range(SEEDS)]
    stacked = jax.tree.map(lambda *xs: jnp.asarray(xs, jnp.float32), *cfgs)
    one_state, one_metrics = jax.device_get(jax.jit(jax.vmap(program.ppo.train))(keys, stacked))
    whole = train_chunked(CFG, seed=SEED, num_seeds=SEEDS, members=MEMBERS, chunk_updates=2, program=program)
    ref_state, ref_metrics = jax.device_get(whole.runner_state), whole.metrics
    run = str(tmp_path / "sweep")
    part = train_chunked(
        CFG, seed=SEED, num_seeds=SEEDS, members=MEMBERS, run_dir=run, chunk_updates=2, stop_after=4, program=program
    )
    assert not part.finished and part.metrics["actor_loss"].shape == (4, 4)
    res = resume_run(run, program=program)
    assert res.finished and res.members == MEMBERS
    assert_same_state(ref_state, res.runner_state)  # exact: same chunks
    back = read_metrics(run)
    for k, v in ref_metrics.items():
        np.testing.assert_array_equal(res.metrics[k], v, err_msg=k)  # exact: same chunks
        np.testing.assert_array_equal(back[k].astype(v.dtype), v, err_msg=k)  # exact: float32 through the CSV
    assert_close_state(one_state, res.runner_state)  # tolerance: one train call is another program
    assert_close_metrics(res.metrics, one_metrics)  # tolerance: one train call is another program
    with open(os.path.join(run, "metrics.csv")) as f:
        rows = list(csv.reader(f))
    assert rows[0][:3] == ["member", "seed", "update"] and len(rows) == 1 + 4 * CFG.num_updates
    assert len({tuple(r[:3]) for r in rows[1:]}) == 4 * CFG.num_updates  # no duplicated rows after the resume
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert np.asarray(summary["final_return_per_member"]).shape == (2, SEEDS)
    # sensitivity: the members really differ, by far more than the tolerance
    assert not np.allclose(ref_metrics["actor_loss"][0], ref_metrics["actor_loss"][2], **METRIC_TOL)
    with pytest.raises(AssertionError):
        assert_close_state(one_state.train.params, jax.tree.map(lambda x: x[::-1], res.runner_state.train.params))


def test_init_from_starts_a_sweep_from_the_source_state_with_its_own_schedule(program, tmp_path):
    """``init_from``: a new run (here a sweep of MEMBERS, seed key s from source seed s) starts
    from the source's final params and optimizer state, with fresh envs and its own schedule.
    Reference: the fresh state with the source checkpoint's ``train`` put in by hand, then the
    same compiled chunks (shared with the tests above: no new compile)."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    source = train_chunked(CFG, seed=SEED, num_seeds=SEEDS, run_dir=src, chunk_updates=2, stop_after=2, program=program)
    new = train_chunked(
        CFG,
        seed=SEED + 1,
        num_seeds=SEEDS,
        members=MEMBERS,
        run_dir=dst,
        chunk_updates=2,
        stop_after=2,
        program=program,
        init_from=src,
    )
    keys, configs = run_inputs(CFG, SEED + 1, SEEDS, MEMBERS)
    fresh = program.init(keys, configs)
    ckpt = os.path.join(src, "checkpoints", "update_00000002")
    saved, _ = restore_checkpoint(ckpt, program.init(seed_keys(SEED, SEEDS)))
    assert_same_state(source.runner_state.train, saved.train)  # exact: the checkpoint of the source's final state
    ref = fresh._replace(train=jax.tree.map(lambda x: x[np.array([0, 1, 0, 1])], saved.train))
    assert not np.array_equal(jax.tree.leaves(ref.train.params)[0], jax.tree.leaves(fresh.train.params)[0])
    (ref, ref_metrics), _ = program.chunk(2, ref, configs)
    assert_same_state(ref, new.runner_state)  # exact: same chunk; bit for bit, every leaf (update counter 2: from 0)
    for k, v in ref_metrics.items():
        np.testing.assert_array_equal(new.metrics[k], np.asarray(v), err_msg=k)  # exact: same chunk
    np.testing.assert_allclose(new.metrics["lr"][:, 0], [1e-3, 1e-3, 3e-3, 3e-3], rtol=1e-6)  # own lr, from update 0
    record = json.load(open(os.path.join(dst, "config.json")))["init_from"]
    assert record["checkpoint"] == ckpt and record["update"] == 2 and record["member"] is None
    assert TRACES[2, True] == 1  # the carried state has the fresh one's types: the sweep's chunk is reused
    # a resume continues from the new run's own checkpoint, not from the source again
    res = resume_run(dst, program=program, stop_after=4)
    (ref, _), _ = program.chunk(2, ref, configs)
    assert_same_state(ref, res.runner_state)  # exact: same chunk


def test_sweep_non_finite_member_stops_the_sweep_naming_it(program, tmp_path):
    run = str(tmp_path / "sweep")
    members = [{"lr": 2.5e-4, "clip_eps": 0.2}, {"lr": 1e30, "clip_eps": 0.2}]  # member 1 diverges at once
    with pytest.raises(NonFiniteError) as e:
        train_chunked(CFG, seed=SEED, num_seeds=SEEDS, members=members, run_dir=run, chunk_updates=2, program=program)
    msg = str(e.value)
    assert "member 1 (lr=1e+30, clip_eps=0.2), seed 0" in msg and "at update 0 of metrics.csv" in msg, msg
    assert e.value.updates_done == 0 and e.value.checkpoint.endswith("update_00000000")
    back = read_metrics(run)  # the chunk's rows are written; member 0 is fine
    assert np.isfinite(back["actor_loss"][:SEEDS]).all() and not np.isfinite(back["critic_loss"][SEEDS:]).all()


def test_program_split_envs_builds_one_env_split_agent_and_refuses_unknown_split(monkeypatch):
    import purejaxppo.parallel.sharding as sharding
    from purejaxppo.config import ConfigError

    built = []
    monkeypatch.setattr(sharding, "split_envs", lambda config, n, **kw: built.append(n) or make_ppo(config))
    prog = Program(CFG, num_devices=2, split="envs")  # builds functions only: nothing compiles yet
    assert built == [2] and prog.shard == 1 and prog.num_devices == 2  # runs vmapped on top, not sharded
    assert Program(CFG, num_devices=2).shard == 2 and built == [2]
    with pytest.raises(ConfigError, match="split"):
        Program(CFG, split="members")
    with pytest.raises(ConfigError, match="another config"):
        train_chunked(CFG.replace(lr=1e-3), program=prog)


def test_read_and_truncate_metrics_of_a_sweep_csv(tmp_path):
    """A sweep's metrics.csv (member, seed, update, ...) reads back as runs m*S + s; a resume's
    truncation keeps the rows before the checkpoint in both layouts."""
    from purejaxppo.run.run_folder import truncate_metrics

    path = tmp_path / "metrics.csv"
    rows = [f"{m},{s},{u},{100 * m + 10 * s + u}" for m in range(2) for s in range(3) for u in range(4)]
    path.write_text("\n".join(["member,seed,update,x"] + rows) + "\n")
    x = read_metrics(str(path))["x"]
    assert x.shape == (6, 4) and x[4, 2] == 112 and x[2, 3] == 23  # run 4 = member 1 seed 1; run 2 = member 0 seed 2
    truncate_metrics(str(path), 2)
    lines = path.read_text().splitlines()
    assert lines[0] == "member,seed,update,x" and len(lines) == 1 + 6 * 2
    np.testing.assert_array_equal(read_metrics(str(path))["x"], x[:, :2])
    single = tmp_path / "single.csv"
    single.write_text("seed,update,x\n0,0,1\n1,0,2\n0,1,3\n1,1,4\n")
    truncate_metrics(str(single), 1)
    np.testing.assert_array_equal(read_metrics(str(single))["x"], [[1.0], [2.0]])
