"""How many devices a CLI run uses, and making them exist (host CPU devices) before JAX starts.

``--split seeds``: the runs (members x seeds) are sharded over the devices, so the count must
divide the number of runs; ``--split envs``: every run's envs are split over them (the PPO
builder checks that the count divides ``num_envs``). ``auto`` picks the largest count that
fits, up to the CPU cores (or the count already forced in ``XLA_FLAGS``).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

from purejaxppo.config import ConfigError


def set_devices(n: int) -> None:
    """Expose ``n`` host CPU devices: must happen before JAX creates its CPU client (first use,
    not import). A count already forced in ``XLA_FLAGS`` wins."""
    if n > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n}"
        ).strip()


def started_devices() -> Optional[int]:
    """Number of devices if JAX's backend is already up in this process (a CLI ``main()``
    called from Python), else None: XLA_FLAGS can no longer change it then."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            import jax

            return jax.device_count()
    except Exception:
        return None
    return None


def choose_devices(spec: str, divides: int, what: str, check: bool = True) -> int:
    """``--devices`` (``auto``, ``all`` or a number) -> a device count. ``auto``: the largest divisor
    of ``divides`` available; ``all``: every device available; a number must divide it (when ``check``; ``what`` names it in the
    message) and be available."""
    started = started_devices()
    forced = re.search(r"xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    cores = os.cpu_count() or 1
    available = started or (int(forced.group(1)) if forced else cores)
    if spec == "auto":
        return max(d for d in range(1, min(cores, available) + 1) if divides % d == 0)
    if spec == "all":  # every device there is (or will be): it must divide the work like a number
        spec = str(available)
    try:
        devices = int(spec)
    except ValueError:
        raise ConfigError(f"--devices={spec!r} must be 'auto', 'all' or an integer") from None
    if devices < 1 or (check and divides % devices):
        raise ConfigError(f"--devices={devices} must be >= 1 and divide {what}")
    if started is not None and devices > started:
        raise ConfigError(
            f"--devices={devices}: JAX already started with {started} device(s) in this process; "
            "use --devices 1 or run from the command line"
        )
    if forced and devices > int(forced.group(1)):
        raise ConfigError(
            f"--devices={devices}: XLA_FLAGS forces {forced.group(1)} host device(s); use --devices "
            f"{forced.group(1)} (or fewer), or unset xla_force_host_platform_device_count in XLA_FLAGS"
        )
    return devices


def count_devices(spec: str, divides: int, what: str, group) -> int:
    """``--devices`` as a count: on one process its devices (set before JAX starts); across
    processes (``group.many``) every process's devices together
    (:func:`~purejaxppo.cli.distributed.global_devices`)."""
    from purejaxppo.cli.distributed import global_devices

    if group.many:
        return global_devices(spec, divides, what)
    devices = choose_devices(spec, divides, what)
    set_devices(devices)
    return devices
