"""The projections' weights laid out for decoding: each ``nn.Dense`` kernel ``W [in, out]``
copied once per generation to ``kernel_t = W.T [out, in]`` (PyTorch's ``Linear`` layout), read by
:func:`dense_interceptor` in every decode step.

Why: a decode step multiplies a few rows by every matrix of the model, so its time is the time
to read the weights. XLA:CPU streams a ``[out, in]`` matrix contracted over its minor axis about
1.4x faster than the ``[in, out]`` one at SmolLM2-135M's widths (8 rows: 20 against 27 ms per
step for the 30 layers' projections, benchmarks/NOTES.md). The copy costs one pass over the
weights per generation, about a decode step's reads, and lives only while sampling (the
training passes keep the stored layout: at hundreds of rows the two layouts run alike).

The contract: :func:`transposed_kernels` rewrites a parameter tree; a module reading it must
run under :func:`dense_interceptor` (``FlaxLM`` does), which computes such a Dense as ``x
kernel_t^T (+ bias)`` with a float32 sum cast to the layer's dtype
(:func:`purejaxppo.lm.models.matmul.logits_dot`, the product the LM head takes). A Dense holding LoRA
factors keeps them unmerged: over a bfloat16 base, ``W + s A B`` rounded to bfloat16 loses the
small deltas of early training (the sampler would draw from the base, not the policy trained).
Given the compute dtype, its ``A`` (``lora_a``, already scaled) is stacked under the kernel
instead (``kernel_t = [W^T; A^T]``, ``[out + r, in]``) when the kernel is kept in that dtype:
one product gives ``x W`` and ``x A`` (the same roundings as apart: the low-rank path casts
``A`` to the compute dtype anyway; at SmolLM2-135M's shape generation took 3.11-3.14 s against
3.32-3.48 s with the seven small ``x A`` products a layer apart, benchmarks/NOTES.md), and this
interceptor adds ``(x A) B``; otherwise
:func:`purejaxppo.lm.models.lora.dense_interceptor`, outside this one, adds the low-rank path.
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax.numpy as jnp

from purejaxppo.lm.models.matmul import logits_dot

#: a Dense's parameter names (with LoRA's factors beside its kernel, purejaxppo.lm.models.lora.lora_attach)
_DENSE = frozenset({"kernel", "bias", "lora_a", "lora_b"})


def transposed_kernels(params, compute_dtype=None):
    """``params`` with every 2-D ``kernel`` of a Dense-shaped node (its leaves among ``kernel``,
    ``bias``, ``lora_a``, ``lora_b``) replaced by ``kernel_t = kernel.T``; everything else as is.
    A node's LoRA ``lora_a [in, r]`` joins the copy (``kernel_t = [kernel.T; lora_a.T]``, the
    node keeping ``lora_b``) when ``compute_dtype`` is the kernel's dtype (then the low-rank
    product reads ``A`` in that dtype either way). The untied LM head of
    :class:`purejaxppo.lm.models.llama.Llama` (a node holding ``kernel`` alone) reads ``kernel_t``
    itself (``reads_kernel_t``)."""
    if not isinstance(params, Mapping):
        return params
    out = {k: transposed_kernels(v, compute_dtype) for k, v in params.items()}
    kernel = params.get("kernel")
    if kernel is not None and not isinstance(kernel, Mapping) and jnp.ndim(kernel) == 2 and set(params) <= _DENSE:
        del out["kernel"]
        out["kernel_t"] = jnp.transpose(kernel)
        a = params.get("lora_a")
        if a is not None and compute_dtype is not None and jnp.dtype(compute_dtype) == kernel.dtype:
            del out["lora_a"]
            out["kernel_t"] = jnp.concatenate([out["kernel_t"], jnp.transpose(a).astype(kernel.dtype)], axis=0)
    return out


def dense_interceptor(next_fun, args, kwargs, context):
    """A Flax method interceptor (``nn.intercept_methods``): an ``nn.Dense`` holding ``kernel_t``
    (:func:`transposed_kernels`) returns ``x kernel_t^T (+ bias)`` in its compute dtype (``dtype``,
    else the inputs' and kernel's promoted type, as ``nn.Dense``). ``ValueError`` when another
    kind of module holds ``kernel_t`` (it would not find its ``kernel``), unless it declares
    ``reads_kernel_t = True`` and reads the copy itself."""
    module = context.module
    if context.method_name != "__call__" or not module.has_variable("params", "kernel_t"):
        return next_fun(*args, **kwargs)
    folded = module.has_variable("params", "lora_b") and not module.has_variable("params", "lora_a")
    if getattr(module, "reads_kernel_t", False) and not folded:  # a module that reads the copy itself
        return next_fun(*args, **kwargs)  # (Llama's untied head)
    if not isinstance(module, nn.Dense):
        raise ValueError(
            f"a transposed kernel on {module.name!r} ({type(module).__name__}): only nn.Dense layers read "
            "one; build the FlaxLM with transposed_decode=False for this model"
        )
    x, w_t = args[0], module.get_variable("params", "kernel_t")
    dtype = module.dtype or jnp.result_type(x.dtype, w_t.dtype)
    z = logits_dot(x.astype(dtype), w_t, vocab_axis=0)  # float32 sum, one 2-D product
    y = z[..., : module.features].astype(dtype)
    if module.use_bias:
        y = y + module.get_variable("params", "bias").astype(dtype)
    if folded:  # x A came with x W (lora.dense_interceptor's low-rank path, its roundings)
        b = module.get_variable("params", "lora_b").astype(dtype)
        y = y + jnp.dot(z[..., module.features :].astype(dtype), b)
    return y
