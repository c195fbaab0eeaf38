"""Masked softmax attention shared by every model family (TinyLM, GPT-2, the Llama family), so
they mask padded keys and future slots the same way: the causal mask of a chunk against its
cache, and the attention itself (float32 scores and softmax, grouped-query heads, query blocks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_NEG = -1e9  # finite: a row with every key masked stays finite (softmax -> uniform), never NaN


def attention_mask(key_valid: jax.Array, slot: jax.Array | int, length: int) -> jax.Array:
    """``[B, length, S]``: queries at slots ``slot .. slot+length-1`` see keys that are valid
    and not in the future; a query always sees itself (no empty rows)."""
    q = slot + jnp.arange(length)[:, None]
    k = jnp.arange(key_valid.shape[1])[None, :]
    return ((k <= q)[None] & key_valid[:, None, :]) | (k == q)[None]


#: queries per block of a teacher-forced attention pass (:func:`attend`): on CPU, 64-query blocks
#: made a GPT-2 gradient at 263 tokens about 25% faster than one block (benchmarks/NOTES.md)
QUERY_BLOCK = 64


#: a KV cache's layout, per layer (:func:`write_kv`): keys ``[B, K, S, hd]``, values ``[B, K, hd, S]``.
#: Both decode products then contract their operand's minor axis (``q . k`` over ``hd``, ``att . v``
#: over the slots): values stored ``[B, K, S, hd]`` made generation at SmolLM2-135M's shape 0.2 s
#: slower on CPU (``att . v`` read across the minor axis at every layer and step, benchmarks/NOTES.md).
CACHE_KEYS, CACHE_VALUES = "bhkd", "bhdk"


def write_kv(kv, k, v, slot):
    """A layer's cache ``kv = (keys [B, K, S, hd], values [B, K, hd, S])`` with a chunk's ``k, v
    [B, L, K, hd]`` written at slots ``slot .. slot+L-1`` (cast to the cache's dtype)."""
    keys, values = kv
    keys = jax.lax.dynamic_update_slice_in_dim(keys, k.transpose(0, 2, 1, 3).astype(keys.dtype), slot, axis=2)
    values = jax.lax.dynamic_update_slice_in_dim(values, v.transpose(0, 2, 3, 1).astype(values.dtype), slot, axis=3)
    return keys, values


def attend(q, k, v, attn_mask, spec: str, query_block: int = 0):
    """Masked softmax attention ``q [B, L, H, hd]``, keys and values ``[B, S, K, hd]`` (``spec
    "bkhd"``, a chunk's own) or a cache's (``"cache"``: keys ``[B, K, S, hd]``, values ``[B, K,
    hd, S]``, :data:`CACHE_KEYS`), ``attn_mask [B, L, S]``
    ``-> [B, L, H, hd]``; scores and softmax in float32, scaled by ``1/sqrt(hd)``. ``K``
    key/value heads divide the ``H`` query heads (grouped-query attention: query head ``h``
    reads key/value head ``h // (H // K)``, as HF's ``repeat_kv``; the queries are grouped).

    ``query_block > 0`` (teacher-forced only: ``S == L``, query ``i`` at slot ``i``): the queries
    go in blocks of that many, each block reading the keys up to its own end only. Exact, not an
    approximation: the keys after a block's last query are masked for all of its queries
    (``attention_mask`` is causal), so their softmax weight is ``exp(_NEG - max) == 0``: about
    half of the score and softmax work skipped on long sequences."""
    if spec not in ("bkhd", "cache"):
        raise ValueError(f"attend: spec {spec!r} is not 'bkhd' or 'cache'")
    kspec, vspec = (spec, spec) if spec == "bkhd" else (CACHE_KEYS, CACHE_VALUES)
    l, s = q.shape[1], k.shape[kspec.index("k")]
    if query_block and s != l:
        raise ValueError(f"attend: query blocks need the chunk's own keys (S == L), got L={l}, S={s}")
    b, _, h, hd = q.shape
    groups = h // k.shape[kspec.index("h")]
    if groups > 1:  # [B, L, K, G, hd]: a group axis "g" in every spec (absent without GQA: same program as before)
        q = q.reshape(b, l, h // groups, groups, hd)
    qs, ss = ("bqhgd", "bhgqk") if groups > 1 else ("bqhd", "bhqk")
    heads_first = bool(query_block) and spec == "bkhd"
    if heads_first:  # once to heads-first: blocks slice keys in the products' layout (NOTES: 2-9% on CPU)
        q = q.transpose((0, 2, 3, 1, 4) if groups > 1 else (0, 2, 1, 3))  # [B, K, G, L, hd] / [B, H, L, hd]
        (k, v), qs = (x.transpose(0, 2, 1, 3) for x in (k, v)), ("bhgqd" if groups > 1 else "bhqd")
        kspec = vspec = "bhkd"
    outs = []
    for lo in range(0, l, query_block) if query_block else [0]:
        hi = min(lo + query_block, l) if query_block else l
        ends = hi if query_block else s  # keys this block can see
        kb = jax.lax.slice_in_dim(k, 0, ends, axis=kspec.index("k"))
        vb = jax.lax.slice_in_dim(v, 0, ends, axis=vspec.index("k"))
        qb = jax.lax.slice_in_dim(q, lo, hi, axis=qs.index("q"))  # the block's queries
        scores = jnp.einsum(f"{qs},{kspec}->{ss}", qb, kb, preferred_element_type=jnp.float32)
        mask = attn_mask[:, None, None, lo:hi, :ends] if groups > 1 else attn_mask[:, None, lo:hi, :ends]
        scores = jnp.where(mask, scores / np.sqrt(hd), _NEG)
        att = jax.nn.softmax(scores, axis=-1).astype(vb.dtype)  # softmax in float32 under bf16
        outs.append(jnp.einsum(f"{ss},{vspec}->{qs}", att, vb))
    out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=qs.index("q"))
    if heads_first:
        out = out.transpose((0, 3, 1, 2, 4) if groups > 1 else (0, 2, 1, 3))
    return out.reshape(b, l, h, hd)
