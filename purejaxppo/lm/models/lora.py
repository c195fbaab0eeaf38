"""LoRA as a parameter transform: ``lora_init(key, params, rank, alpha, targets) -> adapters``,
``lora_attach(base, adapters) -> params`` (what training runs) and ``lora_merge(base, adapters)
-> params`` (what export writes).

No model changes and no second model class: the model still takes its ordinary parameter tree,
and the tree it gets is a pure function of the frozen base and the trainable adapters. A
targeted kernel ``W [in, out]`` (a leaf named ``kernel`` whose module path ends with one of
``targets``) becomes ``W + (alpha / rank) * A @ B`` with ``A [in, r]`` drawn as PEFT does
(uniform, ``±1/sqrt(in)``) and ``B [r, out]`` zero, so fresh adapters give the base model
exactly. A kernel of more than two dimensions (``[in, *out]``) is treated as ``[in, prod(out)]``.

``full`` names modules trained whole (their leaves are copied into the adapters and replace
the base's): a value head, which has no base to adapt. Everything else stays frozen.

Training runs unmerged (:func:`lora_attach` and :func:`dense_interceptor`): each adapted Dense
computes ``x W + (x (s A)) B``, so neither a merged copy of ``W`` nor its full-size gradient
exists. :func:`lora_merge` forms ``W + s A B`` (for export, and for models that do not apply the
interceptor); the merged tree is in the adapters' dtype (float32) even over a bfloat16 base:
small deltas would round away in a bfloat16 sum.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import struct

#: module names LoRA adapts by default: the attention and MLP projections of the Llama family
#: and of GPT-2 (``lora_targets=()`` in the config means these)
DEFAULT_TARGETS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "c_attn",
    "c_proj",
    "c_fc",
)
FULL = ("value_head",)  # trained whole: no base to adapt


@struct.dataclass
class Adapters:
    """The trainable part of a LoRA model: a pytree (only ``tree`` is traced; ``scale`` is static).

    Attributes:
      tree: mirrors the base parameters' nesting down to what it changes: at a targeted kernel
        ``W [in, out]`` the factors ``{"lora_a": [in, r], "lora_b": [r, out]}`` (float32 by
        default), at a leaf trained whole (the value head) the new array.
      scale: ``alpha / rank``, static (part of the tree's structure, not trained).
    """

    tree: dict
    scale: float = struct.field(pytree_node=False)


def _keys(path) -> tuple:
    return tuple(str(getattr(p, "key", getattr(p, "name", p))) for p in path)


def _matches(module_path: tuple, names: Sequence[str]) -> bool:
    """``module_path`` ends with one of ``names`` (each one name, or several joined by ``/``)."""
    joined = "/".join(module_path)
    return any(joined == n or joined.endswith("/" + n) for n in names)


def lora_paths(params, targets: Sequence[str] = DEFAULT_TARGETS) -> list[tuple]:
    """The key paths of ``params``' kernels that ``targets`` select (sorted)."""
    found = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        keys = _keys(path)
        if keys[-1] == "kernel" and jnp.ndim(leaf) >= 2 and _matches(keys[:-1], targets):
            found.append(keys)
    return sorted(found)


def check_targets(params, rank: int, alpha: float, targets: Sequence[str] = ()) -> None:
    """That ``targets`` (empty: :data:`DEFAULT_TARGETS`) select a kernel of ``params``, before
    any adapter is made.

    Args:
      params: the model's variables; rank, alpha, targets: as :func:`lora_init`.
    Returns:
      None.
    Raises:
      ValueError: :func:`lora_init`'s, listing the kernels the model has.
    """
    targets = tuple(targets) or DEFAULT_TARGETS
    if not lora_paths(params, targets):
        lora_init(jax.random.PRNGKey(0), params, rank, alpha, targets)


def _set(tree: dict, keys: tuple, value) -> None:
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def lora_init(
    key,
    params,
    rank: int,
    alpha: float,
    targets: Sequence[str] = DEFAULT_TARGETS,
    full: Sequence[str] = FULL,
    dtype=jnp.float32,
) -> Adapters:
    """Fresh adapters: applied to ``params`` they give the base model exactly (``B`` is zero).

    Args:
      key: a PRNG key for the ``A`` factors.
      params: the model's variables (e.g. ``{"params": ...}``), the frozen base.
      rank: ``r``, a positive int.
      alpha: the LoRA alpha; the update is scaled by ``alpha / rank``.
      targets: module names whose ``kernel`` is adapted (a module path ending with one of
        them; several names joined by ``/`` match a path suffix). Default: the attention and
        MLP projections of the Llama family and of GPT-2.
      full: module names whose leaves are trained whole (copied in ``dtype``).
      dtype: the adapters' dtype.

    Returns:
      :class:`Adapters`: at every selected kernel ``W [in, *out]`` the factors ``A [in, r]``
      (uniform ``+-1/sqrt(in)``, as PEFT draws them) and ``B [r, prod(out)]`` (zeros).

    Raises:
      ValueError: ``rank`` is not a positive int, or ``targets`` selects no kernel (the
        message lists the kernels the model has).
    """
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"LoRA rank={rank!r} must be a positive integer")
    paths = lora_paths(params, targets)
    if not paths:
        kernels = sorted(
            {
                "/".join(_keys(p)[:-1])
                for p, x in jax.tree_util.tree_flatten_with_path(params)[0]
                if _keys(p)[-1] == "kernel"
            }
        )
        raise ValueError(
            f"LoRA targets {tuple(targets)} match no kernel of this model; its kernels are "
            f"{kernels[:8]}{' ...' if len(kernels) > 8 else ''} (name a module, e.g. "
            f"{kernels[0].rsplit('/', 1)[-1] if kernels else 'q_proj'!r})"
        )
    leaves = dict((_keys(p), x) for p, x in jax.tree_util.tree_flatten_with_path(params)[0])
    tree: dict = {}
    for i, keys in enumerate(paths):
        w = leaves[keys]
        fan_in, fan_out = w.shape[0], math.prod(w.shape[1:])
        bound = 1.0 / math.sqrt(fan_in)
        a = jax.random.uniform(jax.random.fold_in(key, i), (fan_in, rank), dtype, -bound, bound)
        _set(tree, keys, {"lora_a": a, "lora_b": jnp.zeros((rank, fan_out), dtype)})
    for keys, x in leaves.items():
        if any(k in full for k in keys[:-1]):
            _set(tree, keys, jnp.asarray(x, dtype))
    return Adapters(tree, float(alpha) / rank)


def lora_delta(w, factors: Mapping, scale: float):
    """``W + scale * A @ B`` (``A @ B`` reshaped to ``W``'s shape), in the promoted dtype of
    ``W`` and the factors (the product accumulated in float32)."""
    a, b = factors["lora_a"], factors["lora_b"]
    out = jnp.result_type(w.dtype, a.dtype)
    ab = jnp.matmul(a, b, preferred_element_type=jnp.float32).reshape(w.shape)
    return (w.astype(jnp.float32) + scale * ab).astype(out)


def _merge(base, node, scale):
    if node is None:
        return base
    if isinstance(node, Mapping) and "lora_a" in node:
        return lora_delta(base, node, scale)
    if isinstance(base, Mapping):
        extra = set(node) - set(base)
        if extra:
            raise ValueError(f"adapters name {sorted(extra)}, which the base parameters lack (another model?)")
        return {k: _merge(v, node.get(k), scale) for k, v in base.items()}
    return node  # a leaf trained whole


def lora_merge(base, adapters: Adapters):
    """The merged parameters, for export or for a model applied without LoRA's interceptor.

    A pure function of ``(base, adapters)``, differentiable in both. The merged kernels are in
    the promoted dtype of the base and the adapters (float32 adapters over a bfloat16 base give
    float32: small deltas would round away in a bfloat16 sum).

    Args:
      base: the frozen base variables, as given to :func:`lora_init`.
      adapters: the trained :class:`Adapters`.

    Returns:
      ``base``'s tree with every adapted kernel replaced by ``W + scale * A @ B`` and every leaf
      trained whole by the adapters' copy.

    Raises:
      ValueError: the adapters name modules the base lacks (another model's adapters).
    """
    return _merge(base, adapters.tree, adapters.scale)


def _attach(base, node, scale):
    if node is None:
        return base
    if isinstance(base, Mapping):
        extra = set(node) - set(base)
        if extra:
            raise ValueError(f"adapters name {sorted(extra)}, which the base parameters lack (another model?)")
        out = {k: _attach(v, node.get(k), scale) for k, v in base.items()}
        factors = node.get("kernel")
        if isinstance(factors, Mapping) and "lora_a" in factors and jnp.ndim(base["kernel"]) == 2:
            # the Dense computes x W + (x (s A)) B (:func:`dense_interceptor`): W is read, never differentiated
            out["kernel"] = jax.lax.stop_gradient(base["kernel"])
            out["lora_a"] = scale * factors["lora_a"]
            out["lora_b"] = factors["lora_b"]
        return out
    if isinstance(node, Mapping) and "lora_a" in node:
        return lora_delta(base, node, scale)  # a kernel of more than two dimensions: merged
    return node  # a leaf trained whole


def lora_attach(base, adapters: Adapters):
    """The parameters a LoRA-aware model trains with, unmerged: no full-size ``W + s A B`` is
    formed, and under gradient no full-size ``dW``, only ``dA``, ``dB`` (and the activations'
    cotangents). Only a model applied under LoRA's Dense interceptor reads the factors
    (:class:`~purejaxppo.lm.models.adapters.FlaxLM` is).

    Args:
      base: the frozen base variables.
      adapters: the :class:`Adapters`.

    Returns:
      ``base``'s tree with ``lora_a = scale * A [in, r]`` and ``lora_b = B [r, out]`` beside
      every adapted 2-D ``kernel`` (the kernel under ``stop_gradient``), every leaf trained
      whole replaced, and a kernel of more than two dimensions merged as :func:`lora_merge`
      does.

    Raises:
      ValueError: the adapters name modules the base lacks.
    """
    return _attach(base, adapters.tree, adapters.scale)


def dense_interceptor(next_fun, args, kwargs, context):
    """A Flax method interceptor (``nn.intercept_methods``): a ``nn.Dense`` whose parameters
    hold ``lora_a [in, r]``, ``lora_b [r, out]`` (:func:`lora_attach`) returns ``x W (+ bias) +
    (x lora_a) lora_b``, the low-rank path in the layer's output dtype. ``ValueError`` when
    another kind of module holds factors (it would ignore them silently)."""
    module = context.module
    if context.method_name != "__call__" or not module.has_variable("params", "lora_a"):
        return next_fun(*args, **kwargs)
    if not isinstance(module, nn.Dense):
        raise ValueError(
            f"LoRA factors on {module.name!r} ({type(module).__name__}): only nn.Dense layers take them unmerged"
        )
    y = next_fun(*args, **kwargs)
    a, b = (module.get_variable("params", n).astype(y.dtype) for n in ("lora_a", "lora_b"))
    return y + jnp.dot(jnp.dot(args[0].astype(y.dtype), a), b)


def count(tree) -> int:
    """The number of scalars in a pytree (e.g. the trainable adapters against the base).

    Args:
      tree: any pytree of arrays (or array-likes with a shape).

    Returns:
      The sum of the leaves' sizes, a Python int.
    """
    return sum(math.prod(jnp.shape(x)) for x in jax.tree.leaves(tree))


def as_dtype(tree: Any, dtype) -> Any:
    """``tree`` with every floating leaf cast to ``dtype`` (a frozen base kept in bfloat16)."""
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)
