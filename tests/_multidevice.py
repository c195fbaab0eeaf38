"""Run one check of ``tests/_parallel_worker.py`` in a subprocess with 4 forced host devices.

JAX reads ``XLA_FLAGS`` once, when it initialises, so multi-device checks cannot run in the
pytest process; each check prints its measured differences as one ``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(__file__), "_parallel_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_worker(check: str) -> dict:
    env = dict(os.environ)
    # XLA backend optimisation off: these checks compare two programs compiled the same way on
    # tiny configs, so their time is compile time (O0 cuts it by about 35%); what they test is
    # the program's semantics, which optimisation must not change.
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"
    ).strip()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run([sys.executable, WORKER, check], env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"worker {check} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])
