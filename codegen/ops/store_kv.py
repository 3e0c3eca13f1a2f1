"""store_kv: write the keys and values of a batch into one layer's KV cache.

args ("k", "v", "kc", "vc", "pos", "seq", "bt", "n"): k f32 [n, Hkv, D], v f32 [n, Hkv, Dv];
kc, vc the layer's cache arrays (f32 or f16) in one of the layouts of ops/kv_layout.py: paged
(dim BS > 0: a pool [blocks, Hkv, BS, D] / [blocks, Hkv, BS, Dv] and bt i32 [slots, C / BS],
reame.kv_cache.PagedKVCache) or contiguous (BS = 0: [slots, Hkv, C, D], bt unused); pos, seq i32
[n]. Token i's rows go to position pos[i] of slot seq[i]: row pos % BS of block
bt[seq, pos / BS] (paged) or (seq, :, pos, :). dims ("Hkv", "D", "Dv", "C", "BS", "kv"),
kv = "f32" | "f16" | "bf16" | "bf16p". f16 conversion rounds to nearest even and is bit-exact
with numpy's astype(float16), including overflow to inf and denormals (NaN becomes a quiet NaN with its sign);
bf16 (the AMX tile layout of ops/kv_layout.py) writes bfloat16 bits rounded to nearest even
(kv_layout.bf16_bits) and each value row as a column of its block's transposed values
vc[block, h, :, pos % BS]; bf16p (the pair layout, paged only) the same bits as pairs
kc[block, h, d / 2, pos % BS, d % 2] and vc[block, h, (pos % BS) / 2, :, pos % 2].
Threading: the n*Hkv (token, head) rows are split between threads; with bf16(p), whole heads (a
block's transposed values put consecutive positions in one cache line, which threads storing
other tokens of one head would share).
Tolerance: exact.
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant
from .kv_layout import cells, random_cache, write_rows


def _case(spec, rng, n):
    Hkv, D, Dv, C, BS, kv = (spec.p[k] for k in ("Hkv", "D", "Dv", "C", "BS", "kv"))
    seqs = 3
    if n > seqs * C:
        raise ValueError("more tokens than cache rows")
    where = rng.choice(seqs * C, n, replace=False)       # distinct (seq, pos) per token
    seq, pos = (where // C).astype(np.int32), (where % C).astype(np.int32)
    k = (rng.standard_normal((n, Hkv, D)) * 2).astype(np.float32)
    v = (rng.standard_normal((n, Hkv, Dv)) * 2).astype(np.float32)
    if k.size > 4:
        k.reshape(-1)[:4] = [65519.0, 6.1e-6, -3e-8, 1.00048828125]   # ties, denormal, -0
    kc, vc, bt = random_cache(rng, seqs, Hkv, C, D, Dv, BS, kv, share=False)
    bufs = {"k": k, "v": v, "kc": kc, "vc": vc, "kc_in": kc.copy(), "vc_in": vc.copy(),
            "pos": pos, "seq": seq, "bt": bt}
    return Case(bufs, OP.pack(bufs, n=n), ("kc", "vc"))


def reference(kc, vc, k, v, pos, seq, bt=None, BS=0, kv="f32"):
    kc, vc = kc.copy(), vc.copy()
    where, row = cells(bt, BS, seq, pos)
    write_rows(kc, vc, where, row, k, v, kv)
    return kc, vc


def _reference(spec, case):
    b = case.buffers
    kc, vc = reference(b["kc_in"], b["vc_in"], b["k"], b["v"], b["pos"], b["seq"], b["bt"],
                       spec.p["BS"], spec.p["kv"])
    with np.errstate(invalid="ignore"):
        return {"kc": kc.astype(np.float64), "vc": vc.astype(np.float64)}


OP = Op(
    name="store_kv",
    args=("k", "v", "kc", "vc", "pos", "seq", "bt", "n"),
    dims=("Hkv", "D", "Dv", "C", "BS", "kv"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4},),
                "portable: integer f32->f16 rounding"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8},), "F16C vcvtps2ph"),
        Variant("simd", "avx512", ("F32",), ({"vl": 16},), "AVX-512 vcvtps2ph"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (0.0, 1e-30),       # exact (atol > 0 only to avoid 0/0)
    example_dims={"Hkv": 2, "D": 64, "Dv": 64, "C": 4096, "BS": 32, "kv": "f16"},
    doc="write n tokens' k/v rows into the KV cache at (seq, pos): paged or contiguous, "
        "f32/f16/bf16",
)
