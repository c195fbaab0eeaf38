"""benchmarks/vs_jaxmarl.py's loader of JaxMARL's baseline scripts, on a stand-in script (no JaxMARL
checkout needed): the LAPACK-free initializer swap (their programs deadlocked under ``vmap`` on a
2-core CPU in jaxlib 0.10.2's batched QR; benchmarks/NOTES.md) and the callback switch."""

import importlib.util
import os

import flax.linen as nn
import jax
import numpy as np

STAND_IN = '''
import jax
from flax.linen.initializers import orthogonal

wandb = None  # the real scripts import it; the loader replaces it


def make_train(config):
    def train(rng):
        w = orthogonal(config["GAIN"])(rng, (16, 8))

        def callback(metric):
            wandb.log(metric)

        jax.experimental.io_callback(callback, None, {"w_sum": w.sum()})
        return w

    return train
'''


def _loader():
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "vs_jaxmarl.py")
    spec = importlib.util.spec_from_file_location("vs_jaxmarl_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load_their_make_train


def test_lapack_free_init_swap_removes_the_qr_and_keeps_the_matrices(tmp_path):
    script = tmp_path / "baseline.py"
    script.write_text(STAND_IN)
    load = _loader()
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    lowered = lambda train: jax.jit(jax.vmap(train)).lower(keys).as_text()  # lowering only: never run
    assert "lapack" in lowered(load(str(script))({"GAIN": 2.0}))  # flax's QR: what deadlocked
    swapped = load(str(script), lapack_free_init=True)({"GAIN": 2.0})
    assert "lapack" not in lowered(swapped)
    for k in keys:  # one seed at a time (an unbatched QR): the same matrix up to float rounding
        ref = nn.initializers.orthogonal(2.0)(k, (16, 8))
        np.testing.assert_allclose(jax.jit(swapped)(k), ref, atol=2e-5)


def test_their_callback_kept_or_dropped(tmp_path):
    script = tmp_path / "baseline.py"
    script.write_text(STAND_IN)
    load = _loader()
    got = []
    jax.block_until_ready(load(str(script), log=got.append)({"GAIN": 1.0})(jax.random.PRNGKey(0)))
    assert len(got) == 1 and set(got[0]) == {"w_sum"}
    got.clear()
    jax.block_until_ready(load(str(script), log=got.append, keep_callback=False)({"GAIN": 1.0})(jax.random.PRNGKey(0)))
    assert got == []
