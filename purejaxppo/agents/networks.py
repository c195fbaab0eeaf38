"""Actor and critic networks (Flax) behind a small functional interface.

A :class:`Network` bundles pure functions over explicit params:

* ``init(key) -> params``
* ``actor(params, obs [..., *obs_shape]) -> dist_params`` (logits ``[..., A]`` or
  ``(mean, log_std)`` each ``[..., D]``)
* ``critic(params, obs [..., *obs_shape]) -> value [...]``
* ``apply(params, obs) -> (dist_params, value)``
* ``dist``: the :class:`~purejaxppo.stages.distributions.Distribution` the actor parameterises.

Observations that are not one array (:mod:`purejaxppo.envs.observation`) are prepared before
the module sees them: a :class:`~purejaxppo.envs.observation.MaskedObs`'s mask bypasses the
torso and goes with the logits to the masked categorical (``dist_params = (logits,
mask)``); a structured observation is flattened and concatenated by default, or handed
as it is to your own torso (``make_network(..., torso_fn=...)``).

Splitting ``actor`` and ``critic`` lets the rollout act with the actor alone and
evaluate the critic on all observations in one batched pass after the scan.
Initialisation follows common PPO practice: orthogonal weights (gain sqrt(2) in the
torso, 0.01 for the policy head, 1 for the value head), zero biases, log-std 0.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.config import ConfigError
from purejaxppo.envs import observation
from purejaxppo.stages.distributions import CATEGORICAL, GAUSSIAN, MASKED_CATEGORICAL, Distribution, multi_discrete

ACTIVATION_FNS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "elu": nn.elu, "swish": nn.swish}


class Network(NamedTuple):
    init: Callable[[jax.Array], Any]
    actor: Callable[[Any, jax.Array], Any]
    critic: Callable[[Any, jax.Array], jax.Array]
    apply: Callable[[Any, jax.Array], tuple]
    dist: Distribution


def orthogonal(scale: float = 1.0):
    """Orthogonal initializer (as ``nn.initializers.orthogonal``) without LAPACK.

    The same distribution: Q of a Gaussian matrix with a positive-diagonal R, which is
    what Gram-Schmidt produces. Flax's version calls LAPACK ``geqrf``; batched by
    ``vmap`` over seeds, jaxlib runs that on the CPU client's thread pool and waits on a
    blocking counter, which deadlocks when the devices occupy every pool thread (seen:
    ``--seeds 8`` on 2 host devices hung at 0% CPU). Plain matmuls cannot.
    """

    def init(key, shape, dtype=jnp.float32):
        rows = math.prod(shape[:-1])
        cols = shape[-1]
        n, m = max(rows, cols), min(rows, cols)
        a = jax.random.normal(key, (n, m), jnp.float32)
        q = _gram_schmidt(a)
        if rows < cols:
            q = q.T
        return (scale * q).reshape(shape).astype(dtype)

    return init


def _gram_schmidt(a: jax.Array) -> jax.Array:
    """Orthonormal columns of ``a [n, m]`` (n >= m), column by column; each projection
    is done twice ("twice is enough") for float32 accuracy."""
    m = a.shape[1]

    def column(j, q):
        earlier = (jnp.arange(m) < j).astype(a.dtype)
        v = q[:, j]
        for _ in range(2):
            v = v - q @ ((q.T @ v) * earlier)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, m, column, a)


def _dense(features, scale):
    return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


class MLPTorso(nn.Module):
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))
        for h in self.hidden_sizes:
            x = ACTIVATION_FNS[self.activation](_dense(h, math.sqrt(2))(x))
        return x


def patches3x3(x: jax.Array) -> jax.Array:
    """``[N, H, W, C] -> [N, H-2, W-2, 9*C]``: the 3x3 VALID neighbourhoods, by slicing."""
    h, w = x.shape[1] - 2, x.shape[2] - 2
    return jnp.concatenate([x[:, i : i + h, j : j + w, :] for i in range(3) for j in range(3)], axis=-1)


class CNNTorso(nn.Module):
    """MinAtar-style torso: one 3x3 conv (16 ch) on ``[..., H, W, C]``, then the MLP.

    The conv is written as 3x3 patches times a dense kernel: the same function as
    ``nn.Conv(VALID)``, but its weight gradient is one matmul, whereas XLA:CPU's
    convolution backward is ~50x slower at MinAtar sizes."""

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    obs_ndim: int = 3
    channels: int = 16

    @nn.compact
    def __call__(self, obs):
        batch = obs.shape[: obs.ndim - 3]
        x = patches3x3(obs.reshape((-1,) + obs.shape[-3:]))
        x = ACTIVATION_FNS[self.activation](_dense(self.channels, math.sqrt(2))(x))
        x = x.reshape(batch + (-1,))
        return MLPTorso(self.hidden_sizes, self.activation, obs_ndim=1)(x)


class ActorCritic(nn.Module):
    num_actions: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    torso: str = "mlp"
    shared_torso: bool = False
    torso_fn: Any = None  # zero-arg factory of a custom torso module: obs [..., *] -> features [..., F]
    action_std: str = "param"  # Gaussian scale: "param" (state-independent) or "softplus" (state-dependent)

    def setup(self):
        if self.torso_fn is not None:
            make = self.torso_fn
        elif self.torso == "cnn":
            make = lambda: CNNTorso(self.hidden_sizes, self.activation, self.obs_ndim)
        else:
            make = lambda: MLPTorso(self.hidden_sizes, self.activation, self.obs_ndim)
        self.actor_torso = make()
        self.critic_torso = self.actor_torso if self.shared_torso else make()
        self.policy_head = _dense(self.num_actions, 0.01)
        self.value_head = _dense(1, 1.0)
        if not self.discrete and self.action_std == "softplus":
            self.std_head = _dense(self.num_actions, 0.01)  # softplus(~0) + 0.001: std about 0.69 at init
        elif not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def actor(self, obs):
        features = self.actor_torso(obs)
        out = self.policy_head(features)
        if self.discrete:
            return out
        if self.action_std == "softplus":
            return out, jnp.log(jax.nn.softplus(self.std_head(features)) + 0.001)
        return out, jnp.broadcast_to(self.log_std, out.shape)

    def critic(self, obs):
        return self.value_head(self.critic_torso(obs))[..., 0]

    def __call__(self, obs, critic_obs=None):
        """``critic_obs``: what the critic sees when it is not ``obs`` (a centralised critic's global state)."""
        return self.actor(obs), self.critic(obs if critic_obs is None else critic_obs)


def distribution_for(spec) -> Distribution:
    """The action distribution an :class:`~purejaxppo.envs.EnvSpec` calls for."""
    if spec.action_mask:
        if spec.action_nvec:
            raise ConfigError(
                f"{spec.name} has action masks and MultiDiscrete actions; the masked categorical "
                "is over one flat set of actions, and a mask per component is not built: give the env "
                "one Discrete action (the product of the components) with one flat mask"
            )
        return MASKED_CATEGORICAL
    if spec.action_nvec:
        return multi_discrete(spec.action_nvec)
    return CATEGORICAL if spec.discrete else GAUSSIAN


def observation_adapter(spec, flatten: bool = True):
    """``prepare(obs) -> (x, mask | None)``: what the torso sees and the action mask.

    ``x`` is the observation array; a structured observation is flattened
    (:func:`purejaxppo.envs.observation.flatten`) unless ``flatten=False`` (a custom torso)."""
    structure = spec.obs_structure

    def prepare(obs):
        obs = obs.obs if spec.global_state_shape else obs  # CriticObs: the actor's part
        x, mask = (obs.obs, obs.action_mask) if spec.action_mask else (obs, None)
        if structure is not None and flatten:
            x = observation.flatten(x, structure)
        return x, mask

    return prepare


def dummy_observation(spec, batch: tuple = (1,)):
    """A zero observation of ``spec`` (with leading dims ``batch``) for initialisation."""
    structure = spec.obs_structure
    x = (
        observation.zeros(structure, batch)
        if structure is not None
        else jnp.zeros(tuple(batch) + tuple(spec.obs_shape), jnp.float32)
    )
    if spec.action_mask:
        x = observation.MaskedObs(x, jnp.ones(tuple(batch) + (spec.num_actions,), bool))
    if spec.global_state_shape:
        x = observation.CriticObs(x, jnp.zeros(tuple(batch) + tuple(spec.global_state_shape), jnp.float32))
    return x


def critic_adapter(spec, prepare):
    """``critic_input(obs)``: what the critic sees. The actor's input (``prepare(obs)[0]``), or a
    :class:`~purejaxppo.envs.observation.CriticObs`'s global state (a centralised critic): then
    the values of the final observations GAE bootstraps from are those of the final global state."""
    if spec.global_state_shape:
        return lambda obs: obs.global_state
    return lambda obs: prepare(obs)[0]


def make_network(
    spec,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    torso: str = "mlp",
    shared_torso: bool = False,
    torso_fn: Optional[Callable[[], nn.Module]] = None,
    action_std: str = "param",
) -> Network:
    """Build the feed-forward actor-critic for an :class:`~purejaxppo.envs.EnvSpec`.

    ``torso_fn``: a zero-arg factory of your own Flax torso (called once per torso, twice
    unless ``shared_torso``), mapping the observation ``[..., *]`` (a structured one as
    it is, unflattened; without the action mask) to features ``[..., F]``."""
    module = ActorCritic(
        num_actions=spec.num_actions,
        discrete=spec.discrete,
        hidden_sizes=tuple(hidden_sizes),
        activation=activation,
        obs_ndim=len(spec.obs_shape),
        torso=torso,
        shared_torso=shared_torso,
        torso_fn=torso_fn,
        action_std=action_std,
    )
    if spec.global_state_shape and (shared_torso or torso_fn is not None or len(spec.obs_shape) != 1):
        raise ConfigError(
            f"a centralised critic (global state of {spec.name}) has its own MLP torso: it takes "
            "neither shared_torso=True nor a custom torso_fn, and needs flat observations"
        )
    prepare = observation_adapter(spec, flatten=torso_fn is None)
    critic_input = critic_adapter(spec, prepare)
    dummy_obs = dummy_observation(spec)
    dummy, dummy_critic = prepare(dummy_obs)[0], critic_input(dummy_obs)

    def actor(params, obs):
        x, mask = prepare(obs)
        logits = module.apply(params, x, method=ActorCritic.actor)
        return logits if mask is None else (logits, mask)

    def critic(params, obs):
        return module.apply(params, critic_input(obs), method=ActorCritic.critic)

    return Network(
        init=lambda key: module.init(key, dummy, dummy_critic),
        actor=actor,
        critic=critic,
        apply=lambda params, obs: (actor(params, obs), critic(params, obs)),
        dist=distribution_for(spec),
    )
