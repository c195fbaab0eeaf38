"""Rollout: what is recorded, collected with one ``lax.scan`` over env steps.

Time is the leading axis: a :class:`Transition` holds ``[H, E, ...]`` arrays for
``H`` steps of ``E`` environments. The policy acts alone inside the scan; critic
values of every observation and of every true next state are computed afterwards in
ONE batched pass (:func:`critic_values`), which is both faster and exactly what GAE
needs for truncation bootstrapping.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class Transition(NamedTuple):
    obs: jax.Array  # [H, E, *obs_shape] observation the action was chosen from
    action: jax.Array  # [H, E] int or [H, E, D] float (unclipped sample)
    log_prob: jax.Array  # [H, E] behaviour policy's log-prob of action ("old")
    reward: jax.Array  # [H, E]
    terminated: jax.Array  # [H, E] bool: true terminal state, bootstrap from 0
    truncated: jax.Array  # [H, E] bool: time limit, bootstrap from V(next_obs)
    next_obs: jax.Array  # [H, E, *obs_shape] true next state (gymnax final_observation)
    info: dict  # [H, E] per-step extras from env wrappers (e.g. episode statistics)


def collect(
    key: jax.Array,
    policy: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]],
    env_step: Callable,
    env_state: Any,
    obs: jax.Array,
    num_steps: int,
    unroll: int = 1,
) -> tuple[tuple[Any, jax.Array], Transition]:
    """Step ``E`` envs for ``num_steps`` with ``policy(key, obs [E, ...]) -> (action, log_prob)``.

    ``env_step(key, state, action)`` is a :class:`~purejaxppo.envs.VecEnv` step (auto-reset,
    ``info["final_observation"]``). Returns ``((env_state, last_obs), Transition [H, E])``.
    """

    def one_step(carry, step_key):
        env_state, obs = carry
        k_act, k_env = jax.random.split(step_key)
        action, log_prob = policy(k_act, obs)
        next_obs, env_state, reward, term, trunc, info = env_step(k_env, env_state, action)
        final_obs = info.pop("final_observation")
        tr = Transition(obs, action, log_prob, reward, term, trunc, final_obs, info)
        return (env_state, next_obs), tr

    return jax.lax.scan(one_step, (env_state, obs), jax.random.split(key, num_steps), unroll=unroll)


def critic_values(critic: Callable[[jax.Array], jax.Array], traj: Transition) -> tuple[jax.Array, jax.Array]:
    """``(V(s_t), V(s'_t))``, each ``[H, E]``, from one critic pass over ``2*H*E`` observations.

    ``s'_t`` is the true next state, so the same array serves ordinary steps, truncated
    steps (pre-reset final observation) and the horizon bootstrap (the last step's next
    state is the rollout's last observation unless that step ended an episode).
    """
    h = traj.obs.shape[0]
    values = critic(jnp.concatenate([traj.obs, traj.next_obs], axis=0))
    return values[:h], values[h:]
