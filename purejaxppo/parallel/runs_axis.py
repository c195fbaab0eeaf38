"""Hyperparameter populations trained in ONE compile.

Numeric config fields are pytree leaves, so a config whose leaves are stacked arrays
describes many members; ``jax.vmap`` over (keys, configs) trains them all with one compiled
program. Members and seeds share ONE "runs" axis: ``R = M * S`` runs, run ``m*S + s`` is
member ``m`` with seed key ``s`` (:func:`runs`), so metrics come back ``[R, U]``
(``reshape(M, S, U)`` for a member-by-seed view). A single-config run is ``M = 1``.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.config.numbers import parse_float


class Population(NamedTuple):
    base: PPOConfig  # structural fields shared by every member
    configs: PPOConfig  # numeric leaves stacked to [M]
    members: list  # [{field: value}] the swept values of each member
    num_seeds: int


def _numeric(name: str):
    if name not in PPOConfig.numeric_fields():
        raise ConfigError(
            f"cannot sweep {name!r}: only numeric hyperparameters can vary inside one compile "
            f"({', '.join(PPOConfig.numeric_fields())}); structural fields need separate runs"
        )


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
        raise ConfigError(
            "sweeping target_kl needs a float target_kl in the base config (None disables it structurally)"
        )
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
                s[name] = (
                    float(np.exp(np.log(lo) + x * (np.log(hi) - np.log(lo))))
                    if scale == "log"
                    else float(lo + x * (hi - lo))
                )
            samples.append(s)
        members = [{**c, **s} for c in combos for s in samples]
    for m in members:
        validate(base.replace(**m))
    leaves = {
        name: jnp.asarray([float(base.replace(**m).__getattribute__(name)) for m in members], jnp.float32)
        for name in PPOConfig.numeric_fields()
        if getattr(base, name) is not None
    }
    return Population(base, base.replace(**leaves), members, num_seeds)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """``[S]`` keys: seed ``s`` of a ``--seeds S --seed seed`` run."""
    return jax.random.split(jax.random.PRNGKey(seed), num_seeds)


def runs(base: PPOConfig, members: Sequence[dict], num_seeds: int = 1, seed: int = 0):
    """The ``M x S`` runs of a population as ``(keys [R], configs [R])``, ``R = M * S``.

    ``members`` are ``{field: value}`` overrides of ``base`` (e.g. ``Population.members``).
    Run ``m*S + s`` is member ``m`` with seed key ``s``; every member sees the SAME ``S``
    seed keys (:func:`seed_keys`: common random numbers make members comparable, and
    member ``m`` seed ``s`` equals seed ``s`` of a plain ``--seeds S`` run of its config).
    ``configs`` has numeric leaves stacked to ``[R]`` (:func:`~purejaxppo.parallel.sharding.stack_configs`)."""
    from purejaxppo.parallel.sharding import stack_configs

    members = list(members)
    if not members:
        raise ConfigError("a population needs at least one member")
    keys = jnp.tile(seed_keys(seed, num_seeds), (len(members), 1))
    configs = stack_configs([base.replace(**m) for m in members for _ in range(num_seeds)])
    return keys, configs


def member(population: Population, index: int, runner_state=None) -> tuple[PPOConfig, Any]:
    """Member ``index``: its plain config and (if given) its ``[S, ...]`` slice of a runner
    state ``[R, ...]`` laid out by :func:`runs`."""
    cfg = population.base.replace(**population.members[index])
    s = population.num_seeds
    state = None if runner_state is None else jax.tree.map(lambda x: x[index * s : (index + 1) * s], runner_state)
    return cfg, state


def parse_sweep(specs: Sequence[str]) -> dict:
    """``["lr=1e-4,3e-4", "clip_eps=0.1,0.2"]`` -> ``{"lr": [1e-4, 3e-4], "clip_eps": [0.1, 0.2]}``."""
    grid = {}
    for spec in specs:
        if "=" not in spec:
            raise ConfigError(f"--sweep {spec!r} must look like name=v1,v2,... e.g. lr=1e-4,3e-4")
        name, values = spec.split("=", 1)
        name = name.strip().replace("-", "_")
        _numeric(name)
        items = values.split(",")
        if not values.strip():
            raise ConfigError(f"--sweep {spec!r} lists no values")
        if any(not v.strip() for v in items):
            raise ConfigError(
                f"--sweep {spec!r} has an empty value (two commas in a row, or one at an end); "
                f"list each value once: {name}={','.join(v.strip() for v in items if v.strip())}"
            )
        try:
            grid[name] = [parse_float(v) for v in items]
        except ValueError:
            raise ConfigError(f"--sweep {spec!r}: values must be numbers, e.g. {name}=1e-4,3e-4") from None
        twice = sorted({v for v in grid[name] if grid[name].count(v) > 1})
        if twice:
            raise ConfigError(
                f"--sweep {spec!r} lists {', '.join(f'{v:g}' for v in twice)} more than once (the "
                "members would be the same run); list each value once, and use --seeds for repetitions"
            )
    return grid


def results_table(population, final_returns: np.ndarray) -> str:
    """Markdown table, best member first: member, swept values, mean/min/max final return.

    ``population``: a :class:`Population` or its list of members; ``final_returns`` is
    ``[M, S]`` (or ``[R]``, reshaped)."""
    members = list(getattr(population, "members", population))
    final_returns = np.asarray(final_returns).reshape(len(members), -1)
    names = list(members[0]) if members else []
    rows = []
    for i, m in enumerate(members):
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
