"""Spreading independent runs (seeds, population members) over devices.

On a CPU host, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` exposes ``N``
devices that run in parallel threads: splitting seeds over them puts every core to
work with no communication at all, since seeds never interact.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P


def seed_mesh(num_devices: Optional[int] = None, axis: str = "seeds") -> Mesh:
    devices = jax.devices()
    if num_devices is not None:
        if num_devices > len(devices):
            raise ValueError(
                f"asked for {num_devices} devices but JAX sees {len(devices)}; on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before importing jax"
            )
        devices = devices[:num_devices]
    return Mesh(np.array(devices), (axis,))


def seed_parallel_train(train: Callable, num_devices: Optional[int] = None, axis: str = "seeds") -> Callable:
    """``jit(shard_map(vmap(train)))``: the leading axis of every argument (keys, and
    optionally a stacked config) is split over ``num_devices``; it must be a multiple of it."""
    mesh = seed_mesh(num_devices, axis)
    sharded = jax.shard_map(jax.vmap(train), mesh=mesh, in_specs=P(axis), out_specs=P(axis), check_vma=False)
    return jax.jit(sharded)
