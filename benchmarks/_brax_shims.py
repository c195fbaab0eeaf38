"""Make Brax's own PPO (``brax.training.agents.ppo.train.train``) run on today's JAX, and time it
the way ``benchmarks/vs_brax.py`` times ours, WITHOUT editing the installed package.

``apply()`` changes nothing global: it replaces the ``jax`` name inside two Brax modules
(``brax.training.agents.ppo.train`` and ``brax.training.pmap``) with a proxy module that is
``jax`` except for:

* ``device_put_replicated(x, devices)``: removed from JAX (jax >= 0.8 raises ``AttributeError:
  jax.device_put_replicated is deprecated; use jax.device_put instead``). The proxy's version
  is the drop-in replacement JAX's pmap migration guide gives: every leaf broadcast to a leading
  axis of ``len(devices)`` and put with a ``NamedSharding`` over those devices on that axis, the
  layout ``jax.pmap`` takes.
* ``pmap(fun, ...)``: unchanged, except when ``fun`` is Brax's ``training_epoch`` (all of
  training between two evaluations: ``num_training_steps_per_epoch`` training steps, each a
  rollout of ``batch_size * num_minibatches * unroll_length`` env steps and
  ``num_updates_per_batch`` epochs of SGD, in one ``lax.scan``). That one is returned as a
  :class:`TimedEpoch`, which on its first call compiles it ahead of time
  (``pmap(fun).lower(*args).compile()``) and records the compile seconds, then runs the compiled
  program and records the run seconds up to ``block_until_ready`` of its outputs: compile apart
  from run, as the harness does for ours. With ``num_evals=1`` Brax's train does all of its
  training in ONE such call.

Brax's ``train`` builds new closures on every call, so every call compiles its env reset, its
init and its epoch anew. The harness therefore calls ``train()`` once per row and times later
rounds with :func:`replay`: the same compiled epoch(s) on copies of the same inputs (the first
call's inputs are copied before the call donates them).

Brax's evaluation (``acting.Evaluator``, after training) and its setup (env reset, network
init) are not in the epoch's times; the harness times the whole ``train`` call too.
"""

from __future__ import annotations

import time
import types

import jax
import numpy as np

#: what the timed epochs recorded: ``epochs`` is a list of dicts
#: ``{"compile_s": float | None (not the first call), "run_s": float}``; ``saved``: (executable, copy of the
#: inputs) per epoch call, for :func:`replay`.
STATE: dict = {"epochs": [], "saved": []}
APPLIED: list[str] = []


class _Proxy(types.ModuleType):
    """A module that is ``base`` except for the attributes given."""

    def __init__(self, base, **overrides):
        super().__init__(getattr(base, "__name__", "proxy"))
        self.__dict__.update(overrides)
        self._base = base

    def __getattr__(self, name):
        return getattr(self._base, name)


def device_put_replicated(x, devices):
    """``jax.device_put_replicated`` as JAX's migration guide replaces it: a leading axis of
    ``len(devices)``, sharded over ``devices``."""
    devices = list(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("_replicated",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("_replicated"))

    def put(a):
        a = jax.numpy.asarray(a)
        return jax.device_put(jax.numpy.broadcast_to(a, (len(devices),) + a.shape), sharding)

    return jax.tree_util.tree_map(put, x)


class TimedEpoch:
    """``jax.pmap(training_epoch, **kw)`` compiled ahead of time on its first call, timed."""

    def __init__(self, fun, kwargs):
        self._pmapped = jax.pmap(fun, **kwargs)
        self._compiled = None

    def __call__(self, *args):
        if self._compiled is None:
            t0 = time.perf_counter()
            self._compiled = self._pmapped.lower(*args).compile()
            compile_s = time.perf_counter() - t0
        else:
            compile_s = None
        # a copy of the inputs (the call donates them), for replay() in later rounds
        STATE["saved"].append((self._compiled, jax.tree_util.tree_map(_copy, args)))
        t0 = time.perf_counter()
        out = self._compiled(*args)
        jax.block_until_ready(out)
        STATE["epochs"].append({"compile_s": compile_s, "run_s": time.perf_counter() - t0})
        return out


def _copy(a):
    """A copy of a device array in its own buffers, with the same sharding."""
    if isinstance(a, jax.Array):
        return jax.device_put(a.copy(), a.sharding)
    return a


def replay() -> float:
    """Run the training epoch call(s) of the last ``train()`` again, compiled, on copies of the
    same inputs; returns their run seconds (each to ``block_until_ready``). The same program on
    the same data as that call's training, without ``train()``'s per-call setup (Brax's train
    builds and compiles its env reset, init and evaluator anew on every call)."""
    total = 0.0
    for compiled, args in STATE["saved"]:
        args = jax.tree_util.tree_map(_copy, args)
        # placed as the program was compiled: over several devices, an input pmap took from one
        # device (and resharded itself on the first call) must be handed over sharded
        args = jax.device_put(args, compiled.input_shardings[0])
        jax.block_until_ready(args)
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        total += time.perf_counter() - t0
    return total


def _pmap(fun=None, **kwargs):
    if fun is None:  # used as a decorator with arguments
        return lambda f: _pmap(f, **kwargs)
    if getattr(fun, "__name__", "") == "training_epoch":
        return TimedEpoch(fun, kwargs)
    return jax.pmap(fun, **kwargs)


def apply() -> list[str]:
    """Install the proxies (idempotent); returns what was shimmed, for the JSON."""
    if APPLIED:
        return APPLIED
    import brax.training.agents.ppo.train as ppo_train
    import brax.training.pmap as brax_pmap

    needs_dpr = not _has_device_put_replicated()
    overrides = {"pmap": _pmap}
    if needs_dpr:
        overrides["device_put_replicated"] = device_put_replicated
    ppo_train.jax = _Proxy(jax, **overrides)
    if needs_dpr:
        brax_pmap.jax = _Proxy(jax, device_put_replicated=device_put_replicated)
        APPLIED.append(
            "jax.device_put_replicated (removed from JAX): a leading device axis + NamedSharding, "
            "in brax.training.agents.ppo.train and brax.training.pmap"
        )
    APPLIED.append(
        "jax.pmap of Brax's training_epoch: compiled ahead of time on first call and timed (compile "
        "apart from run); later rounds replay the compiled epoch on copies of the same inputs"
    )
    return APPLIED


def _has_device_put_replicated() -> bool:
    try:
        return callable(jax.device_put_replicated)
    except AttributeError:
        return False
