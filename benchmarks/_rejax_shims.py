"""Make rejax's PPO (rejax 0.1.3, the newest) run on gymnax 1.x WITHOUT editing the installed
package, and without its periodic evaluation inside the timed program.

rejax expects the old gymnax step ``(obs, state, reward, done, info)``: its rollout
(``OnPolicyMixin``/``PPO.collect_trajectories``) and its ``evaluate`` unpack five values, so on
gymnax 1.x (``(obs, state, reward, terminated, truncated, info)``) both fail with ``ValueError:
too many values to unpack (expected 5)``. Wrapping the env in gymnax's own
``wrappers.LegacyStepAPIWrapper`` ends in a ``RecursionError``: ``Algorithm.create`` deep-copies
its config, env included, and that wrapper's ``__getattr__`` forwards ``_env`` itself before the
copy has one. :class:`FiveValueEnv` is the same mapping (``done = terminated | truncated``, the
info dict without ``final_observation``) with a ``__getattr__`` that refuses private names, so
copying it works. It is passed to rejax as its env (``PPO.create(env=FiveValueEnv(env), ...)``,
rejax's documented way to bring an env), so rejax's code is used as it is.

:func:`without_eval` returns the algorithm with ``eval_callback`` replaced by one that returns
nothing: rejax's ``train`` evaluates 128 episodes every ``eval_freq`` steps INSIDE the training
program (for its CartPole config that is up to 100 x 128 x 500 env steps next to 1e5 training
steps). The harness times training alone on both sides and evaluates each side's final policy
once, with rejax's own ``rejax.evaluate.evaluate`` (its protocol: 128 episodes, sampled actions,
until done or ``max_steps_in_episode``). The loop structure (``eval_freq`` chunks of training
iterations) is unchanged.
"""

from __future__ import annotations

import jax.numpy as jnp

APPLIED = [
    "gymnax 1.x six-value step -> rejax's five-value step: the env is passed to PPO.create wrapped in FiveValueEnv "
    "(done = terminated | truncated, info without final_observation; a __getattr__ safe under deepcopy, where "
    "gymnax.wrappers.LegacyStepAPIWrapper recurses)",
    "eval_callback replaced by a no-op for the timed program (rejax evaluates 128 episodes every eval_freq steps "
    "inside train); the final policy is evaluated once with rejax.evaluate.evaluate",
]


class FiveValueEnv:
    """A gymnax 1.x env with the old ``(obs, state, reward, done, info)`` step."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        if name.startswith("_"):  # deepcopy/pickle probe private names before __init__ ran
            raise AttributeError(name)
        return getattr(self._env, name)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {k: v for k, v in info.items() if k != "final_observation"}
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def __repr__(self):
        return f"FiveValueEnv({self._env!r})"


def step_is_new_api(env, params) -> bool:
    import jax

    key = jax.random.PRNGKey(0)
    out = jax.eval_shape(
        lambda k: env.step(k, env.reset(k, params)[1], env.action_space(params).sample(k), params), key
    )
    return len(out) == 6


def make_env(env_id: str):
    """``(env, params)`` for rejax: gymnax's env, wrapped when its step has six values."""
    import gymnax

    env, params = gymnax.make(env_id)
    return (FiveValueEnv(env) if step_is_new_api(env, params) else env), params


def _no_eval(algo, ts, rng):
    return ()


def without_eval(algo):
    return algo.replace(eval_callback=_no_eval)


def final_eval(algo, ts, key, num_seeds: int = 128, act=None):
    """rejax's own evaluation (``rejax.evaluate.evaluate``) of ``act`` (default: rejax's policy of
    the train state ``ts``) on ``algo``'s env: ``(lengths [N], returns [N])``."""
    from rejax.evaluate import evaluate

    act = algo.make_act(ts) if act is None else act
    return evaluate(act, key, algo.env, algo.env_params, num_seeds, algo.env_params.max_steps_in_episode)
