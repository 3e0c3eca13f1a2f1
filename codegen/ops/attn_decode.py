"""attn_decode: grouped-query attention of each token over its KV-cache prefix (online softmax).

args ("q", "kc", "vc", "out", "pos", "seq", "bt", "n"): q f32 [n, H, D] (after RoPE); kc, vc one
layer's cache (f32 or f16) in one of the layouts of ops/kv_layout.py, already holding this
step's keys (store_kv runs first): paged (BS > 0: a pool [blocks, Hkv, BS, D] and the block
table bt i32 [slots, C / BS]) or contiguous (BS = 0: [slots, Hkv, C, D], bt unused); out f32
[n, H, Dv]; pos, seq i32 [n]. dims ("H", "Hkv", "D", "Dv", "C", "BS", "kv", "scale", "swa",
"softcap"); G = H / Hkv query heads share a kv head.

    out[i, h] = softmax(scale * k[seq[i], h // G, 0..pos[i]] @ q[i, h]) @ v[seq[i], h // G, 0..pos[i]]

which is reame.reference's attention loop. One pass over the keys in blocks of vl*kb keys,
with a running max and sum (online softmax): memory O(G * Dv) whatever the length.
Optional dims (Gemma 2 / 3), given only when nonzero so that every other spec renders as
before: `swa` (int), a sliding window: token i sees keys pos[i] - swa < t <= pos[i] (llama.cpp's
LLAMA_SWA_TYPE_STANDARD); the key loop starts at the block holding key max(0, pos[i] + 1 - swa)
(earlier keys of that block masked) and a unit costs min(pos + 1, swa) + 32. `softcap` (float):
each score becomes softcap * tanh(scale q.k / softcap) before masking and softmax, tanh(x) =
1 - 2 / (e^2x + 1) with our exp (+-1 exactly for large |x|).
Threading: units (token, kv head) in contiguous ranges of equal estimated cost (keys + 32).
Over a paged cache without a window, in a step holding runs (a token following its sequence's
previous one) the units run kv-head-major and a unit takes in the following units of the same
sequence its thread owns (a verify step's rows, up to min(8, 32 / G)): each
block is staged once for the run (f16: always staged, widened; f32: copied for runs of two or
more rows, a lone row reads in place) and each row updates its own heads with its own mask, the
bits of the row alone.
Per block, the G heads share each key and value row they load where their vectors fit the
registers: one pass over the keys gives every head's scores, one over the values every head's
P.V, each head's operations in the order of the per-head loop (the same bits; tile `share` = 0
renders the per-head loop alone).
Tiles: vl (keys per score vector = lanes), kb (score vectors per key block), pf_loc
(software prefetch of the next block's K/V rows, the keys coming from DRAM at long contexts: its
locality hint, 2 = prefetcht1 (into L2), 3 = prefetcht0, 0 = off; the panels' key, so one name
means one thing; 2 since 2026-12-06: on AMD Zen 4 one decode row from DRAM, SmolLM2's heads at
ctx 832, one thread, 111-120 us against 141-166 with prefetcht0 and 142-155 without, 16 verify
rows 737-879 against 775-920; on the Intel VM prefetching had changed nothing measurable). Paged, a key
block of vl * kb keys must divide BS (it then lies in one KV block): `fits` filters the tiles.
Tolerance: rtol 2e-5, atol 2e-5 against float64 on the same (f16-rounded) cache values: f32 dot
products and running sums (errors ~1e-6 of the scores), exp < 1 ulp.

Family `bf16dp` (level avx512_bf16, dtype BF16): the same args and threading over a bf16 cache in
the pair layout (kv "bf16p", kv_layout.py; paged only), the engine's bf16 cache on CPUs with
AVX512_BF16 but no AMX (reame/jit/select.py). Per (token, kv head): q * scale rounded to bf16,
key blocks of bk = 64, 32 or 16 keys aligned at key 0 (64 first: fewest block updates,
measured fastest for one row and for 16 verify rows at every shape tried), a head's 16 scores D/2 vdpbf16ps (keys in
lanes: no transposing add tree), the online softmax in f32 with the weights P rounded to bf16
for P.V (16 value dims x a key pair a vdpbf16ps), l the sum of the unrounded P: the arithmetic
of attn_prefill's `bf16_reference` with its key tiles bk, against which it is checked (the
amx family's BF16_TIGHT plus the slack of P at rounding ties, tests/test_kernels_attention.py;
Op.check: BF16_VS_F64). Each row is computed on its own, so it serves decode, verify and prompt
rows alike with the same bits (reame/jit/plan.py). A decode row's keys come from DRAM: a unit
not following one of the same kv head and sequence prefetches one KV block ahead. Refuses windows and soft-capping, odd D and
Dv not a multiple of 16.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Case, HEAVY_SLICES, Op, Variant
from .kv_layout import as_float, random_cache


def make_attention_case(op, spec, rng, n, seqs=3, positions=None, seq_ids=None):
    """Random q and a random cache of `seqs` slots (paged: slots 0 and 1 share their first
    block); tokens at random (seq, pos) unless given. With a window (dim swa), the random
    positions include swa - 1 (the last position that sees every key) and swa (the first whose
    window drops key 0) when there is room, besides 0 and C - 1."""
    H, Hkv, D, Dv, C, BS, kv = (spec.p[k] for k in ("H", "Hkv", "D", "Dv", "C", "BS", "kv"))
    swa = spec.p.get("swa", 0)
    if positions is None:
        positions = rng.integers(0, C, n)
        if n >= 2:
            positions[0], positions[1] = 0, C - 1           # one key; the whole cache
        if swa and swa < C:
            for j, p in zip(range(2, n), (swa, swa - 1)):   # the window's edge
                positions[j] = p
    if seq_ids is None:
        seq_ids = rng.integers(0, seqs, n)
    q = (rng.standard_normal((n, H, D)) * 2).astype(np.float32)
    kc, vc, bt = random_cache(rng, seqs, Hkv, C, D, Dv, BS, kv)
    out = np.full((n, H, Dv), np.nan, np.float32)
    bufs = {"q": q, "kc": kc, "vc": vc, "out": out, "bt": bt,
            "pos": np.asarray(positions, np.int32), "seq": np.asarray(seq_ids, np.int32)}
    return Case(bufs, op.pack(bufs, n=n), ("out",))


def key_block_fits(tile: dict, dims: dict) -> bool:
    """A paged cache needs key blocks (vl * kb keys, or bk) that divide the KV block size."""
    bs = dims.get("BS", 0)
    return not bs or bs % tile.get("bk", tile.get("vl", 1) * tile.get("kb", 1)) == 0


def _fits(tile: dict, dims: dict) -> bool:
    """Key blocks that divide BS; the f32 families no bf16 cache (attn_prefill's amx family
    reads the tile layout "bf16"), the bf16dp family (tiles with key "bk") only the pair layout
    "bf16p", paged, without window or cap, D even and Dv a multiple of 16."""
    if "bk" not in tile:
        return dims.get("kv") not in ("bf16", "bf16p") and key_block_fits(tile, dims)
    D = dims.get("D", 0)
    return (dims.get("kv") == "bf16p" and dims.get("BS", 0) > 0 and not dims.get("swa")
            and not dims.get("softcap") and D % 2 == 0 and dims.get("Dv", D) % 16 == 0
            and key_block_fits(tile, dims))


def case_reference(spec, case):
    """The expected output of a case (either layout)."""
    b = case.buffers
    kc, vc = as_float(b["kc"], b["vc"], b["bt"], spec.p["BS"], spec.p["kv"])
    return {"out": reference(b["q"], kc, vc, b["pos"], b["seq"], spec.p["scale"],
                             spec.p.get("swa", 0), spec.p.get("softcap", 0.0))}


def reference(q, kc, vc, pos, seq, scale, swa=0, softcap=0.0):
    """float64 attention of each token over its prefix (reame.reference's loop), over a
    contiguous cache (kv_layout.contiguous gathers a paged one). swa > 0: only the keys
    pos - swa < t <= pos (keys outside the window are never read, so they may hold anything);
    softcap > 0: scores s become softcap * tanh(s / softcap) (s already scaled)."""
    n, H, _ = q.shape
    Hkv = kc.shape[1]
    G = H // Hkv
    out = np.zeros((n, H, vc.shape[-1]))
    for i in range(n):
        lo = max(0, pos[i] + 1 - swa) if swa else 0
        keys = kc[seq[i], :, lo:pos[i] + 1].astype(np.float64)
        vals = vc[seq[i], :, lo:pos[i] + 1].astype(np.float64)
        for h in range(H):
            s = keys[h // G] @ q[i, h].astype(np.float64) * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            out[i, h] = e @ vals[h // G] / e.sum()
    return out


def _case(spec, rng, n):
    return make_attention_case(OP, spec, rng, n)


def tolerance(dtype):
    return (2e-5, 2e-5)


def dtype_reference(spec, case):
    """The reference of attn_decode's and attn_prefill's specs: float64 attention for the f32
    families; for dtype BF16 (attn_decode's bf16dp, attn_prefill's amx) attn_prefill's
    bf16_reference with the kernel's key blocks bk."""
    if spec.dtype != "BF16":
        return case_reference(spec, case)
    from .attn_prefill import bf16_reference
    b = case.buffers
    kc, vc = as_float(b["kc"], b["vc"], b["bt"], spec.p["BS"], spec.p["kv"])
    return {"out": bf16_reference(b["q"], kc, vc, b["pos"], b["seq"], spec.p["scale"],
                                  spec.p["bk"])}


def dtype_tolerance(dtype):
    """Both attention ops' tolerance: the f32 kernels', or BF16_VS_F64 for dtype BF16."""
    if dtype == "BF16":
        from .attn_prefill import BF16_VS_F64
        return BF16_VS_F64
    return tolerance(dtype)


BF16DP = ("AVX512_BF16 dot products over the pair-layout bf16 cache (dtype BF16): keys in lanes, "
          "vdpbf16ps for q.k and P.V, online softmax in f32; bk = keys per block")


SIMD = "tuned: FMA, vcvtph2ps for f16 rows, exp with vscalefps (AVX-512)"

OP = Op(
    name="attn_decode",
    slices=HEAVY_SLICES,
    args=("q", "kc", "vc", "out", "pos", "seq", "bt", "n"),
    dims=("H", "Hkv", "D", "Dv", "C", "BS", "kv", "scale", "swa", "softcap"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "kb": 4, "pf_loc": 0},),
                "portable: 4 keys per score vector, 16-key blocks"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "kb": 2, "pf_loc": 2},
                                           {"vl": 8, "kb": 4, "pf_loc": 2}),
                SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "kb": 2, "pf_loc": 2},
                                             {"vl": 16, "kb": 4, "pf_loc": 2},
                                             {"vl": 16, "kb": 1, "pf_loc": 2}), SIMD),
        Variant("bf16dp", "avx512_bf16", ("BF16",), ({"bk": 64}, {"bk": 32}, {"bk": 16}), BF16DP),
    ),
    make_case=_case,
    reference=dtype_reference,
    tolerance=dtype_tolerance,
    example_dims={"H": 14, "Hkv": 2, "D": 64, "Dv": 64, "C": 4096, "BS": 32, "kv": "f32",
                  "scale": 1 / math.sqrt(64)},
    doc="decode attention: each token over its KV prefix (paged or contiguous), GQA, online softmax",
    fits=_fits,
)
