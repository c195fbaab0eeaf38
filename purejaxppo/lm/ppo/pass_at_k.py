"""pass@k and mean@k: how well ``k`` sampled completions per problem do, estimated from ``n >= k``.

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code") is the chance
that at least one of ``k`` completions drawn for a problem is correct. With ``n`` samples of
which ``c`` are correct, the unbiased estimate per problem is

    pass@k = 1 - C(n - c, k) / C(n, k)

then averaged over the problems (the plain ``1 - (1 - c / n) ** k`` is biased low). The
binomials overflow long before ``n`` is large, so the ratio is taken as the product

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

which is 1 for ``c = 0`` (the empty product) and exactly 0 once ``n - c < k`` (the factor
``i = k`` is ``1 - k / k = 0``: every draw of ``k`` holds a correct one).

mean@k is the mean score of ``k`` samples (a graded reward's scores as they are). A sample
counts as correct where its score is ``>= threshold`` (default 1.0: an exact-match reward's
1, a graded reward's full marks); a NaN score never counts.

Host side in NumPy (float64); given a ``jax.Array`` each function computes the same in
``jax.numpy`` (float32, jittable; ``n`` and ``k`` then Python ints).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _check_k(k, n) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if np.any(np.asarray(n) < k):
        raise ValueError(f"k={k} needs at least k samples per problem, got n={np.min(n)}")


def pass_at_k(n, c, k: int):
    """The unbiased pass@k estimate of each problem (the module: ``1 - C(n-c, k) / C(n, k)``
    as a product); average it over the problems for a run's pass@k.

    Args:
      n: samples per problem: an int, or (NumPy) an integer array broadcasting with ``c``.
      c: correct samples per problem, integers in ``[0, n]``, any shape ``[...]``.
      k: the number of draws, ``1 <= k <= n`` (a Python int).

    Returns:
      ``[...]`` per problem in ``[0, 1]``: float64 NumPy, or a float32 ``jax.Array`` when ``c``
      is one (then ``n`` must be a Python int; ``c`` is not range-checked: it may be traced).

    Raises:
      ValueError: ``k < 1``, ``k > n``, or (NumPy) a ``c`` outside ``[0, n]`` or not whole.
    """
    if isinstance(c, jax.Array):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ValueError(f"with a jax.Array c, n must be a Python int (samples per problem), got {n!r}")
        _check_k(k, n)
        i = jnp.arange(1, n + 1, dtype=jnp.float32)
        factors = jnp.where(i > (n - c)[..., None], 1.0 - k / i, 1.0)
        return 1.0 - jnp.prod(factors, axis=-1)
    c = np.asarray(c)
    n = np.broadcast_to(np.asarray(n), c.shape)
    _check_k(k, n)
    if c.size and (np.any(c != np.round(c)) or np.any(c < 0) or np.any(c > n)):
        raise ValueError(f"c must be whole numbers in [0, n], got c={c.tolist()} for n={n.tolist()}")
    i = np.arange(1, int(n.max(initial=0)) + 1, dtype=np.float64)
    taken = (i > (n - c)[..., None]) & (i <= n[..., None])  # i = n - c + 1 .. n
    return 1.0 - np.prod(np.where(taken, 1.0 - k / i, 1.0), axis=-1)


def mean_at_k(scores, k=None):
    """mean@k of each problem: the mean score of its first ``k`` samples (the samples are
    independent draws, so any ``k`` of them estimate the same; ``k = n``, all of them, has the
    least variance).

    Args:
      scores: ``[..., n]`` every sample's score (graded or 0/1).
      k: the samples averaged, ``1 <= k <= n``; None: all ``n``.

    Returns:
      ``[...]`` per problem: float64 NumPy, or a ``jax.Array`` when ``scores`` is one.

    Raises:
      ValueError: ``k`` outside ``[1, n]``.
    """
    xp = jnp if isinstance(scores, jax.Array) else np
    scores = scores if xp is jnp else np.asarray(scores, np.float64)
    n = scores.shape[-1]
    k = n if k is None else k
    _check_k(k, n)
    return xp.mean(scores[..., :k], axis=-1)


def correct_counts(scores, threshold=1.0):
    """``c`` of each problem: its samples whose score is ``>= threshold`` (NaN: not correct).

    Args:
      scores: ``[..., n]`` every sample's score.
      threshold: the score a sample needs to count as correct (default 1.0).

    Returns:
      ``[...]`` integer counts in ``[0, n]`` (NumPy, or a ``jax.Array`` when ``scores`` is one).
    """
    xp = jnp if isinstance(scores, jax.Array) else np
    return xp.sum(xp.asarray(scores) >= threshold, axis=-1)
