"""Rollout: what is recorded, collected with one ``lax.scan`` over env steps.

Time is the leading axis: a :class:`Transition` holds ``[H, E, ...]`` arrays for ``H``
steps of ``E`` environments. The policy carries an explicit memory (``carry``; ``()`` for
a feed-forward agent) and learns where episodes ended through ``reset``:
``reset_t = terminated_{t-1} | truncated_{t-1}`` (``reset_0`` is the previous rollout's
last ``done``, True at the very start). Critic values are not computed here: the agent
computes them afterwards (:attr:`purejaxppo.agents.agent.Agent.values`), batched where it can.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class Transition(NamedTuple):
    obs: jax.Array  # [H, E, *obs_shape] observation the action was chosen from (or a pytree of such, e.g. MaskedObs)
    action: jax.Array  # [H, E] int or [H, E, D] float (unclipped sample)
    log_prob: jax.Array  # [H, E] behaviour policy's log-prob of action ("old")
    reward: jax.Array  # [H, E]
    terminated: jax.Array  # [H, E] bool: true terminal state, bootstrap from 0
    truncated: jax.Array  # [H, E] bool: time limit, bootstrap from V(next_obs)
    next_obs: jax.Array  # [H, E, *obs_shape] true next state (gymnax final_observation)
    info: dict  # [H, E] per-step extras from env wrappers (e.g. episode statistics)
    reset: Any = None  # [H, E] bool: the carry was reset before acting at t (= done_{t-1})
    record: Any = ()  # [H, E, ...] what the agent's act() asked to keep (e.g. V(s_t), carry)


class Batch(NamedTuple):
    """Training data for one update. Built ``[H, E]`` by the step; the agent's ``units``
    lays it out with a leading unit axis ``[N, ...]`` that minibatches split."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array  # old log-prob (fixed)
    value: jax.Array  # old value (fixed; used by value clipping)
    advantage: jax.Array
    ret: jax.Array  # return target A + V_old
    context: Any = ()  # what the agent's evaluate needs besides obs (GRU: initial carry, resets)


Policy = Callable[[jax.Array, Any, jax.Array, jax.Array], tuple]


def collect(
    key: jax.Array,
    policy: Policy,
    env_step: Callable,
    env_state: Any,
    obs: jax.Array,
    num_steps: int,
    carry: Any = (),
    done: Any = None,
    unroll: int = 1,
) -> tuple[tuple[Any, jax.Array, Any, jax.Array], Transition]:
    """Step ``E`` envs ``num_steps`` times.

    ``policy(key, carry, obs [E, ...], reset [E]) -> (carry, action, log_prob [E], record)``;
    ``env_step(key, state, action)`` is a :class:`~purejaxppo.envs.VecEnv` step (auto-reset,
    ``info["final_observation"]``). ``done [E]`` (default all True: a fresh start) says
    where the previous step ended an episode. Each step key is split into
    ``(action key, env key)``. Returns ``((env_state, obs, carry, done), Transition [H, E])``.
    """
    if done is None:
        done = jnp.ones(jax.tree.leaves(obs)[:1][0].shape[:1], bool)

    def one_step(c, step_key):
        env_state, obs, carry, done = c
        k_act, k_env = jax.random.split(step_key)
        carry, action, log_prob, record = policy(k_act, carry, obs, done)
        next_obs, env_state, reward, term, trunc, info = env_step(k_env, env_state, action)
        final_obs = info.pop("final_observation")
        tr = Transition(obs, action, log_prob, reward, term, trunc, final_obs, info, done, record)
        return (env_state, next_obs, carry, jnp.logical_or(term, trunc)), tr

    return jax.lax.scan(one_step, (env_state, obs, carry, done), jax.random.split(key, num_steps), unroll=unroll)


def stateless(policy: Callable[[jax.Array, jax.Array], tuple]) -> Policy:
    """Adapt ``policy(key, obs) -> (action, log_prob)`` to :func:`collect`'s contract."""

    def adapted(key, carry, obs, reset):
        action, log_prob = policy(key, obs)
        return carry, action, log_prob, ()

    return adapted


def critic_values(
    critic: Callable[[jax.Array], jax.Array], traj: Transition, final_states: bool = True
) -> tuple[jax.Array, jax.Array]:
    """``(V(s_t), V(s'_t))``, each ``[H, E]``, from one batched critic pass.

    ``s'_t`` is the true next state, so with ``final_states`` (the default) one pass over the
    ``2*H*E`` observations and true next states serves ordinary steps, truncated steps
    (pre-reset final observation) and the horizon bootstrap (the last step's next state is the
    rollout's last observation unless that step ended an episode).

    ``final_states=False`` is for a caller that never reads ``V(s'_t)`` where step ``t`` ended
    an episode (every end terminal: ``bootstrap_truncated=False``). Then ``s'_t = s_{t+1}``
    wherever it is read, and one pass over ``H*E + E`` observations (the stored ones and the
    last step's next states) gives ``V(s'_t) = V(s_{t+1})``; where step ``t`` ended an
    episode that is the value of the next episode's first state: finite, and not the final
    state's.
    """
    h = traj.reward.shape[0]
    seconds = traj.next_obs if final_states else jax.tree.map(lambda n: n[-1:], traj.next_obs)
    both = jax.tree.map(lambda o, n: jnp.concatenate([o, n], axis=0), traj.obs, seconds)  # obs may be a pytree
    values = critic(both)
    return values[:h], (values[h:] if final_states else values[1:])
