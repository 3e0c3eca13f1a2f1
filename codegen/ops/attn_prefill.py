"""attn_prefill: causal grouped-query attention for prefill chunks, tiled, online softmax.

Same args, dims, cache layouts (paged or contiguous), math and reference as attn_decode:
args ("q", "kc", "vc", "out", "pos", "seq", "bt", "n"), dims ("H", "Hkv", "D", "Dv", "C", "BS",
"kv", "scale", "swa", "softcap"); token i attends to positions 0..pos[i] of cache slot seq[i] (its
own k/v included: store_kv runs first). Paged, the key tile bk must divide BS (`fits`).
Optional dims, given only when nonzero (as attn_decode): `swa` a sliding window (keys
pos - swa < t <= pos): the key-tile loop starts at the tile holding the first row's first visible
key max(0, p0 + 1 - swa) and every row masks below its own bound pos - swa + 1, so a row can see
no key of a tile while its running max is still -inf: the subtractions then use 0 instead of -inf
(P = 0, correction 0, no NaN); costs are min(pos + 1, swa) + 32 per token. `softcap`: scores
become softcap * tanh(s / softcap) before masking and softmax.

Tiling: a tile is rb consecutive batch tokens of one sequence at consecutive positions x the G
query heads of one kv head (M = rb*G rows) against key tiles of bk keys; the rows live in vector
lanes ("rows in lanes": q staged transposed, scores S^T[key][row], no horizontal reductions),
micro-tiles of 4 keys x nmv row vectors for QK^T and 4 value dims x nmv row vectors for PV.
Memory is bounded by the tile; each K/V tile is read once per query tile and kv head.
Any batch is correct: a chunk of rb batch tokens is cut into runs (same sequence, consecutive
positions); a run shorter than a compile-time threshold (where a full tile would waste more
than per-token tiles) is done one token at a time (M = G rows).
Threading: units (chunk, kv head) in contiguous ranges of equal estimated cost.
Tiles: vl (rows per vector), rb (tokens per tile), bk (keys per tile), nmv (row vectors per
micro-tile). Pick rb so that M = rb*G fills several vectors: measured on AVX-512 at 512 tokens,
1 thread, (H, Hkv, D) = (14, 2, 64): rb=16 2.46 ms, rb=32 2.51 ms, rb=8/bk=64 2.92 ms; (16, 8, 128):
rb=32 5.8 ms, rb=16 6.1 ms, rb=8/bk=64 16.2 ms (M = 16 rows: one vector per micro-tile).
Stack: 4 * MP * (D + Dv + bk + 4) + 4 * bk * (D + Dv) bytes, MP = rb*G rounded up to vl
(~290 KB for rb=32, G=7, D=128): run it on threads with the default 8 MB stacks.
Tolerance: as attn_decode (rtol 2e-5, atol 2e-5).

Family `amx` (level amx, dtype "BF16": the attention precision, opt-in through the engine's
`attn_type="bf16"`, reame/jit/select.py `attn_prefill_spec`; docs/kernels-attention.md): the same
args, dims, layouts, runs and threading, with Q.K^T and P.V on AMX-BF16 tiles (tdpbf16ps) and
the online softmax in f32. q (scaled), k and v are rounded to bf16 (k and v once per call and
(slot, kv head), into a heap cache the following query tiles reuse), scores, running max and sums in f32, the softmax weights P
rounded to bf16 for P.V, the output accumulated in f32. A query tile is a run of up to
16 mb / G tokens x G heads (rows in the 16 lanes of a C tile, mb blocks of 16 rows; a run of R
tokens uses ceil(R G / 16) of them); key tiles of bk keys (32 or 64), aligned at multiples of bk.
Refuses (`fits`) sliding windows and soft-capping (those layers keep the f32 kernels), odd D,
G > 16 mb, and paged blocks that bk does not divide. `bf16_reference` is the kernel's
arithmetic in float64: the same roundings to bf16, the same key tiles of the online softmax;
the kernel agrees with it to BF16_TIGHT (the f32 kernels' tolerance) plus, where a P lies at a
bf16 rounding tie and may round the other way, that P's ulp (bf16_reference(slack=True)), and
with the float64 reference of the f32 families to BF16_VS_F64 (the bf16 roundings: ~2^-9
relative per value).
"""

from __future__ import annotations

import math

import numpy as np

from .attn_decode import dtype_reference, dtype_tolerance, key_block_fits, make_attention_case
from .base import HEAVY_SLICES, Op, Variant
from .kv_layout import bf16_round
from .matmul_q8k import AmxVariant


def _case(spec, rng, n):
    """A prefill-like batch: a chunk of one sequence starting at a random offset (earlier
    positions already in the cache), then a few tokens of other sequences at random positions.
    With a window (dim swa) the chunk starts past it when the context has room, so it bites."""
    C = spec.p["C"]
    n_chunk = min(max(1, (3 * n) // 4), C)        # (a program's n may exceed the context)
    swa = spec.p.get("swa", 0)
    lo = min(swa, C - n_chunk) if swa else 0
    start = int(rng.integers(lo, C - n_chunk + 1))
    pos = list(range(start, start + n_chunk))
    seq = [0] * n_chunk
    for _ in range(n - n_chunk):
        pos.append(int(rng.integers(0, C)))
        seq.append(int(rng.integers(1, 3)))
    return make_attention_case(OP, spec, rng, n, positions=pos, seq_ids=seq)


def bf16_reference(q, kc, vc, pos, seq, scale, bk, slack=False):
    """The amx family's arithmetic in float64 over a contiguous cache: bf16(f32(q) * f32(scale)),
    bf16 keys and values, scores in float64, an online softmax over key tiles of bk keys
    aligned at 0 (running max m, P = e^(s - m') rounded through f32 to bf16 for P.V, the sum l of
    the unrounded P), out = O / l.
    slack=True also returns, per output, the most a P at a bf16 rounding tie could move it: the
    kernel's P (float32 sums and exp, ~1e-6 relative off ours) may round the other way where ours
    lies within TIE_ULPS float32 ulps of a tie; each such P adds its bf16 ulp x |v| / l."""
    n, H, _ = q.shape
    G = H // kc.shape[1]
    qb = bf16_round(q.astype(np.float32) * np.float32(scale)).astype(np.float64)
    out = np.zeros((n, H, vc.shape[-1]))
    amb = np.zeros_like(out)
    for i in range(n):
        keys = bf16_round(kc[seq[i], :, :pos[i] + 1]).astype(np.float64)   # [Hkv, T, D]
        vals = bf16_round(vc[seq[i], :, :pos[i] + 1]).astype(np.float64)
        s = np.einsum("hgd,htd->hgt", qb[i].reshape(-1, G, qb.shape[-1]), keys)  # [Hkv, G, T]
        m = np.full(s.shape[:2], -np.inf)
        lsum = np.zeros(s.shape[:2])
        o = np.zeros(s.shape[:2] + (vals.shape[-1],))
        a = np.zeros_like(o)
        for t0 in range(0, pos[i] + 1, bk):
            sb = s[:, :, t0:t0 + bk]
            mn = np.maximum(m, sb.max(axis=2))
            corr = np.exp(m - mn)
            p = np.exp(sb - mn[:, :, None])
            lsum = lsum * corr + p.sum(axis=2)
            p32 = p.astype(np.float32)
            pb = bf16_round(p32).astype(np.float64)
            o = o * corr[:, :, None] + np.einsum("hgt,htd->hgd", pb, vals[:, t0:t0 + bk])
            if slack:
                bits = p32.view(np.uint32)
                tie = np.abs((bits & 0xFFFF).astype(np.int64) - 0x8000) <= TIE_ULPS
                ulp = (bits & 0x7F800000).view(np.float32).astype(np.float64) * 2.0**-7
                a = a * corr[:, :, None] + np.einsum("hgt,htd->hgd", np.where(tie, ulp, 0.0),
                                                     np.abs(vals[:, t0:t0 + bk]))
            m = mn
        out[i] = (o / lsum[:, :, None]).reshape(H, -1)
        amb[i] = (a / lsum[:, :, None]).reshape(H, -1)
    return (out, amb) if slack else out


TIE_ULPS = 128      # float32 ulps (2^-16 relative) around a bf16 rounding tie: either way


# amx (dtype BF16) against bf16_reference (tests/test_kernels_attention.py): within BF16_TIGHT
# (the f32 kernels' tolerance: float32 sums of the scores and of P, exp's ulp) plus the slack of
# the P at bf16 rounding ties (bf16_reference(slack=True)); measured: the median element 2e-8
# off, 99% < 3e-7; a P that rounds the other way moves an output by up to 2^-8 (p / l) |v|
# (measured worst 3e-3).
BF16_TIGHT = (2e-5, 2e-5)
# amx against the float64 reference of the f32 families (data of unit size, q ~ 2 N(0, 1)): the
# bf16 roundings of q and k (scores off by ~|s| 2^-8) and of v and P (~2^-9 each); measured
# worst 1.9e-2. The op's tolerance for BF16 (Op.check against bf16_reference, and the dispatch
# table's check of a BF16 kernel against the f32 generic kernel, at twice it)
BF16_VS_F64 = (3e-2, 3e-2)


def _fits(tile, dims):
    """Paged caches need key tiles that divide the KV block; the amx tiles (key "mb") also need
    no window or cap, an even D and G = H / Hkv <= 16 mb query rows; a bf16 cache (the AMX tile
    layout, read in place) only the amx tiles, with D a multiple of 32, Dv of 16 and the context
    of bk (a key tile is loaded whole); a bf16p cache (the pair layout) none."""
    bf16_kv = dims.get("kv") == "bf16"
    if dims.get("kv") == "bf16p":           # the pair layout: attn_decode's bf16dp family only
        return False
    if "mb" not in tile:
        return not bf16_kv and key_block_fits(tile, dims)
    if (dims.get("swa") or dims.get("softcap") or dims.get("D", 0) % 2
            or dims.get("H", 1) // dims.get("Hkv", 1) > 16 * tile["mb"]):
        return False
    if bf16_kv and (dims.get("D", 0) % 32 or dims.get("Dv", dims.get("D", 0)) % 16
                    or dims.get("C", 0) % tile["bk"]):      # whole key tiles inside the cache
        return False
    return key_block_fits(tile, dims)


AMX = ("AMX-BF16, reduced precision (dtype BF16, opt-in): Q.K^T and P.V on tdpbf16ps, q/k/v/P "
       "rounded to bf16, online softmax in f32; mb = blocks of 16 query rows per tile, bk = keys "
       "per key tile")

SIMD = "tuned: FMA micro-tiles sized to the register file, vcvtph2ps, exp with vscalefps"

OP = Op(
    name="attn_prefill",
    slices=HEAVY_SLICES,
    args=("q", "kc", "vc", "out", "pos", "seq", "bt", "n"),
    dims=("H", "Hkv", "D", "Dv", "C", "BS", "kv", "scale", "swa", "softcap"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "rb": 8, "bk": 16, "nmv": 2},
                                                 {"vl": 4, "rb": 4, "bk": 32, "nmv": 2}),
                "portable: 4-row vectors, 4x2 micro-tiles"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "rb": 8, "bk": 32, "nmv": 2},
                                           {"vl": 8, "rb": 16, "bk": 32, "nmv": 2},
                                           {"vl": 8, "rb": 16, "bk": 16, "nmv": 2}), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "rb": 16, "bk": 32, "nmv": 4},
                                             {"vl": 16, "rb": 32, "bk": 32, "nmv": 4},
                                             {"vl": 16, "rb": 32, "bk": 16, "nmv": 4}), SIMD),
        AmxVariant("amx", "amx", ("BF16",), ({"mb": 4, "bk": 64}, {"mb": 8, "bk": 64},
                                             {"mb": 4, "bk": 32}, {"mb": 2, "bk": 64}), AMX),
    ),
    make_case=_case,
    reference=dtype_reference,
    tolerance=dtype_tolerance,
    example_dims={"H": 14, "Hkv": 2, "D": 64, "Dv": 64, "C": 4096, "BS": 32, "kv": "f32",
                  "scale": 1 / math.sqrt(64)},
    doc="prefill attention: causal, tiled (rb tokens x G heads vs bk keys), GQA, online "
        "softmax, paged or contiguous cache",
    fits=_fits,
)
