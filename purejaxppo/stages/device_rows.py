"""Rows of a batch split over a named device axis: this device's share, and all of them.

Inside ``shard_map`` (``axis_name`` set) a batch's leading axis is split over ``num_devices``
devices in order: device ``d`` holds rows ``[d*n, (d+1)*n)``. :func:`mine` takes that share of
a global batch, :func:`gather` rebuilds the global batch from the shares, :func:`first_row`
says where this device's rows start. With ``axis_name`` None (one device) each is the identity.
:func:`device_mesh` is the 1-D mesh such an axis is named on.

Why here: the stages already reduce over a device axis (``update.update_epochs``'s ``pmean``,
``normalize.update_stats``'s moments), and this layer is the lowest that every user may import:
the control step (``step/``), the programs (``programs/``, PBT's population) and token-level
PPO (``lm/``, which sits on ``config`` and ``stages`` only).
"""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh

from purejaxppo.config.ppo_config import ConfigError


def device_mesh(num_devices: Optional[int] = None, axis: str = "runs") -> Mesh:
    """A 1-D mesh (axis ``axis``) over the first ``num_devices`` devices (all of them if None)."""
    devices = jax.devices()
    if num_devices is not None:
        if num_devices < 1:
            raise ConfigError(f"num_devices={num_devices} must be >= 1")
        if num_devices > len(devices):
            raise ConfigError(
                f"asked for {num_devices} devices but JAX sees {len(devices)}; on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before importing jax"
            )
        devices = devices[:num_devices]
    return Mesh(np.array(devices), (axis,))


def first_row(axis_name: str, rows: int) -> jax.Array:
    """This device's first global row when each device holds ``rows`` rows."""
    return jax.lax.axis_index(axis_name) * rows


def mine(tree, axis_name: Optional[str], num_devices: int):
    """This device's equal share of every leaf's leading axis (a global ``[N, ...]`` leaf ->
    ``[N / num_devices, ...]``, rows ``[d*N/D, (d+1)*N/D)``)."""
    if axis_name is None:
        return tree

    def take(x):
        n = x.shape[0] // num_devices
        return jax.lax.dynamic_slice_in_dim(x, first_row(axis_name, n), n, 0)

    return jax.tree.map(take, tree)


def gather(tree, axis_name: Optional[str], axis: int = 0):
    """Every device's shares of every leaf concatenated along ``axis`` in device order (the
    global arrays, in single-device row order)."""
    if axis_name is None:
        return tree
    return jax.tree.map(lambda x: jax.lax.all_gather(x, axis_name, axis=axis, tiled=True), tree)
