"""matmul_q8a for the K-quant weight types Q4_K, Q5_K and Q6_K (Q4_K_M / Q5_K_M model files).

The op itself (`OP`, args, dims, the legacy types) lives in codegen/ops/matmul_q8a.py, which
appends these `VARIANTS`; this module defines no `OP` of its own (and is not the op matmul_q8k,
which reads Q8K activations). Contract:

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T
    args ("w", "xq", "y", "n"); dims ("M", "K", "acc"); K a multiple of 256
    w: M rows of K/256 superblocks; xq: n rows of Q8A (codegen/q8a.py); y: f32 [n, M]
    threads split the M rows into contiguous ranges; acc=1 adds to y.

Families (templates/matmul_q8a_<family>.ll.j2, skeleton in matmul_q8a_kquants_common.ll.j2):
    kgeneric  portable vector IR (zext/sext, mul, reduce add), any LLVM target
    kavx2     AVX2: vpmaddubsw + vpmaddwd, sub-block scales folded into vpmaddwd
    kvnni     AVX-512 VNNI: vpdpbusd on 512-bit registers (u8 weights x s8 activations)
Tiles: nt = tokens per weight pass (a row is unpacked once per nt tokens), u = superblocks
per loop iteration, pf_bytes = software prefetch distance in bytes for the weight stream (decode).
Layouts and measured figures: docs/kernels-kquants.md.

Hooks read by matmul_q8a.py: VARIANTS, RANDOM_WEIGHTS (valid random K-quant blocks: gguf cannot
quantise K types) and TOLERANCE. Also `make_case` / `reference` for tests that build specs
directly (the same data distribution as matmul_q8a's cases: |y| ~ 1 for any K).
"""

from __future__ import annotations

import functools

import numpy as np

from reame.tensor_types import TENSOR_TYPES

from .. import q8a
from .base import Case, Variant

K_TYPES = ("Q4_K", "Q5_K", "Q6_K")          # the K-quants with Q8A kernels (type table: int_dot)
ARGS = ("w", "xq", "y", "n")
_TILES = ("nt = tokens per weight pass, u = superblocks per loop step, pf_bytes = prefetch "
          "distance (B)")

# the 1-row tiles of the K-quant families, shared with op matmul_q8k (same loop nest)
TILES_PORTABLE = ({"nt": 1, "u": 1}, {"nt": 4, "u": 1})
# Every tile prefetches the weight stream (pf_bytes ahead): with weights from DRAM the multi-token
# tiles without it waited on memory at a fraction of the bandwidth (one thread, 5632 x 2048,
# weights cycled through 25 copies: matmul_q8k avx2 Q4_K nt=4 48 -> 73 GOP/s; matmul_q8a's avx2
# Q8_0 nt=4 / nt=8 21 -> 50 / 25 -> 65; docs/kernels-int8.md)
TILES_AVX2 = ({"nt": 1, "u": 1, "pf_bytes": 8192}, {"nt": 2, "u": 1, "pf_bytes": 8192},
              {"nt": 4, "u": 1, "pf_bytes": 8192}, {"nt": 8, "u": 1, "pf_bytes": 8192})
TILES_VNNI = ({"nt": 1, "u": 1, "pf_bytes": 8192}, {"nt": 1, "u": 2, "pf_bytes": 8192},
              {"nt": 4, "u": 1, "pf_bytes": 8192}, {"nt": 8, "u": 1, "pf_bytes": 8192})

VARIANTS: tuple[Variant, ...] = (
    Variant("kgeneric", "generic", K_TYPES, TILES_PORTABLE,
            "portable: 32-lane sext/mul/reduce per 32-block, 8-lane float scaling; " + _TILES),
    Variant("kavx2", "avx2", K_TYPES, TILES_AVX2,
            "AVX2 vpmaddubsw + vpmaddwd (sub-block scales as the i16 multiplier), one 32-block "
            "per ymm; " + _TILES),
    Variant("kvnni", "avx512_vnni", K_TYPES, TILES_VNNI,
            "AVX-512 VNNI vpdpbusd, two 32-blocks per zmm, GFNI nibble split on GFNI hosts; "
            + _TILES),
)

# magnitude of the f16 d for weights of about unit size (quant range x sub-block scale range)
D_SCALE = {"Q4_K": 1 / 256, "Q5_K": 1 / 512, "Q6_K": 1 / 2048, "Q2_K": 1 / 32, "Q3_K": 1 / 128,
           "IQ4_XS": 1 / 4096}

# (rtol, atol) against the float64 reference for data of about unit size (make_case, and
# matmul_q8a's cases with RANDOM_WEIGHTS): integer dots per 32-block (16-group for Q6_K) are
# exact, the error is float32 rounding of the per-block scales and of the sums over blocks
# (and, Q4_K/Q5_K, of the separate min term). Tightness: tests/test_kernels_matmul_q8k.py.
TOLERANCE = {"Q4_K": (1e-5, 2e-5), "Q5_K": (1e-5, 2e-5), "Q6_K": (1e-5, 2e-5),
             "Q2_K": (1e-5, 2e-5), "Q3_K": (1e-5, 2e-5), "IQ4_XS": (1e-5, 2e-5)}


def random_weights(dtype: str, rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """Random, valid K-quant weights uint8 [M, K/256 * block bytes] of about unit size: random
    quant bits and 6-bit scales/mins (every bit of the packing is exercised), positive f16 d
    (2% of superblocks get a subnormal d: the f16 conversion must handle them) and dmin;
    Q6_K: random int8 scales of either sign."""
    assert K % 256 == 0, "K-quant rows are whole 256-superblocks"
    tt = TENSOR_TYPES[dtype]
    nb = M * K // 256
    b = np.frombuffer(rng.bytes(nb * tt.type_size), np.uint8).reshape(nb, tt.type_size).copy()
    d = (rng.uniform(0.5, 1.5, nb) * D_SCALE[dtype]).astype(np.float16)
    d[rng.random(nb) < 0.02] = np.float16(3e-5)          # subnormal f16
    if dtype == "Q6_K":                                  # ql[128] qh[64] sc int8[16] d f16
        b[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    elif dtype == "Q3_K":                                # hmask qs scales[12] d f16
        b[:, 108:110] = d.view(np.uint8).reshape(nb, 2)
    elif dtype == "IQ4_XS":                              # d f16, scales_h, scales_l[4], qs
        b[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    elif dtype == "Q2_K":                                # scales[16] qs[64] d dmin f16
        dmin = (d.astype(np.float32) * rng.uniform(0.5, 2.0, nb)).astype(np.float16)
        b[:, 80:82] = d.view(np.uint8).reshape(nb, 2)
        b[:, 82:84] = dmin.view(np.uint8).reshape(nb, 2)
    else:                                                # d dmin f16, scales[12], ...
        levels = 16 if dtype == "Q4_K" else 32
        dmin = (d.astype(np.float32) * rng.uniform(0.5, levels / 2, nb)).astype(np.float16)
        b[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
        b[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    return b.reshape(M, K // 256 * tt.type_size)


RANDOM_WEIGHTS = {dt: functools.partial(random_weights, dt) for dt in K_TYPES}
Q8K_ONLY_TYPES = ("Q2_K", "Q3_K", "IQ4_XS")  # types with Q8K kernels only (op matmul_q8k)


def random_activations(rng: np.random.Generator, n: int, K: int) -> np.ndarray:
    """float32 [n, K]: per-32-block magnitudes spread over ~2 decades, one all-zero block, scaled
    so that a product with unit-size weights has about unit size for any K (as matmul_q8a's)."""
    x = rng.standard_normal((n, K // 32, 32)).astype(np.float32)
    x *= np.exp(rng.uniform(-2.3, 2.3, (n, K // 32, 1))).astype(np.float32)
    x *= np.float32(0.3 / np.sqrt(K))
    x[0, min(1, K // 32 - 1)] = 0.0
    return x.reshape(n, K)


def dequant_weights(dtype: str, w: np.ndarray) -> np.ndarray:
    """float64 [M, K] from K-quant rows (gguf.quants.dequantize)."""
    return TENSOR_TYPES[dtype].dequantize(w).astype(np.float64)


def make_case(spec, rng: np.random.Generator, n: int) -> Case:
    M, K = spec.p["M"], spec.p["K"]
    w = random_weights(spec.dtype, rng, M, K)
    xq = q8a.quantize_rows(random_activations(rng, n, K))
    y = (rng.standard_normal((n, M)).astype(np.float32) if spec.p.get("acc")
         else np.full((n, M), np.nan, np.float32))       # acc=0 must overwrite every output
    bufs = {"w": w, "xq": xq, "y": y}
    words = [bufs.get(a, n) for a in ARGS]
    from ..kernels import pack_args
    return Case(bufs, pack_args(words), ("y",), {"y0": y.copy(), "n": n})


def reference(spec, case: Case) -> dict[str, np.ndarray]:
    """float64 y: dequant(w) @ dequant(xq)^T (+ the initial y when acc)."""
    K = spec.p["K"]
    W = dequant_weights(spec.dtype, case.buffers["w"])
    qs, d, _ = q8a.unpack_rows(case.buffers["xq"], K)
    n = qs.shape[0]
    X = (qs.reshape(n, -1, q8a.QBLOCK).astype(np.float64) * d[..., None]).reshape(n, K)
    y = X @ W.T
    if spec.p.get("acc"):
        y = y + case.meta["y0"].astype(np.float64)
    return {"y": y}


def tolerance(dtype: str) -> tuple[float, float]:
    return TOLERANCE[dtype]
