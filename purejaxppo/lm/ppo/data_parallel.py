"""Token-level PPO over several devices: the prompt batch split, the parameters replicated.

:func:`data_parallel` builds the one :func:`~purejaxppo.lm.ppo.token_ppo.make_token_ppo` program with
an axis name and runs it under ``shard_map`` over a 1-D mesh of ``num_devices`` devices. Each
device samples, re-reads and scores ``B / D`` prompts (the expensive part); the rows are
gathered and every device takes its share of each minibatch, and the gradients are averaged
(:mod:`purejaxppo.lm.ppo.token_ppo`, "Devices"). The state (parameters, optimizer, reference,
beta, key) is replicated; the numbers equal one device's to float rounding (two programs,
other reduction orders), not bit for bit.

For models larger than one device, see :func:`fsdp_sharding` (the parameters and optimizer
state split over the same mesh axis, for ``jit`` to partition).
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from purejaxppo.lm.ppo.token_ppo import TokenPPO
from purejaxppo.stages.device_rows import device_mesh

AXIS = "data"


def prompt_mesh(num_devices: int) -> Mesh:
    """A 1-D mesh (axis ``"data"``) over the first ``num_devices`` devices.

    Args:
      num_devices: how many of ``jax.devices()`` (from the first).
    Returns:
      A :class:`jax.sharding.Mesh` of shape ``{"data": num_devices}``.
    """
    return device_mesh(num_devices, AXIS)


def data_parallel(build: Callable[..., TokenPPO], num_devices: int) -> TokenPPO:
    """Token-level PPO run over several devices, each sampling and scoring ``B / D`` rows.

    Args:
      build: ``build(axis_name=, num_devices=) -> TokenPPO`` (e.g. a ``functools.partial`` of
        ``make_token_ppo``).
      num_devices: ``D``; 1 gives ``build``'s one-device program unchanged.
    Returns:
      A :class:`~purejaxppo.lm.ppo.token_ppo.TokenPPO` whose ``iteration``/``run``/``train``/
      ``update`` are ``shard_map``-ped with every input and output replicated; ``init`` is the
      plain one.
    """
    if num_devices == 1:
        return build(axis_name=None, num_devices=1)
    inner = build(axis_name=AXIS, num_devices=num_devices)
    mesh = prompt_mesh(num_devices)

    def over_mesh(fn):
        def call(*args):
            return jax.shard_map(fn, mesh=mesh, in_specs=(P(),) * len(args), out_specs=P(), check_vma=False)(*args)

        return call

    def run(state, n: int, cfg=None):  # n is static: bound, not passed through the mesh
        return over_mesh(lambda s, c: inner.run(s, n, c))(state, cfg)

    return inner._replace(
        iteration=over_mesh(inner.iteration), run=run, train=over_mesh(inner.train), update=over_mesh(inner.update)
    )


def fsdp_sharding(tree, mesh: Mesh, axis: str = AXIS, min_size: int = 1024):
    """A ``NamedSharding`` per leaf of ``tree`` (params or optimizer state): each leaf of at
    least ``min_size`` elements split along its largest dimension divisible by the mesh
    axis, the rest replicated. ``jax.device_put(tree, fsdp_sharding(tree, mesh))`` lays it
    out; ``jit`` then partitions the computation around it (gathering a layer's weights where
    it is used: FSDP's memory, XLA's schedule).

    Args:
      tree: a pytree of arrays (or shape-bearing leaves); mesh: the mesh; axis: its axis to
        split over; min_size: leaves smaller than this stay replicated.
    Returns:
      A pytree of :class:`jax.sharding.NamedSharding` with ``tree``'s structure.
    """
    n = mesh.shape[axis]

    def one(x):
        shape = np.shape(x)
        if int(np.prod(shape, dtype=np.int64)) < min_size:
            return NamedSharding(mesh, P())
        dims = [d for d in np.argsort(shape)[::-1] if shape[d] % n == 0]
        if not dims:
            return NamedSharding(mesh, P())
        spec = [None] * len(shape)
        spec[int(dims[0])] = axis
        return NamedSharding(mesh, P(*spec))

    return jax.tree.map(one, tree)
