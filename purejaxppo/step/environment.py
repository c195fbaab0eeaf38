"""The training env of a config (vectorised, wrapped) and the PRNG keys its noise comes from."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from purejaxppo import envs as envs_lib
from purejaxppo.config import PPOConfig
from purejaxppo.stages import device_rows, normalize


def rollout_key(key: jax.Array, impl: str) -> jax.Array:
    """The rollout's key in PRNG ``impl``. Threefry (JAX's default) costs about as much
    as CartPole's physics per env step on CPU; ``unsafe_rbg`` (XLA's RngBitGenerator) is
    ~4x cheaper, with weaker guarantees for split/fold_in, which env noise and action
    sampling do not need. Shuffling and initialisation always use threefry."""
    if impl == "threefry":
        return key
    return jax.random.key(jax.random.bits(key, (), jnp.uint32), impl=impl)


def per_env_impl(key: jax.Array) -> jax.Array:
    """``key`` as a threefry key (its first two words when it is another impl).

    Env noise is drawn per env from per-env keys inside ``vmap``. Under ``vmap``,
    ``unsafe_rbg``/``rbg`` draw a whole batch from the batch's FIRST key, so each env's
    noise would depend on how the envs are batched (split over devices or not); threefry
    keys are per-key exact, so a data-parallel rollout equals the single-device one."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and "threefry" not in str(jax.random.key_impl(key)):
        return jax.random.wrap_key_data(jax.random.key_data(key)[..., :2], impl="threefry2x32")
    return key


def make_env(config: PPOConfig, axis_name: Optional[str] = None, num_devices: int = 1) -> envs_lib.VecEnv:
    """The config's environment, vectorised, with its wrappers (innermost first).

    With ``axis_name`` (inside ``shard_map`` over ``num_devices``), this device's
    ``E/D`` envs: the per-env keys of a reset/step are the global split's slice
    ``[d*E/D, (d+1)*E/D)``, so sharded rollouts equal the single-device one."""
    e_glob, e_loc = config.num_envs, config.num_envs // num_devices

    def env_keys(key):
        keys = jax.random.split(per_env_impl(key), e_glob)
        return device_rows.mine(keys, axis_name, num_devices)

    venv = envs_lib.make_vec_env(
        config.env_name,
        e_loc,
        config.max_episode_steps,
        env_keys=env_keys,
        reset_ratio=config.reset_ratio,
        **envs_lib.suite_options(config),
    )
    if config.obs_keep is not None:
        venv = envs_lib.keep_observation(venv, config.obs_keep)
    venv = envs_lib.episode_statistics(venv)  # inside the normaliser: it records raw returns
    if config.normalize_obs:
        venv = normalize.normalize_observation(venv, frozen=config.freeze_obs_norm, axis_name=axis_name)
    return venv
