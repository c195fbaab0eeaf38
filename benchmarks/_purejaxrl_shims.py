"""Load PureJaxRL's training scripts from a user-supplied checkout and make them run on
today's libraries, WITHOUT editing the checkout (nothing of PureJaxRL lives in this repo).

``load(purejaxrl_dir)`` imports ``purejaxrl/{wrappers,ppo,ppo_rnn,ppo_continuous_action}.py``
under private module names and applies these runtime shims, each only where it is needed:

* gymnax 1.x: ``env.step`` returns ``(obs, state, reward, terminated, truncated, info)``;
  PureJaxRL expects ``(obs, state, reward, done, info)``. Each script gets its own ``gymnax``
  proxy whose ``make`` wraps the env in :class:`LegacyEnv` (gymnax's own
  ``wrappers.LegacyStepAPIWrapper``, ``done = terminated | truncated``), which also drops
  gymnax 1.x's ``info["final_observation"]`` (the old API had no such entry; PureJaxRL returns
  the whole ``info`` of every step as its metrics, so it would otherwise materialise every
  observation of training) and fills ``params=None`` with the env's default params.
  The global ``gymnax.make`` is untouched (purejaxppo uses it too).
* ``wrappers.py`` imports ``brax`` and ``navix`` at the top for optional env wrappers:
  when they are not installed, stub modules stand in during the import only.
* ``distrax`` (``Categorical``, ``MultivariateNormalDiag``): the real package when installed;
  otherwise :mod:`_DistraxShim`, the same computations as distrax 0.1.9 (log-softmax-normalised
  logits, ``jax.random.categorical`` sampling with the validity mask, one-hot
  ``multiply_no_nan`` log-prob, ``mul_exp`` entropy; diagonal Gaussian as loc + scale * N(0, 1)).
* flax >= 0.8: ``nn.GRUCell`` needs ``features=`` and ``GRUCell.initialize_carry`` is no longer
  ``(rng, batch_dims, size)``: ``ppo_rnn`` gets an ``nn`` proxy whose ``GRUCell`` defaults to
  ``features=128`` (the size ppo_rnn.py hard-codes) and provides the old zero carry.
* ``ppo_continuous_action.py`` builds a Brax env (``BraxGymnaxWrapper(name)``): for a gymnax
  name (e.g. ``Pendulum-v1``) it gets the gymnax env through :class:`LegacyEnv` instead, and its
  ``ClipAction`` (which clips to [-1, 1] whatever the env; its own TODO says it should use the
  action space) clips to the env's action bounds ([-2, 2] for Pendulum), as purejaxppo does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
import types

import jax
import jax.numpy as jnp


class _Proxy(types.ModuleType):
    """A module that is ``base`` except for the attributes given."""

    def __init__(self, base, **overrides):
        super().__init__(getattr(base, "__name__", "proxy"))
        self.__dict__.update(overrides)
        self._base = base

    def __getattr__(self, name):
        return getattr(self._base, name)


# --- gymnax 1.x -> PureJaxRL's 5-tuple step ------------------------------------------------------
def _legacy_base():
    try:
        from gymnax.wrappers import LegacyStepAPIWrapper

        return LegacyStepAPIWrapper
    except ImportError:  # older gymnax 1.x without it: the same mapping

        class LegacyStepAPIWrapper:
            def __init__(self, env):
                self._env = env

            def __getattr__(self, name):
                return getattr(self._env, name)

            def reset(self, key, params=None):
                return self._env.reset(key, params)

            def step(self, key, state, action, params=None):
                obs, state, reward, term, trunc, info = self._env.step(key, state, action, params)
                return obs, state, reward, jnp.logical_or(term, trunc), info

        return LegacyStepAPIWrapper


def _step_is_new_api(env) -> bool:
    """gymnax 1.x step returns 6 values (terminated, truncated); the old API 5."""
    key = jax.random.PRNGKey(0)
    params = env.default_params
    out = jax.eval_shape(
        lambda k: env.step(k, env.reset(k, params)[1], env.action_space(params).sample(k), params), key
    )
    return len(out) == 6


class LegacyEnv(_legacy_base()):
    """gymnax 1.x env with PureJaxRL's ``(obs, state, reward, done, info)`` step."""

    def __init__(self, env):
        super().__init__(env)
        self._new_api = _step_is_new_api(env)

    def _p(self, params):
        return self._env.default_params if params is None else params

    def reset(self, key, params=None):
        return self._env.reset(key, self._p(params)) if not self._new_api else super().reset(key, self._p(params))

    def step(self, key, state, action, params=None):
        if not self._new_api:
            return self._env.step(key, state, action, self._p(params))
        obs, state, reward, done, info = super().step(key, state, action, self._p(params))
        info = {k: v for k, v in info.items() if k != "final_observation"}
        return obs, state, reward, done, info

    def observation_space(self, params=None):
        return self._env.observation_space(self._p(params))

    def action_space(self, params=None):
        return self._env.action_space(self._p(params))


def legacy_make(env_id, **kwargs):
    import gymnax

    env, params = gymnax.make(env_id, **kwargs)
    return LegacyEnv(env), params


# --- distrax (when not installed) ----------------------------------------------------------------
def _distrax_shim() -> types.ModuleType:
    """Categorical and MultivariateNormalDiag computed as distrax 0.1.9 does."""

    @jax.custom_jvp
    def multiply_no_nan(x, y):
        return jnp.where(y == 0, jnp.zeros((), jnp.result_type(x, y)), x * y)

    @multiply_no_nan.defjvp
    def _mnn_jvp(primals, tangents):
        x, y = primals
        x_dot, y_dot = tangents
        return multiply_no_nan(x, y), x_dot * y + y_dot * x

    def mul_exp(x, logp):
        p = jnp.exp(logp)
        return jnp.where(p == 0, 0.0, x) * p

    def _reshape(sample_shape, t):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        return t.reshape(sample_shape + t.shape[1:])

    def _n(sample_shape):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        n = 1
        for s in sample_shape:
            n *= s
        return n

    class Categorical:
        def __init__(self, logits, dtype=int):
            self.logits = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)
            self._dtype = dtype

        @property
        def probs(self):
            return jax.nn.softmax(self.logits, axis=-1)

        @property
        def num_categories(self):
            return self.logits.shape[-1]

        def sample(self, *, seed, sample_shape=()):
            n = _n(sample_shape)
            is_valid = jnp.logical_and(jnp.all(jnp.isfinite(self.probs), axis=-1), jnp.all(self.probs >= 0, axis=-1))
            draws = jax.random.categorical(
                key=seed, logits=self.logits, axis=-1, shape=(n,) + self.logits.shape[:-1]
            ).astype(self._dtype)
            return _reshape(sample_shape, jnp.where(is_valid, draws, jnp.ones_like(draws) * -1))

        def log_prob(self, value):
            one_hot = jax.nn.one_hot(value, self.num_categories, dtype=self.logits.dtype)
            outside = jnp.logical_or(value < 0, value > self.num_categories - 1)
            return jnp.where(outside, -jnp.inf, jnp.sum(multiply_no_nan(self.logits, one_hot), axis=-1))

        def entropy(self):
            log_probs = jax.nn.log_softmax(self.logits)
            return -jnp.sum(mul_exp(log_probs, log_probs), axis=-1)

        def mode(self):
            return jnp.argmax(self.logits, axis=-1).astype(self._dtype)

    class MultivariateNormalDiag:
        def __init__(self, loc, scale_diag):
            self.loc = jnp.asarray(loc)
            self.scale_diag = jnp.broadcast_to(jnp.asarray(scale_diag), self.loc.shape)

        def sample(self, *, seed, sample_shape=()):
            n = _n(sample_shape)
            z = jax.random.normal(seed, (n,) + self.loc.shape, self.loc.dtype)
            return _reshape(sample_shape, self.loc + self.scale_diag * z)

        def log_prob(self, value):
            z = (value - self.loc) / self.scale_diag
            base = jnp.sum(-0.5 * jnp.square(z) - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
            return base - jnp.sum(jnp.log(self.scale_diag), axis=-1)

        def entropy(self):
            d = self.loc.shape[-1]
            return d * (0.5 + 0.5 * jnp.log(2 * jnp.pi)) + jnp.sum(jnp.log(self.scale_diag), axis=-1)

        def mode(self):
            return self.loc

    mod = types.ModuleType("distrax")
    mod.Categorical, mod.MultivariateNormalDiag = Categorical, MultivariateNormalDiag
    mod.__purejaxppo_shim__ = True
    return mod


# --- brax / navix stubs (import only) --------------------------------------------------------------
def _stub(name):
    mod = types.ModuleType(name)

    def missing(*_a, **_k):
        raise ImportError(f"{name} is not installed (a stub stood in while importing PureJaxRL's wrappers)")

    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return missing

    mod.__getattr__ = getattr_
    mod.__path__ = []  # a package, so submodules can be imported from it
    return mod


@contextlib.contextmanager
def _temporary_modules(mods: dict):
    """Put ``mods`` in ``sys.modules`` for the block, then restore what was there."""
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _importable(name) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:
        return False


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- flax GRUCell -----------------------------------------------------------------------------
class _GRUCellCompat:
    """``nn.GRUCell()`` / ``nn.GRUCell.initialize_carry(rng, batch_dims, size)`` as in old flax."""

    def __init__(self, features: int):
        self.features = features

    def __call__(self, *args, **kwargs):
        import flax.linen as nn

        if not args:
            kwargs.setdefault("features", self.features)
        return nn.GRUCell(*args, **kwargs)

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=None):
        shape = tuple(batch_dims) + (size,)
        return jnp.zeros(shape) if init_fn is None else init_fn(rng, shape)


def _gru_needs_features() -> bool:
    import flax.linen as nn

    fields = {f.name: f for f in dataclasses.fields(nn.GRUCell)}
    return "features" in fields and fields["features"].default is dataclasses.MISSING


# --- public ---------------------------------------------------------------------------------------
def load(purejaxrl_dir: str) -> types.SimpleNamespace:
    """Import PureJaxRL's scripts from ``purejaxrl_dir`` (the repo root or its ``purejaxrl/``
    folder) with the shims applied. Returns ``SimpleNamespace(ppo, ppo_rnn, ppo_continuous_action,
    wrappers, shims=[what was applied], path)``; a script that cannot be imported is ``None``
    and its error is in ``errors``."""
    src = os.path.abspath(purejaxrl_dir)
    if os.path.isfile(os.path.join(src, "purejaxrl", "ppo.py")):
        src = os.path.join(src, "purejaxrl")
    if not os.path.isfile(os.path.join(src, "ppo.py")):
        raise FileNotFoundError(
            f"no PureJaxRL checkout at {purejaxrl_dir!r}: expected purejaxrl/ppo.py in it "
            "(git clone https://github.com/luchris429/purejaxrl)"
        )
    import gymnax

    shims, temp = [], {}
    for name in ("brax", "navix"):
        if not _importable(name):
            temp[name] = _stub(name)
            if name == "brax":
                for sub in ("brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training"):
                    temp[sub] = _stub(sub)
            shims.append(f"{name}: not installed, stub module during import of wrappers.py")
    if _importable("distrax"):
        distrax = importlib.import_module("distrax")
        shims.append(f"distrax: real package {getattr(distrax, '__version__', '?')}")
    else:
        temp["distrax"] = _distrax_shim()
        shims.append("distrax: not installed, shim with distrax 0.1.9's Categorical/MultivariateNormalDiag math")

    mods, errors = {}, {}
    with _temporary_modules(temp):
        wrappers = _load_file("purejaxrl_wrappers", os.path.join(src, "wrappers.py"))
        with _temporary_modules({"wrappers": wrappers}):
            for name in ("ppo", "ppo_rnn", "ppo_continuous_action"):
                try:
                    mods[name] = _load_file(f"purejaxrl_{name}", os.path.join(src, f"{name}.py"))
                except Exception as e:  # noqa: BLE001 - reported by the caller
                    mods[name], errors[name] = None, f"{type(e).__name__}: {e}"

    gx = _Proxy(gymnax, make=legacy_make)
    for name in ("ppo", "ppo_rnn"):
        if mods.get(name) is not None and hasattr(mods[name], "gymnax"):
            mods[name].gymnax = gx
    shims.append(
        "gymnax: make() wrapped in LegacyEnv (gymnax.wrappers.LegacyStepAPIWrapper, "
        "info['final_observation'] dropped) for ppo.py / ppo_rnn.py"
    )

    if mods.get("ppo_rnn") is not None and _gru_needs_features():
        import flax.linen as nn

        mods["ppo_rnn"].nn = _Proxy(nn, GRUCell=_GRUCellCompat(128))
        shims.append("flax: nn.GRUCell(features=128) and old initialize_carry for ppo_rnn.py")

    cont = mods.get("ppo_continuous_action")
    if cont is not None:
        brax_cls = cont.BraxGymnaxWrapper

        def env_for(env_name, backend="positional"):
            if env_name in gymnax.registered_envs:
                return LegacyEnv(gymnax.make(env_name)[0])
            return brax_cls(env_name, backend)

        base_clip = cont.ClipAction

        class ClipActionToBounds(base_clip):
            def __init__(self, env, low=None, high=None):
                space = env.action_space(None)
                super().__init__(env, space.low if low is None else low, space.high if high is None else high)

        cont.BraxGymnaxWrapper = env_for
        cont.ClipAction = ClipActionToBounds
        shims.append(
            "ppo_continuous_action.py: gymnax env names through LegacyEnv instead of BraxGymnaxWrapper; "
            "ClipAction clips to the env's action bounds (its default is [-1, 1])"
        )

    return types.SimpleNamespace(path=src, wrappers=wrappers, shims=shims, errors=errors, **mods)
