"""Population-based training (Jaderberg et al. 2017) as one pure stage: exploit and explore.

A PBT population is a runs axis ``N`` (members, vmapped and sharded like seeds) whose
searched hyperparameters are a ``[N, K]`` array ``hparams`` (column ``k`` is
``space.names[k]``; the training step reads them as traced config leaves,
:meth:`SearchSpace.apply`). Every ``interval`` updates :func:`exploit_explore`:

1. **rank** the members by ``scores`` ``[N]`` (mean episode return over the recent window,
   :func:`window_score`). A NaN score (no episode completed in the window) takes no part:
   such a member neither wins nor loses. A member whose state is not finite always loses;
2. **exploit**: each of the bottom ``quantile`` copies a member drawn uniformly from the top
   ``quantile``: its whole runner state (params, optimizer state, env states and
   normaliser statistics) except its own PRNG key, so it does not replay the winner's
   future;
3. **explore**: the loser takes the winner's hyperparameters, each multiplied by 0.8 or 1.25
   (even odds) or, with probability ``resample_prob``, drawn afresh from its range; then
   clipped to the range.

Everything is ``jnp`` on whole-population arrays: no host round trip, usable inside ``jit``
and ``lax.cond`` (:mod:`purejaxppo.programs.pbt_program` composes it with the training step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError, PPOConfig, validate
from purejaxppo.config.numbers import parse_float

DISTRIBUTIONS = ("uniform", "loguniform")


@dataclass(frozen=True)
class SearchSpace:
    """The searched hyperparameters: ``names[k]`` ranges over ``[lows[k], highs[k]]``,
    sampled log-uniformly where ``log[k]``. Hashable (a static argument under ``jit``)."""

    names: tuple
    lows: tuple
    highs: tuple
    log: tuple

    @property
    def size(self) -> int:
        return len(self.names)

    def bounds(self) -> tuple[jax.Array, jax.Array]:
        """``(lows [K], highs [K])`` as float32 (the dtype the hyperparameters are traced in)."""
        return jnp.asarray(self.lows, jnp.float32), jnp.asarray(self.highs, jnp.float32)

    def sample(self, key: jax.Array, n: int) -> jax.Array:
        """``[n, K]`` float32 draws from the ranges (log-uniform where ``log``), clipped to them."""
        lo, hi = self.bounds()
        u = jax.random.uniform(key, (n, self.size), jnp.float32)
        is_log = jnp.asarray(self.log, bool)
        safe = lambda x: jnp.where(is_log, x, 1.0)  # log() of a linear range's 0 would be -inf
        log_x = jnp.exp(jnp.log(safe(lo)) + u * (jnp.log(safe(hi)) - jnp.log(safe(lo))))
        return jnp.clip(jnp.where(is_log, log_x, lo + u * (hi - lo)), lo, hi)

    def apply(self, config: PPOConfig, hparams: jax.Array) -> PPOConfig:
        """``config`` with each searched field replaced by its column of ``hparams [..., K]``."""
        return config.replace(**{name: hparams[..., k] for k, name in enumerate(self.names)})

    def members(self, hparams) -> list:
        """``[{name: value}]`` (Python floats) from ``hparams [N, K]``."""
        return [{name: float(row[k]) for k, name in enumerate(self.names)} for row in np.asarray(hparams)]

    def to_dict(self) -> dict:
        return {
            n: [lo, hi, "loguniform" if lg else "uniform"]
            for n, lo, hi, lg in zip(self.names, self.lows, self.highs, self.log)
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SearchSpace":
        names = tuple(d)
        return cls(
            names,
            tuple(float(d[n][0]) for n in names),
            tuple(float(d[n][1]) for n in names),
            tuple(d[n][2] == "loguniform" for n in names),
        )


def search_space(base: PPOConfig, ranges: dict) -> SearchSpace:
    """``{name: (low, high, "uniform"|"loguniform")}`` -> a checked :class:`SearchSpace`: numeric
    fields only, ``low < high`` (``low > 0`` for log ranges), both ends valid for ``base``."""
    if not ranges:
        raise ConfigError("PBT needs at least one searched hyperparameter, e.g. --search lr=loguniform:1e-5:1e-2")
    numeric = PPOConfig.numeric_fields()
    for name, (lo, hi, dist) in ranges.items():
        if name not in numeric:
            raise ConfigError(
                f"cannot search {name!r}: only numeric hyperparameters can change inside one "
                f"compile ({', '.join(numeric)})"
            )
        if getattr(base, name) is None:
            raise ConfigError(
                f"searching {name} needs a number in the base config (None disables it "
                f"structurally); pass e.g. --{name.replace('_', '-')} {lo}"
            )
        if dist not in DISTRIBUTIONS:
            raise ConfigError(f"--search {name}: distribution {dist!r} is unknown; use one of {DISTRIBUTIONS}")
        if not lo < hi:
            raise ConfigError(f"--search {name}: low={lo} must be below high={hi}")
        if dist == "loguniform" and lo <= 0:
            raise ConfigError(
                f"--search {name}: loguniform needs low > 0 (got {lo}); use uniform for a range that includes 0"
            )
        for v in (lo, hi):
            validate(base.replace(**{name: v}))
    names = tuple(ranges)
    return SearchSpace(
        names,
        tuple(float(ranges[n][0]) for n in names),
        tuple(float(ranges[n][1]) for n in names),
        tuple(ranges[n][2] == "loguniform" for n in names),
    )


def parse_search(specs: Sequence[str]) -> dict:
    """``["lr=loguniform:1e-5:1e-2", "ent-coef=uniform:0:0.05"]`` ->
    ``{"lr": (1e-5, 1e-2, "loguniform"), "ent_coef": (0.0, 0.05, "uniform")}``."""
    out = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        parts = rest.split(":")
        if not name or len(parts) != 3:
            raise ConfigError(
                f"--search {spec!r} must look like name=DIST:LOW:HIGH with DIST in {DISTRIBUTIONS}, "
                "e.g. lr=loguniform:1e-5:1e-2"
            )
        try:
            lo, hi = parse_float(parts[1]), parse_float(parts[2])
        except ValueError:
            raise ConfigError(
                f"--search {spec!r}: LOW and HIGH must be numbers, e.g. lr=loguniform:1e-5:1e-2"
            ) from None
        key = name.strip().replace("-", "_")
        if key in out:
            raise ConfigError(
                f"--search {key} is given twice; search each hyperparameter once (one "
                "--search NAME=DIST:LOW:HIGH per name)"
            )
        out[key] = (lo, hi, parts[0].strip())
    return out


def sample_members(key: jax.Array, space: SearchSpace, num_members: int) -> jax.Array:
    """The initial population: ``[num_members, K]`` draws from the ranges."""
    return space.sample(key, num_members)


def window_score(ret_sum: jax.Array, count: jax.Array) -> jax.Array:
    """Mean episode return ``ret_sum / count`` per member (``[N]``); NaN where ``count == 0``."""
    return jnp.where(count > 0, ret_sum / jnp.maximum(count, 1), jnp.nan)


def rank(scores: jax.Array, valid: jax.Array) -> jax.Array:
    """``[N]`` ascending rank of each valid member among the valid ones (ties: lower index
    ranks lower, so the order is deterministic); invalid members get ``N``."""
    n = scores.shape[0]
    s = jnp.where(valid, scores, 0.0)
    i, j = jnp.arange(n)[:, None], jnp.arange(n)[None, :]
    below = (s[None, :] < s[:, None]) | ((s[None, :] == s[:, None]) & (j < i))
    return jnp.where(valid, jnp.sum(below & valid[None, :], axis=1), n)


def exploit_explore(
    key: jax.Array,
    runners: Any,
    hparams: jax.Array,
    scores: jax.Array,
    space: SearchSpace,
    *,
    quantile: float = 0.25,
    resample_prob: float = 0.1,
    finite: Optional[jax.Array] = None,
    keep: Sequence[str] = ("rng",),
):
    """One PBT exploit/explore step over the whole population.

    ``runners``: a pytree with leading axis ``N`` (e.g. a :class:`~purejaxppo.step.train.RunnerState`
    ``[N, ...]``); ``hparams`` ``[N, K]``; ``scores`` ``[N]`` (NaN: no evidence, not ranked);
    ``finite`` ``[N]`` bools (False: the member's numbers blew up, so it is replaced whatever its
    score). Fields of a NamedTuple ``runners`` listed in ``keep`` stay the loser's own.

    Returns ``(runners, hparams, parents [N] int32)``: ``parents[i]`` is the member whose state
    ``i`` now holds (``i`` itself unless it lost). Losers are the ``max(1, floor(quantile * V))``
    lowest of the ``V`` valid members (``V >= 2``; none otherwise) plus every non-finite one;
    each copies a member drawn uniformly from as many highest ones."""
    if not 0.0 < quantile <= 0.5:
        raise ConfigError(f"quantile={quantile} must be in (0, 0.5]: the bottom and top groups may not overlap")
    n = scores.shape[0]
    finite = jnp.ones((n,), bool) if finite is None else finite
    valid = jnp.isfinite(scores) & finite
    n_valid = jnp.sum(valid)
    n_q = jnp.where(n_valid >= 2, jnp.maximum(1, jnp.floor(n_valid * quantile).astype(jnp.int32)), 0)
    r = rank(scores, valid)
    top = valid & (r >= n_valid - n_q)
    losers = ((valid & (r < n_q)) | ~finite) & jnp.any(top)
    k_pick, k_explore = jax.random.split(key)
    pick = jax.random.categorical(k_pick, jnp.where(top, 0.0, -jnp.inf), shape=(n,))
    parents = jnp.where(losers, pick, jnp.arange(n)).astype(jnp.int32)

    copied = jax.tree.map(lambda x: x[parents], runners)
    if hasattr(runners, "_replace") and keep:
        copied = copied._replace(**{f: getattr(runners, f) for f in keep})
    new_h = jnp.where(losers[:, None], explore(k_explore, hparams[parents], space, resample_prob), hparams)
    return copied, new_h, parents


def explore(key: jax.Array, hparams: jax.Array, space: SearchSpace, resample_prob: float = 0.1) -> jax.Array:
    """Perturbed ``hparams [N, K]``: each value x0.8 or x1.25 (even odds), or with probability
    ``resample_prob`` a fresh draw from its range; clipped to the range."""
    k_which, k_up, k_new = jax.random.split(key, 3)
    lo, hi = space.bounds()
    resample = jax.random.uniform(k_which, hparams.shape) < resample_prob
    factor = jnp.where(jax.random.bernoulli(k_up, 0.5, hparams.shape), 1.25, 0.8).astype(hparams.dtype)
    fresh = space.sample(k_new, hparams.shape[0])
    return jnp.clip(jnp.where(resample, fresh, hparams * factor), lo, hi)
