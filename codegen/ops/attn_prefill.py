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
"""

from __future__ import annotations

import math

from .attn_decode import case_reference, key_block_fits, make_attention_case, tolerance
from .base import Op, Variant


def _case(spec, rng, n):
    """A prefill-like batch: a chunk of one sequence starting at a random offset (earlier
    positions already in the cache), then a few tokens of other sequences at random positions.
    With a window (dim swa) the chunk starts past it when the context has room, so it bites."""
    C = spec.p["C"]
    n_chunk = max(1, (3 * n) // 4)
    swa = spec.p.get("swa", 0)
    lo = min(swa, C - n_chunk) if swa else 0
    start = int(rng.integers(lo, C - n_chunk + 1))
    pos = list(range(start, start + n_chunk))
    seq = [0] * n_chunk
    for _ in range(n - n_chunk):
        pos.append(int(rng.integers(0, C)))
        seq.append(int(rng.integers(1, 3)))
    return make_attention_case(OP, spec, rng, n, positions=pos, seq_ids=seq)


SIMD = "tuned: FMA micro-tiles sized to the register file, vcvtph2ps, exp with vscalefps"

OP = Op(
    name="attn_prefill",
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
    ),
    make_case=_case,
    reference=case_reference,
    tolerance=tolerance,
    example_dims={"H": 14, "Hkv": 2, "D": 64, "Dv": 64, "C": 4096, "BS": 32, "kv": "f32",
                  "scale": 1 / math.sqrt(64)},
    doc="prefill attention: causal, tiled (rb tokens x G heads vs bk keys), GQA, online "
        "softmax, paged or contiguous cache",
    fits=key_block_fits,
)
