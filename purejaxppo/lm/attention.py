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


def attend(q, k, v, attn_mask, spec: str, query_block: int = 0):
    """Masked softmax attention ``q [B, L, H, hd]``, keys and values ``[B, S, K, hd]`` (``spec
    "bkhd"``) or ``[B, K, S, hd]`` (``"bhkd"``, the cache's layout), ``attn_mask [B, L, S]``
    ``-> [B, L, H, hd]``; scores and softmax in float32, scaled by ``1/sqrt(hd)``. ``K``
    key/value heads divide the ``H`` query heads (grouped-query attention: query head ``h``
    reads key/value head ``h // (H // K)``, as HF's ``repeat_kv``; the queries are grouped).

    ``query_block > 0`` (teacher-forced only: ``S == L``, query ``i`` at slot ``i``): the queries
    go in blocks of that many, each block reading the keys up to its own end only. Exact, not an
    approximation: the keys after a block's last query are masked for all of its queries
    (``attention_mask`` is causal), so their softmax weight is ``exp(_NEG - max) == 0``: about
    half of the score and softmax work skipped on long sequences."""
    l, s = q.shape[1], k.shape[spec.index("k")]
    if query_block and s != l:
        raise ValueError(f"attend: query blocks need the chunk's own keys (S == L), got L={l}, S={s}")
    b, _, h, hd = q.shape
    groups = h // k.shape[spec.index("h")]
    if groups > 1:  # [B, L, K, G, hd]: a group axis "g" in every spec (absent without GQA: same program as before)
        q = q.reshape(b, l, h // groups, groups, hd)
    qs, ss = ("bqhgd", "bhgqk") if groups > 1 else ("bqhd", "bhqk")
    heads_first = bool(query_block) and spec == "bkhd"
    if heads_first:  # once to heads-first: blocks slice keys in the products' layout (NOTES: 2-9% on CPU)
        q = q.transpose((0, 2, 3, 1, 4) if groups > 1 else (0, 2, 1, 3))  # [B, K, G, L, hd] / [B, H, L, hd]
        (k, v), qs, spec = (x.transpose(0, 2, 1, 3) for x in (k, v)), ("bhgqd" if groups > 1 else "bhqd"), "bhkd"
    outs = []
    for lo in range(0, l, query_block) if query_block else [0]:
        hi = min(lo + query_block, l) if query_block else l
        ends = hi if query_block else s  # keys this block can see
        kb, vb = (jax.lax.slice_in_dim(x, 0, ends, axis=spec.index("k")) for x in (k, v))
        qb = jax.lax.slice_in_dim(q, lo, hi, axis=qs.index("q"))  # the block's queries
        scores = jnp.einsum(f"{qs},{spec}->{ss}", qb, kb, preferred_element_type=jnp.float32)
        mask = attn_mask[:, None, None, lo:hi, :ends] if groups > 1 else attn_mask[:, None, lo:hi, :ends]
        scores = jnp.where(mask, scores / np.sqrt(hd), _NEG)
        att = jax.nn.softmax(scores, axis=-1).astype(vb.dtype)  # softmax in float32 under bf16
        outs.append(jnp.einsum(f"{ss},{spec}->{qs}", att, vb))
    out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=qs.index("q"))
    if heads_first:
        out = out.transpose((0, 3, 1, 2, 4) if groups > 1 else (0, 2, 1, 3))
    return out.reshape(b, l, h, hd)
