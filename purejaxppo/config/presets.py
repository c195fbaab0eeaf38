"""Per-environment default configurations (tuned starting points).

``preset_config(name, **overrides)`` gives the shipped config for ``name`` (plain
``PPOConfig()`` defaults, docs/conventions.md, for envs without a preset), with ``overrides`` applied.
Reproduce a result with ``python -m purejaxppo train --env NAME --preset``.
"""

from __future__ import annotations

from purejaxppo.config import PPOConfig

# MinAtar: a 64x64 ReLU MLP on the flattened 10x10xC grid. On this 2-core CPU it learns as fast
# per env step as the CNN (Breakout: 6.2 at 1M steps vs the CNN's 6.7 at 2M) at ~8x the env-steps/s
# (92k vs 11k aggregate over 8 seeds), which is what makes the full 1e7-step budget x 8 seeds fit.
# `--network cnn --hidden-sizes 128` gives the conv torso (networks.CNNTorso).
MINATAR = dict(
    network="mlp",
    activation="relu",
    hidden_sizes=(64, 64),
    num_envs=64,
    num_steps=128,
    update_epochs=4,
    num_minibatches=8,
    lr=5e-4,
    ent_coef=0.01,
    total_timesteps=10_000_000,
)

PRESETS: dict[str, dict] = {
    "CartPole-v1": dict(total_timesteps=500_000),
    # gymnax-blines' batch shape and constant lr 5e-4 at its step budget (their 5e5 steps = 947 updates of
    # 16 x 32): 8-seed IQM -80.2 training / -80.2 greedy here, where the former preset (16 x 128, annealed lr,
    # obs normalisation, 1e6 steps) reached -93 / -84 (experiments/RESULTS.md). Time limits stay bootstrapped.
    "Acrobot-v1": dict(
        num_envs=16,
        num_steps=32,
        total_timesteps=484_864,
        update_epochs=4,
        num_minibatches=4,
        lr=5e-4,
        anneal_lr=False,
        activation="relu",
        max_grad_norm=1.0,
    ),
    "MountainCar-v0": dict(
        num_envs=16,
        num_steps=256,
        total_timesteps=2_000_000,
        normalize_obs=True,
        gamma=0.99,
        ent_coef=0.0,
        lr=1e-3,
        update_epochs=8,
        num_minibatches=8,
    ),
    # observation + reward normalisation: 8-seed training IQM about -175 vs -193 without. gamma 0.98: -157 training,
    # -159 under gymnax-blines' protocol (gamma 0.9: -175 / 0.95: -165 / 0.99: -171); the optimum is about -136
    # (experiments/RESULTS.md).
    "Pendulum-v1": dict(
        gamma=0.98,
        ent_coef=0.0,
        lr=1e-3,
        update_epochs=10,
        num_envs=8,
        num_steps=256,
        num_minibatches=32,
        total_timesteps=500_000,
        normalize_obs=True,
        normalize_reward=True,
    ),
    "MountainCarContinuous-v0": dict(
        num_envs=16,
        num_steps=256,
        total_timesteps=1_000_000,
        normalize_obs=True,
        ent_coef=0.0,
        lr=1e-3,
        update_epochs=8,
        num_minibatches=8,
        gamma=0.99,
    ),
    "Catch-bsuite": dict(num_envs=16, num_steps=64, total_timesteps=200_000),
    "MemoryChain-bsuite": dict(
        network="gru",
        gru_size=32,
        hidden_sizes=(64,),
        num_envs=16,
        num_steps=64,
        total_timesteps=200_000,
        num_minibatches=4,
        lr=1e-3,
    ),
    # lr 3.5e-3, not 5e-4: at 5e-4 every seed plateaus at ~6.5 (one routine, entropy ~0.15) to 1e7 steps; in PBT's
    # static populations every member with lr >= 2e-3 escaped it (15-45) and every one <= 1.4e-3 did not (0.5-9.4).
    # 8-seed probes at 3.5e-3: 20.3 IQM at 1e6 steps, 25.8 at 3e6 (experiments/RESULTS.md).
    "Breakout-MinAtar": dict(MINATAR, lr=3.5e-3),
    "SpaceInvaders-MinAtar": dict(MINATAR),
    # lr 3.5e-3 as Breakout: at 2e6 steps (8 seeds) 5e-4 gives 2.3, 1.5e-3 3.5, 3.5e-3 3.5. gamma 0.999 (gymnax-blines'
    # value): at 1e7 steps, 8 seeds, their protocol 15.8 IQM against 14.4 with gamma 0.99 (experiments/RESULTS.md).
    "Asterix-MinAtar": dict(MINATAR, lr=3.5e-3, gamma=0.999),
    "Freeway-MinAtar": dict(MINATAR),
}

# JaxMARL (num_envs counts rows = envs x agents; total_timesteps counts agent steps). Each keeps JaxMARL's own
# baseline config (baselines/IPPO/config/ippo_ff_mpe.yaml, ippo_rnn_smax.yaml) except the env count, cut to
# 16 envs for a CPU; a jaxmarl env starts from its preset even without --preset (the plain default of 4 rows
# cannot hold 3 agents). experiments/marl/RESULTS.md.
JAXMARL_MPE = dict(num_envs=16 * 3, num_steps=128, total_timesteps=3 * 1_000_000, lr=2.5e-4)
JAXMARL_SMAX_RNN = dict(
    network="gru",
    gru_size=128,
    hidden_sizes=(128,),
    activation="relu",
    num_steps=128,
    lr=0.004,
    clip_eps=0.05,
    vf_clip_eps=0.05,
    max_grad_norm=0.25,
    ent_coef=0.01,
)
PRESETS.update(
    {
        "jaxmarl:MPE_simple_spread_v3": JAXMARL_MPE,
        "jaxmarl:3m": dict(JAXMARL_SMAX_RNN, num_envs=16 * 3, total_timesteps=3 * 1_000_000),
        "jaxmarl:2s3z": dict(JAXMARL_SMAX_RNN, num_envs=16 * 5, total_timesteps=5 * 1_000_000),
    }
)


def default_preset(env_name: str) -> bool:
    """Whether ``env_name`` starts from its preset without ``--preset`` (a multi-agent env: the
    plain defaults' 4 rows cannot hold its agents)."""
    return env_name.startswith("jaxmarl:") and env_name in PRESETS


def preset_config(env_name: str, **overrides) -> PPOConfig:
    """The preset for ``env_name`` (or the plain defaults) with ``overrides`` applied."""
    return PPOConfig(env_name=env_name, **{**PRESETS.get(env_name, {}), **overrides})
