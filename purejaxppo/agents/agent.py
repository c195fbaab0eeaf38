"""The agent interface: what decides, as pure functions with an explicit carry.

The training step (:mod:`purejaxppo.step.train`) is written once against :class:`Agent` and
never asks which kind of agent it holds. A feed-forward agent's carry is ``()``; the
GRU agent's (:mod:`purejaxppo.agents.recurrent`) is its hidden state ``[E, G]``; a transformer
or S5 agent would be one more module returning an :class:`Agent`.

Conventions (``E`` envs, ``H`` rollout steps, ``N`` minibatch units):

* ``init(key) -> params``
* ``initial_carry(E) -> carry [E, ...]`` (``()`` when the agent has no memory)
* ``act(params, carry [E], obs [E, ...], reset [E]) -> (carry, dist_params [E, ...], record)``:
  ONE env step. ``reset`` is True where the previous step ended an episode (and at the
  very start); a recurrent agent zeroes its carry there before acting. ``record`` is a
  pytree ``[E, ...]`` the rollout stores per step for :attr:`values` (``()`` if nothing).
* ``values(params, traj: Transition [H, E], final_states=True) -> (V(s_t), V(s'_t))``, each
  ``[H, E]``: critic values of every observation and of every TRUE next state (the pre-reset
  ``final_observation``), the targets GAE bootstraps from. With ``final_states=False`` the
  step will not read ``V(s'_t)`` where step ``t`` ended an episode (``bootstrap_truncated=False``
  makes every end terminal), so the agent may skip the final states and return any finite
  value there (e.g. ``V(s_{t+1})``, the next episode's first state).
* ``units(batch: Batch [H, E], carry0 [E], reset [H, E]) -> Batch [N, ...]``: the
  layout whose leading axis is shuffled into minibatches: single transitions
  (``N = H*E``) for a feed-forward agent, whole env sequences (``N = E``, ``[E, H, ...]``)
  for a recurrent one, with what it needs to replay them in ``Batch.context``.
* ``evaluate(params, mb: Batch [N, ...]) -> (dist_params, values)`` in the same layout:
  the forward pass the loss differentiates.
* ``dist``: the :class:`~purejaxppo.stages.distributions.Distribution` of ``dist_params``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from purejaxppo.stages.distributions import Distribution
from purejaxppo.agents.networks import Network
from purejaxppo.stages.rollout import Batch, Transition, critic_values


class Agent(NamedTuple):
    init: Callable[[jax.Array], Any]
    initial_carry: Callable[[int], Any]
    act: Callable[..., tuple]
    values: Callable[[Any, Transition], tuple[jax.Array, jax.Array]]
    units: Callable[[Batch, Any, jax.Array], Batch]
    evaluate: Callable[[Any, Batch], tuple[Any, jax.Array]]
    dist: Distribution


def flatten_time(x: jax.Array) -> jax.Array:
    """``[H, E, ...] -> [H*E, ...]`` (time-major order: unit ``t*E + e``)."""
    return x.reshape((-1,) + x.shape[2:])


def feed_forward(network: Network) -> Agent:
    """A feed-forward :class:`~purejaxppo.agents.networks.Network` as an agent (carry ``()``).

    It acts with the actor alone inside the rollout; the critic values every
    observation and every true next state afterwards in ONE batched pass
    (``2*H*E`` observations; ``H*E + E`` without ``final_states``), and minibatches are
    single transitions."""

    def act(params, carry, obs, reset):
        return carry, network.actor(params, obs), ()

    def values(params, traj: Transition, final_states: bool = True):
        return critic_values(lambda o: network.critic(params, o), traj, final_states)

    def units(batch: Batch, carry0, reset) -> Batch:
        return jax.tree.map(flatten_time, batch)

    def evaluate(params, mb: Batch):
        return network.apply(params, mb.obs)

    return Agent(network.init, lambda n: (), act, values, units, evaluate, network.dist)
