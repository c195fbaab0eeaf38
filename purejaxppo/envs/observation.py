"""Observations that are more than one array: action masks and structured observations.

Most environments observe one float array ``[E, *obs_shape]``. Two other shapes are
carried through the same rollout and update, as pytrees (``lax.scan``, minibatch
slicing and the agent's batching all work leaf by leaf):

* **A masked observation** :class:`MaskedObs` ``(obs, action_mask)``: ``action_mask``
  ``[E, A]`` bool says which of the ``A`` actions are legal in that state (Jumanji's
  ``action_mask``, pgx's ``legal_action_mask``). It travels WITH the observation, so the
  stored transition, the minibatch replay and evaluation all see the mask the action was
  chosen under; the network hands it to the masked categorical
  (:data:`purejaxppo.stages.distributions.MASKED_CATEGORICAL`).
* **An observation with a global state** :class:`CriticObs` ``(obs, global_state)``: the
  actor sees ``obs`` (itself any of these kinds), a centralised critic ``global_state``
  (``EnvSpec.global_state_shape``; JaxMARL envs with ``agent_critic="centralised"``).
* **A structured observation**: a dict or named tuple of arrays (Jumanji's ``grid`` and
  ``step_count``; a dict-observing MuJoCo Playground task). The default network
  flattens every leaf's per-env dims and concatenates them, in pytree order (dict keys
  sorted, named-tuple fields in order), as float32: :func:`flatten`. Pass your own
  torso to :func:`purejaxppo.agents.networks.make_network` to see the structure instead.

The per-env structure is described by a pytree of :class:`jax.ShapeDtypeStruct`
(``EnvSpec.obs_structure``), which tells how many leading dims of a leaf are batch dims.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class CriticObs(NamedTuple):
    """What the actor sees (``obs``: an array, a structure or a :class:`MaskedObs`) and what a
    centralised critic sees instead (``global_state [..., S]``; multi-agent envs, MAPPO)."""

    obs: Any
    global_state: jax.Array


class MaskedObs(NamedTuple):
    obs: Any  # [..., *obs_shape] array, or a structured observation (pytree of arrays)
    action_mask: jax.Array  # [..., A] bool: True where the action is legal


def structure_of(obs_one_env) -> Any:
    """The per-env structure of an observation pytree: ``ShapeDtypeStruct`` leaves."""

    def leaf(x):
        x = x if hasattr(x, "shape") and hasattr(x, "dtype") else jnp.asarray(x)  # arrays, ShapeDtypeStructs
        return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)

    return jax.tree.map(leaf, obs_one_env)


def flat_size(structure) -> int:
    """Length of :func:`flatten`'s output for one env."""
    return sum(math.prod(s.shape) for s in jax.tree.leaves(structure))


def flatten(obs, structure) -> jax.Array:
    """``obs`` (pytree, leaves ``[..., *leaf_shape]``) -> ``[..., flat_size]`` float32.

    Each leaf's trailing per-env dims (from ``structure``) are flattened; the leading dims
    ``[...]`` (batch, time) are the same for every leaf and are kept."""
    leaves, leaf_specs = jax.tree.leaves(obs), jax.tree.leaves(structure)
    if len(leaves) != len(leaf_specs):
        raise ValueError(f"observation has {len(leaves)} arrays, its structure {len(leaf_specs)}")
    parts = []
    for x, s in zip(leaves, leaf_specs):
        batch = x.shape[: x.ndim - len(s.shape)]
        parts.append(x.reshape(batch + (-1,)).astype(jnp.float32))
    return jnp.concatenate(parts, axis=-1)


def zeros(structure, batch: tuple = ()) -> Any:
    """A zero observation of ``structure`` with leading dims ``batch`` (network init)."""
    return jax.tree.map(lambda s: jnp.zeros(tuple(batch) + tuple(s.shape), s.dtype), structure)


def leading_dim(obs) -> int:
    """The env dim ``E`` of an observation pytree ``[E, ...]``."""
    return jax.tree.leaves(obs)[0].shape[0]
