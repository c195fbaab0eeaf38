"""The on-disk executable cache (purejaxppo/executable_cache.py): a repeated run loads its
compiled init and chunks instead of tracing them, and gets the same numbers as a run that
compiled; anything that changes the program changes the key; a bad entry is compiled again."""

import glob
import os

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import PPOConfig
from purejaxppo.run import executable_cache
from purejaxppo.run.loop import train_chunked
from purejaxppo.programs.program import Program

# 7 updates in chunks of 4: init, a chunk of 4 and a remainder chunk of 3 = three programs
CFG = PPOConfig(env_name="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 7, num_minibatches=2,
                update_epochs=2)


def _run(config, folder):
    prog = Program(config, executables=folder)
    return prog, train_chunked(config, program=prog, chunk_updates=4, num_seeds=2)


def _same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                      for x, y in zip(la, lb))


def test_a_repeated_run_loads_every_program_and_gives_the_same_numbers(tmp_path):
    folder = str(tmp_path / "exe")
    first, a = _run(CFG, folder)  # compiles all three and saves them
    assert (first.executables.hits, first.executables.misses) == (0, 3)
    files = sorted(glob.glob(os.path.join(folder, "*.jaxexe")), key=os.path.getsize)
    assert len(files) == 3
    second, b = _run(CFG, folder)  # traces nothing: loads all three
    assert (second.executables.hits, second.executables.misses) == (3, 0)
    assert _same(a.metrics, b.metrics) and len(a.metrics) > 5
    assert _same(a.runner_state, b.runner_state)
    # a corrupt entry (a truncated write, a foreign file) is compiled again, same numbers, and rewritten
    with open(files[0], "wb") as f:
        f.write(b"not an executable")
    third, c = _run(CFG, folder)
    assert (third.executables.hits, third.executables.misses) == (2, 1)
    assert _same(a.metrics, c.metrics)
    assert os.path.getsize(files[0]) > 100_000


def test_the_key_changes_with_everything_that_changes_the_program(tmp_path):
    args = (jnp.zeros((2, 2), jnp.uint32),)
    key = lambda cfg, role=("chunk", 4, False), a=args, **kw: executable_cache.for_program(
        str(tmp_path), cfg, num_devices=kw.get("devices", 1), split=kw.get("split", "seeds")).key(role, a)
    base = key(CFG)
    assert key(CFG) == base  # deterministic
    changed = [key(CFG.replace(lr=3e-4)), key(CFG.replace(gamma=0.98)), key(CFG.replace(num_envs=8)),
               key(CFG.replace(network="gru")), key(CFG, role=("chunk", 3, False)), key(CFG, role=("init", False)),
               key(CFG, a=(jnp.zeros((4, 2), jnp.uint32),)), key(CFG, a=(jnp.zeros((2, 2), jnp.int32),)),
               key(CFG, devices=2), key(CFG, split="envs")]
    assert len(set(changed + [base])) == len(changed) + 1


def test_cli_second_identical_run_loads_its_programs_and_writes_the_same_metrics(tmp_path):
    from purejaxppo.cli import main

    folder = os.path.join(os.environ["PUREJAXPPO_CACHE_DIR"], "executables")  # the test session's cache
    argv = ["train", "--env", "CartPole-v1", "--hidden-sizes", "7", "--num-envs", "4", "--num-steps", "8",
            "--total-timesteps", "320", "--devices", "1", "--quiet"]
    before = set(glob.glob(os.path.join(folder, "*.jaxexe")))
    assert main(argv + ["--run-dir", str(tmp_path / "a")]) == 0
    new = {p: os.stat(p).st_mtime_ns for p in set(glob.glob(os.path.join(folder, "*.jaxexe"))) - before}
    assert len(new) == 2  # init and the 10-update chunk
    assert main(argv + ["--run-dir", str(tmp_path / "b")]) == 0
    assert set(glob.glob(os.path.join(folder, "*.jaxexe"))) - before == set(new)  # nothing compiled anew ...
    assert all(os.stat(p).st_mtime_ns == t for p, t in new.items())  # ... or rewritten: both were loaded
    csv = [open(tmp_path / r / "metrics.csv").read() for r in "ab"]
    assert csv[0] == csv[1] and len(csv[0].splitlines()) == 11
    assert main(argv + ["--run-dir", str(tmp_path / "c"), "--no-compile-cache"]) == 0  # the opt-out: same numbers
    assert open(tmp_path / "c" / "metrics.csv").read() == csv[0]
