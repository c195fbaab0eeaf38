"""The on-disk executable cache (purejaxppo/run/executable_cache.py): a repeated run loads its
compiled init and chunks instead of tracing them, and gets the same numbers as a run that
compiled; anything that changes the program changes the key; a bad entry is compiled again."""

import glob
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.run import executable_cache
from purejaxppo.programs.runs import train_chunked
from purejaxppo.programs.program import Program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# 7 updates in chunks of 4: init, a chunk of 4 and a remainder chunk of 3 = three programs
CFG = PPOConfig(
    env_name="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 7, num_minibatches=2, update_epochs=2
)


def _run(config, folder):
    prog = Program(config, executables=folder)
    return prog, train_chunked(config, program=prog, chunk_updates=4, num_seeds=2)


def _same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(la, lb)
    )


@pytest.mark.slow
def test_a_repeated_run_loads_every_program_and_gives_the_same_numbers(tmp_path):
    folder = str(tmp_path / "exe")
    first, a = _run(CFG, folder)  # compiles all three and saves them
    assert (first.executables.hits, first.executables.misses) == (0, 3)
    files = sorted(glob.glob(os.path.join(folder, "*.jaxexe")), key=os.path.getsize)
    assert len(files) == 3
    second, b = _run(CFG, folder)  # traces nothing: loads all three
    assert (second.executables.hits, second.executables.misses) == (3, 0)
    assert _same(a.metrics, b.metrics) and len(a.metrics) > 5  # exact: the loaded executables are the saved ones
    assert _same(a.runner_state, b.runner_state)  # exact: the loaded executables are the saved ones
    # a corrupt entry (a truncated write, a foreign file) is compiled again, same numbers, and rewritten
    with open(files[0], "wb") as f:
        f.write(b"not an executable")
    third, c = _run(CFG, folder)
    assert (third.executables.hits, third.executables.misses) == (2, 1)
    assert _same(a.metrics, c.metrics)  # exact: the same program compiled again (XLA compiles deterministically)
    assert os.path.getsize(files[0]) > 100_000


def test_the_key_changes_with_everything_that_changes_the_program(tmp_path, monkeypatch):
    args = (jnp.zeros((2, 2), jnp.uint32),)
    key = lambda cfg, role=("chunk", 4, False), a=args, **kw: executable_cache.for_program(
        str(tmp_path), cfg, num_devices=kw.get("devices", 1), split=kw.get("split", "seeds")
    ).key(role, a)
    base = key(CFG)
    assert key(CFG) == base  # deterministic
    changed = [
        key(CFG.replace(lr=3e-4)),
        key(CFG.replace(gamma=0.98)),
        key(CFG.replace(num_envs=8)),
        key(CFG.replace(network="gru")),
        key(CFG, role=("chunk", 3, False)),
        key(CFG, role=("init", False)),
        key(CFG, a=(jnp.zeros((4, 2), jnp.uint32),)),
        key(CFG, a=(jnp.zeros((2, 2), jnp.int32),)),
        key(CFG, devices=2),
        key(CFG, split="envs"),
    ]
    monkeypatch.setenv("XLA_FLAGS", (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX2").strip())
    changed.append(key(CFG))  # code generation capped at another instruction set
    monkeypatch.undo()  # the session's flags again
    monkeypatch.setattr(executable_cache, "cpu_identity", lambda: "another CPU")
    changed.append(key(CFG))  # the same flags on another CPU
    monkeypatch.undo()
    assert key(CFG) == base
    assert len(set(changed + [base])) == len(changed) + 1


@pytest.mark.slow
def test_cli_second_identical_run_loads_its_programs_and_writes_the_same_metrics(tmp_path):
    # the CLI in subprocesses with a cache folder of this test's own: the session's folder is
    # shared with the other xdist worker, whose programs would land in it meanwhile
    cache = tmp_path / "cache"
    env = dict(
        os.environ, PUREJAXPPO_CACHE_DIR=str(cache), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    folder = str(cache / "executables")
    argv = [
        "train",
        "--env",
        "CartPole-v1",
        "--hidden-sizes",
        "7",
        "--num-envs",
        "4",
        "--num-steps",
        "8",
        "--total-timesteps",
        "320",
        "--devices",
        "1",
        "--quiet",
    ]

    def main(args):
        proc = subprocess.run(
            [sys.executable, "-m", "purejaxppo", *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return 0

    assert main(argv + ["--run-dir", str(tmp_path / "a")]) == 0
    new = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(folder, "*.jaxexe"))}
    assert len(new) == 2  # init and the 10-update chunk
    assert main(argv + ["--run-dir", str(tmp_path / "b")]) == 0
    assert set(glob.glob(os.path.join(folder, "*.jaxexe"))) == set(new)  # nothing compiled anew ...
    assert all(os.stat(p).st_mtime_ns == t for p, t in new.items())  # ... or rewritten: both were loaded
    csv = [open(tmp_path / r / "metrics.csv").read() for r in "ab"]
    assert csv[0] == csv[1] and len(csv[0].splitlines()) == 11  # exact: loaded vs compiled, the same executables
    assert main(argv + ["--run-dir", str(tmp_path / "c"), "--no-compile-cache"]) == 0  # the opt-out: same numbers
    assert open(tmp_path / "c" / "metrics.csv").read() == csv[0]  # exact: the same program compiled in-process


def test_another_cpu_compiles_anew_and_the_same_cpu_loads(tmp_path, monkeypatch):
    """A cache folder shared by machines with different CPUs (a network home folder): JAX calls
    every x86 device "cpu", so the key holds the CPU itself, and an executable compiled for one
    CPU's instruction set is never loaded on another."""
    folder = str(tmp_path / "exe")
    fn, args = jax.jit(lambda x: jnp.sin(x) * 2.0), (jnp.arange(4.0),)

    def lookup():
        cache = executable_cache.for_program(folder, CFG)
        np.testing.assert_allclose(
            cache.get(("chunk", 1, False), fn, args)(*args), np.sin(np.arange(4.0)) * 2.0, rtol=1e-6
        )
        return cache.hits, cache.misses

    assert lookup() == (0, 1)  # compiled and saved
    assert lookup() == (1, 0)  # the same CPU loads it
    monkeypatch.setattr(executable_cache, "cpu_identity", lambda: "another model, other instruction-set flags")
    assert lookup() == (0, 1)  # another CPU compiles its own ...
    assert len(glob.glob(os.path.join(folder, "*.jaxexe"))) == 2  # ... beside the first CPU's
    assert lookup() == (1, 0)
    monkeypatch.undo()
    assert lookup() == (1, 0)  # the first CPU still finds its own


def test_cpu_identity_reads_model_and_features_of_the_first_processor():
    block = "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\nflags\t\t: {flags}\n\n"
    avx2 = block.format(n=0, flags="fpu sse4_2 avx avx2") + block.format(n=1, flags="fpu sse4_2 avx avx2")
    parsed = executable_cache._cpuinfo_identity(avx2)
    assert parsed == "GenuineIntel|Xeon X|||avx avx2 fpu sse4_2"
    assert executable_cache._cpuinfo_identity(block.format(n=0, flags="avx2 avx sse4_2 fpu")) == parsed  # order
    assert executable_cache._cpuinfo_identity(block.format(n=0, flags="fpu sse4_2 avx avx2 avx512f")) != parsed
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert executable_cache._cpuinfo_identity(arm) == "||0x41|0xd0c|asimd fp sve"
    assert executable_cache._cpuinfo_identity("") == ""  # then cpu_identity falls back to platform.processor()
    ident = executable_cache.cpu_identity()
    assert len(ident) == 16 and ident == executable_cache.cpu_identity()


def test_editing_a_stage_in_a_copied_package_compiles_anew_and_changes_the_numbers(tmp_path):
    # a researcher's edit of a stage outside run/: the key must see it (it once hashed run/ alone
    # and served the stale program). The package is copied so the edit touches nothing shared.
    import shutil

    shutil.copytree(
        os.path.join(ROOT, "purejaxppo"), tmp_path / "src" / "purejaxppo", ignore=shutil.ignore_patterns("__pycache__")
    )
    cache = tmp_path / "cache"
    env = dict(os.environ, PUREJAXPPO_CACHE_DIR=str(cache), PYTHONPATH=str(tmp_path / "src"))
    argv = [
        sys.executable,
        "-m",
        "purejaxppo",
        "train",
        "--env",
        "CartPole-v1",
        "--hidden-sizes",
        "7",
        "--num-envs",
        "4",
        "--num-steps",
        "8",
        "--total-timesteps",
        "96",
        "--devices",
        "1",
        "--quiet",
    ]

    def run(name):
        proc = subprocess.run(
            argv + ["--run-dir", str(tmp_path / name)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return open(tmp_path / name / "metrics.csv").read()

    first = run("r1")
    saved = set(glob.glob(str(cache / "executables" / "*.jaxexe")))
    assert saved  # the first run's programs were saved
    losses = tmp_path / "src" / "purejaxppo" / "stages" / "losses.py"
    text = losses.read_text()
    assert "    return total, metrics\n" in text
    losses.write_text(text.replace("    return total, metrics\n", "    return 0.0 * total, metrics\n"))
    second = run("r2")
    assert set(glob.glob(str(cache / "executables" / "*.jaxexe"))) > saved  # compiled anew ...
    assert second != first  # ... and the edit shows: no gradient, other numbers


def test_an_agent_registered_outside_the_package_is_keyed_by_its_source(tmp_path):
    import importlib.util

    from purejaxppo.agents.registry import register_agent, unregister_agent

    def load(text, name):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    body = (
        "from purejaxppo.agents.agent import feed_forward\nfrom purejaxppo.agents.networks import make_network\n"
        "def build(config, spec):\n    return feed_forward(make_network(spec))  # {}\n"
    )
    args = (jnp.zeros((2, 2), jnp.uint32),)
    keys = []
    for i in range(2):
        mod = load(body.format(i), f"my_agent_{i}")
        register_agent("outside_agent", mod.build, replace=True)
        try:
            keys.append(
                executable_cache.for_program(str(tmp_path), CFG.replace(network="outside_agent")).key("r", args)
            )
            # source that cannot be read (a function made at run time): not cached at all
            exec_ns = {}
            exec("def build(config, spec):\n    return None\n", exec_ns)
            register_agent("outside_agent", exec_ns["build"], replace=True)
            assert executable_cache.for_program(str(tmp_path), CFG.replace(network="outside_agent")) is None
        finally:
            unregister_agent("outside_agent")
    assert keys[0] != keys[1]  # an edit of the user's agent module changes the key
