"""Start-up cost: gymnax's render-only plotting imports are deferred, not dropped.

Runs in a fresh interpreter (the test session has long since imported matplotlib)."""

import subprocess
import sys

SCRIPT = r"""
import sys
from purejaxppo.envs.gymnax_suite import import_gymnax, make_gymnax
import_gymnax()
make_gymnax("Pong-misc")
print("after import:", "seaborn" in sys.modules, "matplotlib.pyplot" in sys.modules)
import gymnax.environments.misc.pong as pong
palette = pong.sns.color_palette("cubehelix", 3)   # first use imports the real seaborn
import seaborn
print("palette:", len(palette), seaborn.color_palette is pong.sns.color_palette, "seaborn" in sys.modules)
fig, ax = pong.plt.subplots()
import matplotlib.pyplot as plt
print("pyplot:", type(fig).__name__, plt.subplots is pong.plt.subplots)
"""


def test_gymnax_import_defers_seaborn_and_pyplot_until_used():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={"MPLBACKEND": "Agg", **__import__("os").environ},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "after import: False False" in lines, lines
    assert "palette: 3 True True" in lines, lines
    assert "pyplot: Figure True" in lines, lines
