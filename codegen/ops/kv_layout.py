"""The two KV-cache layouts the attention and store_kv kernels read, for their test cases and
references (not an op: the registry skips modules without OP).

- contiguous (dim BS = 0): kc [slots, Hkv, C, D], one whole context per slot;
- paged (BS = 16, 32, 64, ...): a pool kc [blocks, Hkv, BS, D] and a block table
  bt int32 [slots, C / BS]: position t of slot s is row t % BS of block bt[s, t / BS]
  (reame/kv_cache.py's PagedKVCache).

Element types (dim kv): f32, f16, and bf16, the AMX tile layout: bfloat16 bits (numpy uint16)
with the values transposed within a block, vc [blocks, Hkv, Dv, BS] (contiguous [slots, Hkv, Dv,
C]), so that 16 value dims x 32 keys are one AMX tile load (attn_prefill's amx family reads
both caches in place; docs/kernels-attention.md). Keys keep the row layout.
And bf16p, the pair layout of CPUs with AVX512_BF16 dot products but no AMX (paged only):
bfloat16 bits with each block's keys as pairs (d, d + 1) of its transpose, kc [blocks, Hkv, D/2,
BS, 2], and its values as pairs of consecutive keys, vc [blocks, Hkv, BS/2, Dv, 2]: one
vdpbf16ps takes 16 keys' pair (d, d + 1) against a query's (scores, keys in lanes) or 16 value
dims of a key pair against the pair's two weights (P.V), attn_decode's bf16dp family.
"""

from __future__ import annotations

import numpy as np

KV_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "bf16p": np.uint16}


def bf16_bits(x) -> np.ndarray:
    """float32 values as bfloat16 bits (uint16), rounded to nearest even, as vcvtneps2bf16 and
    store_kv do (a NaN stays a quiet NaN with its sign)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (b >> 16) | 0x40, r).astype(np.uint16)


def from_bf16(bits) -> np.ndarray:
    """bfloat16 bits (uint16) as float32 (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(x) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    return from_bf16(bf16_bits(x))


def to_pairs(kc: np.ndarray, vc: np.ndarray):
    """A paged cache in the row layout [blocks, Hkv, BS, d] as the bf16p pair layout (bits)."""
    nb, hkv, bs, d = kc.shape
    dv = vc.shape[-1]
    k = bf16_bits(kc).reshape(nb, hkv, bs, d // 2, 2).transpose(0, 1, 3, 2, 4)
    v = bf16_bits(vc).reshape(nb, hkv, bs // 2, 2, dv).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(k), np.ascontiguousarray(v)


def from_pairs(kc: np.ndarray, vc: np.ndarray):
    """The bf16p pair layout's bits as float32 in the row layout [blocks, Hkv, BS, d]."""
    nb, hkv, dp, bs, _ = kc.shape
    k = from_bf16(kc).transpose(0, 1, 3, 2, 4).reshape(nb, hkv, bs, 2 * dp)
    v = from_bf16(vc).transpose(0, 1, 2, 4, 3).reshape(nb, hkv, bs, vc.shape[3])
    return k, v


def random_cache(rng, slots: int, Hkv: int, C: int, D: int, Dv: int, BS: int, kv: str,
                 share: bool = True):
    """(kc, vc, bt) filled with random values. Paged: each slot's blocks scattered over a pool
    with spare blocks; with `share`, slot 1 starts with slot 0's first block (a shared prefix)."""
    dt = KV_DTYPES[kv]
    if kv == "bf16p":
        if not BS:
            raise ValueError("the bf16p layout is paged only")
        kc, vc, bt = random_cache(rng, slots, Hkv, C, D, Dv, BS, "f32", share)
        return (*to_pairs(kc, vc), bt)
    if kv == "bf16":
        kc, vc, bt = random_cache(rng, slots, Hkv, C, D, Dv, BS, "f32", share)
        return bf16_bits(kc), np.ascontiguousarray(bf16_bits(vc).swapaxes(-1, -2)), bt
    if not BS:
        kc = rng.standard_normal((slots, Hkv, C, D)).astype(dt)
        vc = rng.standard_normal((slots, Hkv, C, Dv)).astype(dt)
        return kc, vc, np.zeros(1, np.int32)
    if C % BS:
        raise ValueError(f"context {C} is not a multiple of the block size {BS}")
    mb = C // BS
    n_blocks = slots * mb + 3
    bt = rng.permutation(n_blocks)[:slots * mb].reshape(slots, mb).astype(np.int32)
    if share and slots > 1:
        bt[1, 0] = bt[0, 0]
    kc = rng.standard_normal((n_blocks, Hkv, BS, D)).astype(dt)
    vc = rng.standard_normal((n_blocks, Hkv, BS, Dv)).astype(dt)
    return kc, vc, bt


def contiguous(cache: np.ndarray, bt: np.ndarray, BS: int) -> np.ndarray:
    """A cache in the contiguous layout [slots, Hkv, C, d] (a paged one gathered through bt)."""
    if not BS:
        return cache
    slots, mb = bt.shape
    blocks = cache[bt.reshape(-1)]                       # [slots * mb, Hkv, BS, d]
    Hkv, d = cache.shape[1], cache.shape[3]
    return blocks.reshape(slots, mb, Hkv, BS, d).transpose(0, 2, 1, 3, 4).reshape(
        slots, Hkv, mb * BS, d)


def row_layout(kc: np.ndarray, vc: np.ndarray, kv: str):
    """Keys and values of any layout as float32 in the row layout [blocks or slots, Hkv, BS or C,
    d] (bf16 bits widened, the tile layout's values and the pair layout transposed back)."""
    if kv == "bf16":
        return from_bf16(kc), from_bf16(vc).swapaxes(-1, -2)
    if kv == "bf16p":
        return from_pairs(kc, vc)
    return kc.astype(np.float32, copy=False), vc.astype(np.float32, copy=False)


def write_rows(kc: np.ndarray, vc: np.ndarray, where, row, k: np.ndarray, v: np.ndarray,
               kv: str) -> None:
    """Tokens' rows k [n, Hkv, D], v [n, Hkv, Dv] into cells (where, row) of a cache (kv_layout.
    cells), in place, in its layout: what store_kv computes (f16 rounded as numpy's astype,
    bf16 bits rounded to nearest even)."""
    if kv == "bf16p":
        n, hkv, d = k.shape
        kc[where, :, :, row] = bf16_bits(k).reshape(n, hkv, d // 2, 2)
        vc[where, :, row // 2, :, row % 2] = bf16_bits(v)
    elif kv == "bf16":
        kc[where, :, row] = bf16_bits(k)
        vc[where, :, :, row] = bf16_bits(v)
    else:
        with np.errstate(over="ignore"):
            kc[where, :, row] = k.astype(kc.dtype)
            vc[where, :, row] = v.astype(vc.dtype)


def as_float(kc: np.ndarray, vc: np.ndarray, bt: np.ndarray, BS: int, kv: str):
    """Both caches as float32 in the contiguous row layout [slots, Hkv, C, d]: what the
    references read."""
    kc, vc = row_layout(kc, vc, kv)
    return contiguous(kc, bt, BS).astype(np.float32), contiguous(vc, bt, BS).astype(np.float32)


def cells(bt: np.ndarray, BS: int, seq: np.ndarray, pos: np.ndarray):
    """Where token (seq[i], pos[i]) lives: (slot or block, row) index arrays."""
    if not BS:
        return seq, pos
    return bt[seq, pos // BS], pos % BS
