"""Configurations and evaluation protocols of published PPO baselines, to compare like with like.

``reference_config("gymnax-blines", env, **overrides)`` is gymnax-blines' own PPO setup for
``env`` (github.com/RobertTLange/gymnax-blines, ``agents/<env>/ppo.yaml`` and
``utils/ppo.py``, the agents behind the PPO numbers of gymnax's README), mapped field by
field onto :class:`PPOConfig`. ``python -m purejaxppo train --env ENV --reference gymnax-blines``.

Their yaml fields and how they map:

* ``num_train_envs`` -> ``num_envs``; ``n_steps`` -> ``num_steps``; ``epoch_ppo`` ->
  ``update_epochs``; ``n_minibatch`` -> ``num_minibatches``; ``gamma``, ``gae_lambda``,
  ``clip_eps`` (also their value-clip range), ``entropy_coeff`` -> ``ent_coef``,
  ``critic_coeff`` -> ``vf_coef``, ``max_grad_norm``; Adam eps 1e-5; advantages
  normalised per minibatch.
* network: separate actor and critic MLPs of ``num_hidden_layers`` x ``num_hidden_units``
  ReLU units (observations flattened).
* learning rate: ``optax.linear_schedule(lr_begin, lr_end, int(num_train_steps *
  lr_warmup))`` counted in OPTIMIZER steps. Despite the name, ``lr_warmup`` is not a
  warm-up from 0: it is a ramp from ``lr_begin`` to ``lr_end``, then constant. Every env
  but MountainCar-v0 has ``lr_begin == lr_end`` (a constant rate); MountainCar-v0
  decays 5e-3 -> 5e-4 over 12,500 optimizer steps, about the first 10% of its run.
* updates: their loop steps the envs ``n_steps + 1`` times per update and learns from
  ``n_steps`` of them (the last one only gives the bootstrap value, then is dropped), so
  ``num_train_steps`` env steps make ``(num_train_steps // num_train_envs + 1) //
  (n_steps + 1)`` updates. ``total_timesteps`` is set to that many updates of
  ``num_envs * num_steps`` transitions: the same updates on the same batch size, from
  slightly fewer env steps (0.8% for MinAtar, 3% for n_steps=32, 6% for n_steps=16).
* time limits: their GAE multiplies by ``1 - done`` with gymnax 0.x's single ``done``,
  so a time-limit end is treated as terminal: ``bootstrap_truncated=False``.

* Gaussian policies (Box actions): their state-dependent scale ``softplus(dense(x)) + 0.001``
  on the actor's features, ``action_std="softplus"`` (our default is a state-independent log-std).

Not reproduced (the code has no such knobs; see experiments/RESULTS.md): their
initialisation (flax's default lecun-normal kernels, biases uniform in [0, 0.05]; ours is
orthogonal with zero biases), and their reuse of one shuffling key for every update.
FourRooms-misc is left out: it needs env kwargs.

``EVAL_PROTOCOLS["gymnax-blines"]``: their reported figure is ``batch_evaluate``: the mean
return of 164 parallel episodes (each copy's first episode) of the final policy with
actions SAMPLED from it (``pi.sample``), not its mode.
"""

from __future__ import annotations

from purejaxppo.config import ConfigError, PPOConfig

# agents/<env>/ppo.yaml at gymnax-blines commit 3f029d6, verbatim (network: units, layers):
# steps=num_train_steps envs=num_train_envs grad=max_grad_norm n=n_steps mb=n_minibatch
# lr=(lr_begin, lr_end) warm=lr_warmup ep=epoch_ppo ent=entropy_coeff
_Y = dict(
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    critic_coeff=0.5,
    warm=0.05,
    ep=4,
    mb=4,
    ent=0.01,
    lr=(5e-4, 5e-4),
    units=64,
    layers=2,
)
_MINATAR = dict(_Y, steps=10_000_000, envs=64, grad=0.5, gamma=0.999, n=128, mb=8, units=256)
GYMNAX_BLINES_YAML: dict[str, dict] = {
    "CartPole-v1": dict(_Y, steps=150_000, envs=8, grad=0.5, n=32),
    "Acrobot-v1": dict(_Y, steps=500_000, envs=16, grad=1.0, n=32),
    "MountainCar-v0": dict(_Y, steps=250_000, envs=16, grad=1.0, n=32, lr=(5e-3, 5e-4), ep=64, ent=0.003),
    "Pendulum-v1": dict(_Y, steps=1_000_000, envs=32, grad=1.0, n=16),
    "MountainCarContinuous-v0": dict(_Y, steps=1_000_000, envs=32, grad=1.0, n=16),
    "Catch-bsuite": dict(_Y, steps=100_000, envs=16, grad=1.0, n=32),
    "DeepSea-bsuite": dict(_Y, steps=150_000, envs=8, grad=0.5, n=32),
    "MemoryChain-bsuite": dict(_Y, steps=150_000, envs=8, grad=0.5, n=32),
    "UmbrellaChain-bsuite": dict(_Y, steps=150_000, envs=8, grad=0.5, n=32),
    "DiscountingChain-bsuite": dict(_Y, steps=150_000, envs=8, grad=0.5, n=32),
    "Breakout-MinAtar": dict(_MINATAR),
    "Asterix-MinAtar": dict(_MINATAR),
    "SpaceInvaders-MinAtar": dict(_MINATAR),
    "Freeway-MinAtar": dict(_MINATAR),
}


def gymnax_blines_updates(y: dict) -> int:
    """PPO updates of their training loop: ``num_train_steps // E + 1`` env steps per env,
    one update every ``n_steps + 1`` of them."""
    return (y["steps"] // y["envs"] + 1) // (y["n"] + 1)


def _gymnax_blines(env_name: str) -> dict:
    y = GYMNAX_BLINES_YAML[env_name]
    lr_begin, lr_end = y["lr"]
    schedule = {} if lr_begin == lr_end else dict(lr_end=lr_end, lr_ramp_steps=float(int(y["steps"] * y["warm"])))
    return dict(
        network="mlp",
        hidden_sizes=(y["units"],) * y["layers"],
        activation="relu",
        shared_torso=False,
        num_envs=y["envs"],
        num_steps=y["n"],
        total_timesteps=gymnax_blines_updates(y) * y["envs"] * y["n"],
        update_epochs=y["ep"],
        num_minibatches=y["mb"],
        gamma=y["gamma"],
        gae_lambda=y["gae_lambda"],
        clip_eps=y["clip_eps"],
        clip_value=True,
        vf_clip_eps=y["clip_eps"],
        vf_coef=y["critic_coeff"],
        ent_coef=y["ent"],
        max_grad_norm=y["grad"],
        adam_eps=1e-5,
        adv_norm="minibatch",
        lr=lr_begin,
        anneal_lr=False,
        **schedule,
        normalize_obs=False,
        normalize_reward=False,
        bootstrap_truncated=False,
        action_std="softplus",
    )


REFERENCES = {"gymnax-blines": (GYMNAX_BLINES_YAML, _gymnax_blines)}

# their evaluation of the final policy: episodes (one per parallel copy) and whether actions are sampled
EVAL_PROTOCOLS = {"gymnax-blines": dict(episodes=164, stochastic=True)}


def reference_config(reference: str, env_name: str, **overrides) -> PPOConfig:
    """The ``reference``'s configuration for ``env_name``, with ``overrides`` applied."""
    if reference not in REFERENCES:
        raise ConfigError(f"unknown reference {reference!r}; choose one of {sorted(REFERENCES)}")
    table, make = REFERENCES[reference]
    if env_name not in table:
        raise ConfigError(
            f"{reference} has no PPO configuration for {env_name!r}; it has {', '.join(table)}; "
            "use --preset or plain flags for this env"
        )
    return PPOConfig(env_name=env_name, **{**make(env_name), **overrides})
