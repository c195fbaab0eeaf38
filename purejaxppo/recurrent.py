"""Recurrent PPO: a GRU actor-critic whose hidden state is carried through the rollout.

Reached through ``make_ppo(PPOConfig(network="gru", ...))``, or directly with
:func:`make_recurrent_ppo`; it returns the same :class:`~purejaxppo.train.PPO` tuple
(``init``, ``step``, ``run``, ``train``) and the same metrics as feed-forward PPO.

Reset semantics (``done = terminated | truncated``)
--------------------------------------------------
* The carry used to act at step ``t`` is reset to zeros where the previous step ended an
  episode: ``reset_t = done_{t-1}`` (``reset_0`` is the previous rollout's last ``done``;
  ``True`` at the very start). The network applies the reset itself
  (``step(params, carry, obs, reset)`` zeroes ``carry`` where ``reset``) so the rollout and
  the training pass share one code path.
* The rollout stores, per env, the INITIAL carry (before the rollout's first reset) and
  the reset flags ``[H, E]``. The training pass re-runs each env's whole sequence from its
  stored initial carry with the same resets, so at the first epoch it reproduces the
  behaviour log-probs and values exactly (ratio 1).
* Minibatches split across environments (whole ``H``-step sequences), never across
  time: the data given to :func:`~purejaxppo.update.update_epochs` is env-major
  ``[E, H, ...]``.

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
from typing import Any, Callable, NamedTuple, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from . import losses
from .config import ConfigError, PPOConfig, validate
from .distributions import CATEGORICAL, GAUSSIAN, Distribution
from .gae import gae
from .networks import ACTIVATION_FNS, MLPTorso, orthogonal
from .rollout import Transition
from .train import PPO, episode_metrics, learning_rate, learning_rates, make_env, rollout_key
from .update import TrainState, make_optimizer, update_epochs


# --- network ------------------------------------------------------------------------------
class GRUActorCritic(nn.Module):
    """obs -> MLP torso -> GRU cell -> (actor hidden -> policy head, critic hidden -> value head).

    ``__call__(carry [..., G], obs [..., *obs_shape], reset [...])`` is ONE time step:
    the carry is zeroed where ``reset`` before the cell runs. Returns
    ``(new_carry [..., G], dist_params, value [...])``.
    """

    num_actions: int
    discrete: bool
    gru_size: int = 128
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, carry, obs, reset):
        act = ACTIVATION_FNS[self.activation]
        carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
        x = MLPTorso(self.hidden_sizes, self.activation, self.obs_ndim, name="torso")(obs)
        # recurrent kernel: our LAPACK-free orthogonal init (flax's default deadlocks under vmap on CPU)
        carry, y = nn.GRUCell(self.gru_size, recurrent_kernel_init=orthogonal(), name="gru")(carry, x)
        width = self.hidden_sizes[-1]
        # layer names match train.learning_rates: critic_torso/value_head get critic_lr if set
        # (the torso and GRU are shared, so they follow the actor's rate)
        dense = lambda n, scale, name: nn.Dense(n, kernel_init=orthogonal(scale),
                                                bias_init=nn.initializers.zeros, name=name)
        out = dense(self.num_actions, 0.01, "policy_head")(act(dense(width, math.sqrt(2), "actor_torso")(y)))
        value = dense(1, 1.0, "value_head")(act(dense(width, math.sqrt(2), "critic_torso")(y)))[..., 0]
        if self.discrete:
            return carry, out, value
        log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))
        return carry, (out, jnp.broadcast_to(log_std, out.shape)), value


class RecurrentNetwork(NamedTuple):
    """Pure functions over explicit params (``G = gru_size``):

    * ``init(key) -> params``
    * ``initial_carry(batch) -> zeros [batch, G]``
    * ``step(params, carry [B, G], obs [B, ...], reset [B]) -> (carry, dist_params, value [B])``:
      one time step (reset applied to the incoming carry first).
    * ``apply(params, carry [B, G], obs [T, B, ...], reset [T, B]) -> (final carry [B, G],
      dist_params [T, B, ...], value [T, B])``: ``step`` scanned over time.
    * ``dist``: categorical or diagonal Gaussian, by the env spec.
    """

    init: Callable[[jax.Array], Any]
    initial_carry: Callable[[int], jax.Array]
    step: Callable[..., tuple]
    apply: Callable[..., tuple]
    dist: Distribution
    gru_size: int


def make_recurrent_network(spec, gru_size: int = 128, hidden_sizes: Sequence[int] = (64, 64),
                           activation: str = "tanh") -> RecurrentNetwork:
    """The GRU actor-critic for an :class:`~purejaxppo.envs.EnvSpec`."""
    module = GRUActorCritic(num_actions=spec.num_actions, discrete=spec.discrete, gru_size=int(gru_size),
                            hidden_sizes=tuple(hidden_sizes), activation=activation, obs_ndim=len(spec.obs_shape))

    def initial_carry(batch: int) -> jax.Array:
        return jnp.zeros((batch, module.gru_size), jnp.float32)

    def init(key):
        return module.init(key, initial_carry(1), jnp.zeros((1,) + tuple(spec.obs_shape), jnp.float32),
                           jnp.zeros((1,), bool))

    def step(params, carry, obs, reset):
        return module.apply(params, carry, obs, reset)

    def apply(params, carry, obs, reset):
        def body(c, x):
            c, dist_params, value = step(params, c, *x)
            return c, (dist_params, value)

        carry, (dist_params, values) = jax.lax.scan(body, carry, (obs, reset))
        return carry, dist_params, values

    return RecurrentNetwork(init, initial_carry, step, apply, CATEGORICAL if spec.discrete else GAUSSIAN,
                            int(gru_size))


# --- runner state, rollout, batch -------------------------------------------------------------
class RecurrentRunnerState(NamedTuple):
    train: TrainState  # params, optimizer state
    env_state: Any  # [E] env states (incl. wrapper statistics)
    obs: jax.Array  # [E, *obs_shape] current observations
    rng: jax.Array
    update: jax.Array  # int32 number of updates done
    carry: jax.Array  # [E, G] GRU carry after the last step taken (before its reset)
    done: jax.Array  # [E] bool: the last step ended an episode -> reset before acting on ``obs``


class RecurrentTransition(NamedTuple):
    """A rollout ``[H, E]``: the env transition plus what the GRU needs."""

    transition: Transition  # obs, action, log_prob, reward, terminated, truncated, next_obs, info
    reset: jax.Array  # [H, E] bool: carry zeroed before acting at t (= done_{t-1})
    value: jax.Array  # [H, E] V(s_t) computed while acting
    carry_out: jax.Array  # [H, E, G] carry after processing step t (before any reset)


class RecurrentBatch(NamedTuple):
    """Training data, ENV-major: leading axis = env sequences ``[E, ...]`` (``[E, H, ...]``)."""

    init_carry: jax.Array  # [E, G] carry before the rollout's first step (reset[:, 0] applies to it)
    obs: jax.Array  # [E, H, *obs_shape]
    reset: jax.Array  # [E, H]
    action: jax.Array
    log_prob: jax.Array  # old log-prob (fixed)
    value: jax.Array  # old value (fixed)
    advantage: jax.Array
    ret: jax.Array


def collect(key, network: RecurrentNetwork, params, env_step: Callable, env_state, obs, carry, done,
            num_steps: int, unroll: int = 1):
    """Step ``E`` envs ``num_steps`` times with the GRU policy (one ``lax.scan``).

    ``carry [E, G]`` / ``done [E]`` are the runner's (carry after the last step, and whether
    that step ended an episode). Returns ``((env_state, obs, carry, done), RecurrentTransition [H, E])``.
    """

    def one_step(c, step_key):
        env_state, obs, carry, done = c
        k_act, k_env = jax.random.split(step_key)
        carry, dist_params, value = network.step(params, carry, obs, done)
        action = network.dist.sample(k_act, dist_params)
        log_prob = network.dist.log_prob(dist_params, action)
        next_obs, env_state, reward, term, trunc, info = env_step(k_env, env_state, action)
        final_obs = info.pop("final_observation")
        tr = Transition(obs, action, log_prob, reward, term, trunc, final_obs, info)
        new_done = jnp.logical_or(term, trunc)
        return (env_state, next_obs, carry, new_done), RecurrentTransition(tr, done, value, carry)

    return jax.lax.scan(one_step, (env_state, obs, carry, done), jax.random.split(key, num_steps), unroll=unroll)


def next_values(network: RecurrentNetwork, params, traj: RecurrentTransition) -> jax.Array:
    """``V(s'_t)`` ``[H, E]``: one GRU step from ``carry_out_t`` (no reset) on the true next state."""
    h, e = traj.value.shape
    flat = lambda x: x.reshape((h * e,) + x.shape[2:])
    _, _, v = network.step(params, flat(traj.carry_out), flat(traj.transition.next_obs), jnp.zeros((h * e,), bool))
    return v.reshape(h, e)


def make_batch(network: RecurrentNetwork, params, traj: RecurrentTransition, init_carry, cfg: PPOConfig,
               adv_norm: str = "minibatch"):
    """GAE targets and the env-major :class:`RecurrentBatch`; also returns the ``[H, E]`` returns."""
    tr = traj.transition
    adv, ret = gae(tr.reward, traj.value, next_values(network, params, traj), tr.terminated, tr.truncated,
                   cfg.gamma, cfg.gae_lambda)
    if adv_norm == "batch":
        adv = losses.normalize(adv)
    env_major = lambda x: jnp.swapaxes(x, 0, 1)
    batch = RecurrentBatch(init_carry, *jax.tree.map(env_major, (tr.obs, traj.reset, tr.action, tr.log_prob,
                                                                traj.value, adv, ret)))
    return batch, ret


def sequence_outputs(network: RecurrentNetwork, params, mb: RecurrentBatch):
    """Re-run a minibatch of whole sequences: ``(log_prob, entropy, value)``, each ``[B, H]``."""
    time_major = lambda x: jnp.swapaxes(x, 0, 1)
    _, dist_params, values = network.apply(params, mb.init_carry, time_major(mb.obs), time_major(mb.reset))
    logp = network.dist.log_prob(dist_params, time_major(mb.action))
    entropy = network.dist.entropy(dist_params)
    return time_major(logp), time_major(entropy), time_major(values)


def recurrent_loss_fn(network: RecurrentNetwork, params, mb: RecurrentBatch, config: PPOConfig):
    """The PPO loss (``losses.ppo_loss``) on a minibatch of env sequences ``[B, H]``."""
    logp, entropy, values = sequence_outputs(network, params, mb)
    adv = losses.normalize(mb.advantage) if config.adv_norm == "minibatch" else mb.advantage
    return losses.ppo_loss(
        logp, entropy, values, mb.log_prob, mb.value, adv, mb.ret,
        clip_eps=config.clip_eps, vf_coef=config.vf_coef, ent_coef=config.ent_coef,
        vf_clip_eps=config.vf_clip_eps if config.clip_value else None,
    )


# --- PPO ------------------------------------------------------------------------------------
def make_recurrent_ppo(config: PPOConfig, venv=None, network: Optional[RecurrentNetwork] = None,
                       loss_fn=recurrent_loss_fn) -> PPO:
    """Recurrent PPO for ``config`` (``network="gru"``); same :class:`~purejaxppo.train.PPO`
    interface as :func:`~purejaxppo.train.make_ppo`. ``loss_fn(network, params, mb, cfg)``
    receives a :class:`RecurrentBatch` minibatch ``[E/M, H, ...]``."""
    validate(config)
    if config.num_envs % config.num_minibatches:
        raise ConfigError(f"num_minibatches={config.num_minibatches} must divide num_envs={config.num_envs} "
                          "for the recurrent network; choose a divisor of num_envs")
    venv = venv if venv is not None else make_env(config)
    if network is None:
        network = make_recurrent_network(venv.spec, config.gru_size, config.hidden_sizes, config.activation)
    static = config  # structural fields from here; numbers from the traced cfg
    E = venv.num_envs

    def optimizer_for(cfg, lr=0.0):
        return make_optimizer(cfg.max_grad_norm, cfg.adam_eps, lr)

    def init(rng: jax.Array, cfg: PPOConfig = config) -> RecurrentRunnerState:
        rng, k_net, k_env = jax.random.split(rng, 3)
        params = network.init(k_net)
        obs, env_state = venv.reset(k_env)
        return RecurrentRunnerState(TrainState(params, optimizer_for(cfg).init(params)), env_state, obs, rng,
                                    jnp.asarray(0, jnp.int32), network.initial_carry(E), jnp.ones((E,), bool))

    def step(runner: RecurrentRunnerState, cfg: PPOConfig = config):
        rng, k_roll, k_upd = jax.random.split(runner.rng, 3)
        k_roll = rollout_key(k_roll, static.rollout_rng)
        params = runner.train.params
        (env_state, obs, carry, done), traj = collect(k_roll, network, params, venv.step, runner.env_state,
                                                      runner.obs, runner.carry, runner.done, static.num_steps,
                                                      static.rollout_unroll)
        batch, ret = make_batch(network, params, traj, runner.carry, cfg, static.adv_norm)
        lr = learning_rates(cfg, params, runner.update)
        train_state, metrics = update_epochs(
            k_upd, runner.train, batch,
            loss_fn=lambda p, mb: loss_fn(network, p, mb, cfg),
            optimizer=optimizer_for(cfg, lr),
            num_epochs=static.update_epochs, num_minibatches=static.num_minibatches,
            target_kl=cfg.target_kl,
        )
        metrics.update(episode_metrics(traj.transition.info))
        metrics["explained_variance"] = losses.explained_variance(traj.value, ret)
        metrics["lr"] = learning_rate(cfg, runner.update)
        if cfg.critic_lr is not None:
            metrics["critic_lr"] = metrics["lr"] * (cfg.critic_lr / cfg.lr)
        metrics["env_steps"] = (runner.update + 1) * static.batch_size
        return RecurrentRunnerState(train_state, env_state, obs, rng, runner.update + 1, carry, done), metrics

    def run(runner, cfg: PPOConfig = config, num_updates: Optional[int] = None):
        """``num_updates`` (static) steps as one ``lax.scan``; metrics are ``[num_updates]``."""
        n = static.num_updates if num_updates is None else num_updates
        return jax.lax.scan(lambda r, _: step(r, cfg), runner, None, length=n)

    def train(rng: jax.Array, cfg: PPOConfig = config):
        return run(init(rng, cfg), cfg)

    return PPO(config, venv, network, init, step, run, train)
