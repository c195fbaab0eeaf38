"""The recurrent agent: a GRU actor-critic whose hidden state is the agent's carry.

Reached through ``make_ppo(PPOConfig(network="gru", ...))`` (the ``"gru"`` entry of
:mod:`purejaxppo.agents.registry`): :func:`gru_agent` returns an
:class:`~purejaxppo.agents.agent.Agent`, and the one training step (:mod:`purejaxppo.step.train`)
runs it like any other agent. This module holds only what is recurrent: the network,
the carry and its reset rule, the next-state values, and the sequence minibatches.

It takes the observations and actions the feed-forward network takes, prepared the same
way (:func:`~purejaxppo.agents.networks.observation_adapter`): a structured observation is
flattened before the torso, a :class:`~purejaxppo.envs.observation.MaskedObs`'s mask goes
around the network to the masked categorical (``dist_params = (logits, mask)``), and
MultiDiscrete actions get one logit group per component.

Reset semantics (``done = terminated | truncated``)
--------------------------------------------------
* The carry used to act at step ``t`` is reset to zeros where the previous step ended an
  episode: ``reset_t = done_{t-1}`` (``reset_0`` is the previous rollout's last ``done``;
  ``True`` at the very start). The network applies the reset itself
  (``step(params, carry, obs, reset)`` zeroes ``carry`` where ``reset``) so the rollout and
  the training pass share one code path.
* The step keeps, per env, the INITIAL carry (before the rollout's first reset) and
  the rollout stores the reset flags ``[H, E]``. The training pass re-runs each env's whole sequence from its
  stored initial carry with the same resets, so at the first epoch it reproduces the
  behaviour log-probs and values exactly (ratio 1).
* Minibatches split across environments (whole ``H``-step sequences), never across
  time: the agent's ``units`` lay the batch out env-major ``[E, H, ...]`` with
  ``Batch.context = SequenceContext(initial carry [E, G], reset [E, H])``.

A centralised critic (MAPPO: observations are
:class:`~purejaxppo.envs.observation.CriticObs`) reads the global state through a feed-forward
MLP of its own (``central_critic``), not the GRU; the actor keeps the GRU.

Values of the true next state (truncation bootstrapping)
--------------------------------------------------------
``V(s'_t)`` is the critic's value of the pre-reset ``final_observation`` computed with
``carry_out_t``, the carry AFTER processing step ``t`` and BEFORE any reset: one more GRU
step from ``carry_out_t`` on ``s'_t``. That is the value the agent would have assigned had
the episode continued. On an ordinary step (``done_t`` false) ``s'_t = o_{t+1}`` and the
carry at ``t+1`` is ``carry_out_t`` (no reset), so ``V(s'_t)`` is exactly ``V_{t+1}``; at
the horizon end it is the value the next rollout will compute; after a termination it
is multiplied by 0 by GAE. It is computed after the rollout in ONE batched single-step
pass over the ``[H, E]`` stored ``carry_out`` and final observations.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.agents.agent import Agent
from purejaxppo.stages.distributions import Distribution
from purejaxppo.agents.gru import fuse, gru_cell, gru_sequence, input_projection
from purejaxppo.agents.networks import (
    ACTIVATION_FNS,
    MLPTorso,
    distribution_for,
    dummy_observation,
    observation_adapter,
    orthogonal,
)
from purejaxppo.stages.rollout import Batch, Transition


# --- network ------------------------------------------------------------------------------
class GRUActorCritic(nn.Module):
    """obs -> MLP torso -> GRU cell -> (actor hidden -> policy head, critic hidden -> value head).

    ``__call__(carry [..., G], obs [..., *obs_shape], reset [...])`` is ONE time step:
    the carry is zeroed where ``reset`` before the cell runs. Returns
    ``(new_carry [..., G], dist_params, value [...])``. The three parts are also methods
    (``embed``, ``cell``, ``heads``; ``sequence`` is the cell over time) so that a sequence
    runs only the recurrent part inside its time loop and the feed-forward parts batched
    over all ``T*B`` steps (:func:`make_recurrent_network`). The cell is flax's
    ``GRUCell`` (its parameters), computed fused by :mod:`purejaxppo.agents.gru`.
    """

    num_actions: int
    discrete: bool
    gru_size: int = 128
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    central_critic: bool = False  # the value reads a global state (MAPPO) through its own MLP, not the GRU

    def setup(self):
        # layer names match train.learning_rates: critic_torso/value_head get critic_lr if set
        # (the torso and GRU are shared, so they follow the actor's rate)
        dense = lambda n, scale: nn.Dense(n, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)
        width = self.hidden_sizes[-1]
        self.torso = MLPTorso(self.hidden_sizes, self.activation, self.obs_ndim)
        # recurrent kernel: our LAPACK-free orthogonal init (flax's default deadlocks under vmap on CPU)
        self.gru = nn.GRUCell(self.gru_size, recurrent_kernel_init=orthogonal())
        self.actor_torso, self.policy_head = dense(width, math.sqrt(2)), dense(self.num_actions, 0.01)
        self.critic_torso, self.value_head = dense(width, math.sqrt(2)), dense(1, 1.0)
        if self.central_critic:  # feed-forward: a global state (SMAX's world_state) is the whole state
            self.state_torso = MLPTorso(self.hidden_sizes, self.activation, 1)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def embed(self, obs):
        return self.torso(obs)

    def cell(self, carry, x, reset):
        carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
        if self.is_initializing():  # creates flax GRUCell's parameters (names, shapes, inits)
            return self.gru(carry, x)
        w = fuse(self.gru.variables["params"])  # the same cell, fused (purejaxppo.agents.gru)
        carry = gru_cell(w, carry, input_projection(w, x))
        return carry, carry

    def sequence(self, carry, x, reset):
        """The cell over time: ``x [T, B, H]`` (embedded), ``reset [T, B]`` -> ``(final carry
        [B, G], outputs [T, B, G])``; one input matmul for all steps and its own backward
        pass (:func:`purejaxppo.agents.gru.gru_sequence`)."""
        w = fuse(self.gru.variables["params"])
        ys = gru_sequence(w, carry, input_projection(w, x), reset)
        return ys[-1], ys

    def heads(self, y, state=None):
        """``state``: a centralised critic's global state (then the value does not read ``y``)."""
        act = ACTIVATION_FNS[self.activation]
        out = self.policy_head(act(self.actor_torso(y)))
        critic_in = y if state is None else self.state_torso(state)
        value = self.value_head(act(self.critic_torso(critic_in)))[..., 0]
        if self.discrete:
            return out, value
        return (out, jnp.broadcast_to(self.log_std, out.shape)), value

    def __call__(self, carry, obs, reset, state=None):
        carry, y = self.cell(carry, self.embed(obs), reset)
        dist_params, value = self.heads(y, state)
        return carry, dist_params, value


class RecurrentNetwork(NamedTuple):
    """Pure functions over explicit params (``G = gru_size``):

    * ``init(key) -> params``
    * ``initial_carry(batch) -> zeros [batch, G]``
    * ``step(params, carry [B, G], obs [B, ...], reset [B]) -> (carry, dist_params, value [B])``:
      one time step (reset applied to the incoming carry first).
    * ``apply(params, carry [B, G], obs [T, B, ...], reset [T, B]) -> (final carry [B, G],
      dist_params [T, B, ...], value [T, B])``: ``step`` over time, with the torso and heads
      batched over all ``T*B`` steps and only the GRU's recurrent matmul inside the time loop.
    * ``dist``: categorical or diagonal Gaussian, by the env spec.
    """

    init: Callable[[jax.Array], Any]
    initial_carry: Callable[[int], jax.Array]
    step: Callable[..., tuple]
    apply: Callable[..., tuple]
    dist: Distribution
    gru_size: int


def make_recurrent_network(
    spec, gru_size: int = 128, hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh"
) -> RecurrentNetwork:
    """The GRU actor-critic for an :class:`~purejaxppo.envs.EnvSpec`. ``obs`` may be a
    structured observation (flattened) or a ``MaskedObs`` (its mask joins the logits)."""
    central = bool(spec.global_state_shape)
    module = GRUActorCritic(
        num_actions=spec.num_actions,
        discrete=spec.discrete,
        gru_size=int(gru_size),
        hidden_sizes=tuple(hidden_sizes),
        activation=activation,
        obs_ndim=len(spec.obs_shape),
        central_critic=central,
    )
    prepare = observation_adapter(spec)  # obs -> (array the torso sees, action mask or None)
    state_of = (lambda obs: obs.global_state) if central else (lambda obs: None)  # a CriticObs's global state
    with_mask = lambda dist_params, mask: dist_params if mask is None else (dist_params, mask)

    def initial_carry(batch: int) -> jax.Array:
        return jnp.zeros((batch, module.gru_size), jnp.float32)

    def init(key):
        dummy = dummy_observation(spec)
        return module.init(key, initial_carry(1), prepare(dummy)[0], jnp.zeros((1,), bool), state_of(dummy))

    def step(params, carry, obs, reset):
        x, mask = prepare(obs)
        carry, dist_params, value = module.apply(params, carry, x, reset, state_of(obs))
        return carry, with_mask(dist_params, mask), value

    def apply(params, carry, obs, reset):
        x, mask = prepare(obs)
        x = module.apply(params, x, method=GRUActorCritic.embed)  # [T, B, H], batched
        carry, ys = module.apply(params, carry, x, reset, method=GRUActorCritic.sequence)
        dist_params, values = module.apply(params, ys, state_of(obs), method=GRUActorCritic.heads)
        return carry, with_mask(dist_params, mask), values

    return RecurrentNetwork(init, initial_carry, step, apply, distribution_for(spec), int(gru_size))


# --- the agent --------------------------------------------------------------------------------
class SequenceContext(NamedTuple):
    """What replaying a minibatch of env sequences needs besides the observations."""

    init_carry: jax.Array  # [N, G] carry before the rollout's first step (reset[:, 0] applies to it)
    reset: jax.Array  # [N, H] bool


def next_values(network: RecurrentNetwork, params, traj: Transition) -> jax.Array:
    """``V(s'_t)`` ``[H, E]``: one GRU step from ``carry_out_t`` (no reset) on the true next state."""
    _, carry_out = traj.record
    h, e = traj.reward.shape
    flat = lambda x: x.reshape((h * e,) + x.shape[2:])
    _, _, v = network.step(params, flat(carry_out), jax.tree.map(flat, traj.next_obs), jnp.zeros((h * e,), bool))
    return v.reshape(h, e)


def sequence_outputs(network: RecurrentNetwork, params, mb: Batch):
    """Replay a minibatch of whole sequences ``[B, H]``: ``(dist_params, values)``, each ``[B, H, ...]``."""
    time_major = lambda x: jnp.swapaxes(x, 0, 1)
    _, dist_params, values = network.apply(
        params, mb.context.init_carry, jax.tree.map(time_major, mb.obs), time_major(mb.context.reset)
    )
    return jax.tree.map(time_major, dist_params), time_major(values)


def recurrent_agent(network: RecurrentNetwork) -> Agent:
    """A :class:`RecurrentNetwork` as an :class:`~purejaxppo.agents.agent.Agent`.

    ``act`` runs one GRU step (reset applied first) and records ``(V(s_t), carry_out_t)``;
    ``values`` reads ``V(s_t)`` from that record and computes ``V(s'_t)`` with
    :func:`next_values` (without ``final_states``, for the last step only: elsewhere
    ``V(s'_t) = V(s_{t+1})``, recorded); ``units`` makes env-major sequences; ``evaluate``
    replays them."""

    def act(params, carry, obs, reset):
        carry, dist_params, value = network.step(params, carry, obs, reset)
        return carry, dist_params, (value, carry)

    def values(params, traj: Transition, final_states: bool = True):
        value = traj.record[0]
        if final_states:
            return value, next_values(network, params, traj)
        last = next_values(network, params, jax.tree.map(lambda x: x[-1:], traj))  # [1, E]
        return value, jnp.concatenate([value[1:], last], axis=0)

    def units(batch: Batch, carry0, reset) -> Batch:
        env_major = lambda x: jnp.swapaxes(x, 0, 1)
        return jax.tree.map(env_major, batch)._replace(context=SequenceContext(carry0, env_major(reset)))

    return Agent(
        network.init,
        network.initial_carry,
        act,
        values,
        units,
        lambda params, mb: sequence_outputs(network, params, mb),
        network.dist,
    )


def gru_agent(spec, gru_size: int = 128, hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh") -> Agent:
    """The GRU agent for an :class:`~purejaxppo.envs.EnvSpec` (``PPOConfig(network="gru")``)."""
    return recurrent_agent(make_recurrent_network(spec, gru_size, hidden_sizes, activation))
