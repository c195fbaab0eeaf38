"""What the step does differently when its envs are split over devices (data-parallel PPO).

Inside ``shard_map`` (``axis_name`` set) each device steps ``E/D`` of the ``E`` envs; these
functions make its program compute what the single-device one does. With ``axis_name``
None (one device) each is the identity (or the plain call)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.stages import device_rows
from purejaxppo.stages.distributions import Distribution


class DeviceSplit(NamedTuple):
    """``axis_name`` (None: one device) over ``num_devices``; this device steps ``local_envs``
    of the ``global_envs``, rows ``[d*local_envs, (d+1)*local_envs)``."""

    axis_name: Optional[str]
    num_devices: int
    local_envs: int
    global_envs: int


def device_offset(split: DeviceSplit) -> jax.Array:
    """The first global env row of this device."""
    return device_rows.first_row(split.axis_name, split.local_envs)


def sample(split: DeviceSplit, dist: Distribution, key: jax.Array, dist_params):
    """Actions ``[local_envs, ...]`` of ``dist``: with a split, drawn over the GLOBAL batch with
    the shared key and our rows kept (rows are independent, so they are the ones one device
    would draw for these envs)."""
    if split.axis_name is None:
        return dist.sample(key, dist_params)
    pad = lambda x: jax.lax.dynamic_update_slice_in_dim(
        jnp.zeros((split.global_envs,) + x.shape[1:], x.dtype), x, device_offset(split), 0
    )
    action = dist.sample(key, jax.tree.map(pad, dist_params))
    return jax.lax.dynamic_slice_in_dim(action, device_offset(split), split.local_envs, 0)


def gather(split: DeviceSplit, tree, axis: int):
    """Every device gets the global arrays (env axis ``axis``), in single-device env order."""
    return device_rows.gather(tree, split.axis_name, axis)


def my_share(split: DeviceSplit, mb):
    """This device's equal share of a (global) minibatch (leading axis)."""
    return device_rows.mine(mb, split.axis_name, split.num_devices)
