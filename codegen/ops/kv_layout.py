"""The two KV-cache layouts the attention and store_kv kernels read, for their test cases and
references (not an op: the registry skips modules without OP).

- contiguous (dim BS = 0): kc [slots, Hkv, C, D], one whole context per slot;
- paged (BS = 16, 32, 64, ...): a pool kc [blocks, Hkv, BS, D] and a block table
  bt int32 [slots, C / BS]: position t of slot s is row t % BS of block bt[s, t / BS]
  (reame/kv_cache.py's PagedKVCache).
"""

from __future__ import annotations

import numpy as np

KV_DTYPES = {"f32": np.float32, "f16": np.float16}


def random_cache(rng, slots: int, Hkv: int, C: int, D: int, Dv: int, BS: int, kv: str,
                 share: bool = True):
    """(kc, vc, bt) filled with random values. Paged: each slot's blocks scattered over a pool
    with spare blocks; with `share`, slot 1 starts with slot 0's first block (a shared prefix)."""
    dt = KV_DTYPES[kv]
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


def cells(bt: np.ndarray, BS: int, seq: np.ndarray, pos: np.ndarray):
    """Where token (seq[i], pos[i]) lives: (slot or block, row) index arrays."""
    if not BS:
        return seq, pos
    return bt[seq, pos // BS], pos % BS
