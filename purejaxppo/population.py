"""Hyperparameter populations trained in ONE compile.

Numeric config fields are pytree leaves, so a config whose leaves are stacked
``[M]`` arrays describes ``M`` members; ``jax.vmap`` over (configs, keys) trains them all
with one compiled program. Seeds are a second vmap axis: metrics come back ``[M, S, U]``.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError, PPOConfig, check_population_gammas, validate


class Population(NamedTuple):
    base: PPOConfig  # structural fields shared by every member
    configs: PPOConfig  # numeric leaves stacked to [M]
    members: list  # [{field: value}] the swept values of each member
    num_seeds: int


def _numeric(name: str):
    if name not in PPOConfig.numeric_fields():
        raise ConfigError(
            f"cannot sweep {name!r}: only numeric hyperparameters can vary inside one compile "
            f"({', '.join(PPOConfig.numeric_fields())}); structural fields need separate runs")


def make_population(
    base: PPOConfig,
    grid: Optional[dict] = None,
    *,
    random: Optional[dict] = None,
    num_random: int = 0,
    num_seeds: int = 1,
    key: Optional[jax.Array] = None,
) -> Population:
    """Members from a ``grid`` ``{field: [values]}`` (Cartesian product) and/or
    ``num_random`` samples of ``random`` ``{field: (low, high, "log"|"linear")}``.

    Every member is validated like a single config (bad values raise ConfigError)."""
    grid, random = dict(grid or {}), dict(random or {})
    for name in list(grid) + list(random):
        _numeric(name)
    if base.target_kl is None and ("target_kl" in grid or "target_kl" in random):
        raise ConfigError("sweeping target_kl needs a float target_kl in the base config (None disables it structurally)")
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] if grid else [{}]
    members = list(combos)
    if random:
        if num_random < 1:
            raise ConfigError("random search needs num_random >= 1")
        key = key if key is not None else jax.random.PRNGKey(0)
        u = np.asarray(jax.random.uniform(key, (num_random, len(random))))
        samples = []
        for row in u:
            s = {}
            for (name, (lo, hi, scale)), x in zip(random.items(), row):
                s[name] = float(np.exp(np.log(lo) + x * (np.log(hi) - np.log(lo)))) if scale == "log" else float(lo + x * (hi - lo))
            samples.append(s)
        members = [{**c, **s} for c in combos for s in samples]
    for m in members:
        validate(base.replace(**m))
    check_population_gammas(base, [base.replace(**m).gamma for m in members])
    leaves = {name: jnp.asarray([float(base.replace(**m).__getattribute__(name)) for m in members], jnp.float32)
              for name in PPOConfig.numeric_fields() if getattr(base, name) is not None}
    return Population(base, base.replace(**leaves), members, num_seeds)


def population_keys(key: jax.Array, population: Population) -> jax.Array:
    """``[M, S]`` keys; member m seed s uses the same key as seed s of a ``--seeds S`` run."""
    seeds = jax.random.split(key, population.num_seeds)
    return jnp.broadcast_to(seeds, (len(population.members),) + seeds.shape)


def vmap_population(train: Callable) -> Callable:
    """``train(key, cfg)`` -> ``f(keys [M, S], configs [M])`` with outputs ``[M, S, ...]``."""
    per_member = lambda keys, cfg: jax.vmap(lambda k: train(k, cfg))(keys)
    return jax.vmap(per_member)


def member(population: Population, index: int, runner_state=None) -> tuple[PPOConfig, Any]:
    """Member ``index``: its plain config and (if given) its ``[S, ...]`` runner state."""
    cfg = population.base.replace(**population.members[index])
    state = None if runner_state is None else jax.tree.map(lambda x: x[index], runner_state)
    return cfg, state


def make_act(network) -> Callable:
    """A jitted deterministic policy ``act(params, obs) -> action`` (mode of the distribution)."""
    return jax.jit(lambda params, obs: network.dist.mode(network.actor(params, obs)))


def parse_sweep(specs: Sequence[str]) -> dict:
    """``["lr=1e-4,3e-4", "clip_eps=0.1,0.2"]`` -> ``{"lr": [1e-4, 3e-4], "clip_eps": [0.1, 0.2]}``."""
    grid = {}
    for spec in specs:
        if "=" not in spec:
            raise ConfigError(f"--sweep {spec!r} must look like name=v1,v2,... e.g. lr=1e-4,3e-4")
        name, values = spec.split("=", 1)
        name = name.strip().replace("-", "_")
        _numeric(name)
        try:
            grid[name] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"--sweep {spec!r}: values must be numbers, e.g. {name}=1e-4,3e-4") from None
        if not grid[name]:
            raise ConfigError(f"--sweep {spec!r} lists no values")
    return grid


def results_table(population: Population, final_returns: np.ndarray) -> str:
    """Markdown table, best member first: member, swept values, mean/min/max final return.

    ``final_returns`` is ``[M, S]``."""
    names = list(population.members[0]) if population.members else []
    rows = []
    for i, m in enumerate(population.members):
        r = np.asarray(final_returns[i], np.float64)
        rows.append((np.nanmean(r), i, m, np.nanmin(r), np.nanmax(r)))
    rows.sort(key=lambda t: -np.inf if np.isnan(t[0]) else -t[0])
    head = "| member | " + " | ".join(names) + " | mean | min | max |"
    sep = "|" + "---|" * (len(names) + 4)
    lines = [head, sep]
    for mean, i, m, lo, hi in rows:
        vals = " | ".join(f"{m[n]:g}" for n in names)
        lines.append(f"| {i} | {vals} | {mean:.1f} | {lo:.1f} | {hi:.1f} |")
    return "\n".join(lines)
