"""matmul_q8 for the K-quant weight types Q4_K, Q5_K and Q6_K (Q4_K_M / Q5_K_M model files).

The op itself (`OP`, args, dims, the legacy types) lives in codegen/ops/matmul_q8.py, which
appends these `VARIANTS`; this module defines no `OP` of its own. Contract:

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T
    args ("w", "xq", "y", "n"); dims ("M", "K", "acc"); K a multiple of 256
    w: M rows of K/256 superblocks; xq: n rows of Q8A (codegen/q8a.py); y: f32 [n, M]
    threads split the M rows into contiguous ranges; acc=1 adds to y.

Families (templates/matmul_q8_<family>.ll.j2, skeleton in matmul_q8_k_common.ll.j2):
    kgeneric  portable vector IR (zext/sext, mul, reduce add), any LLVM target
    kavx2     AVX2: vpmaddubsw + vpmaddwd, sub-block scales folded into vpmaddwd
    kvnni     AVX-512 VNNI: vpdpbusd on 512-bit registers (u8 weights x s8 activations)
Tiles: nt = tokens per weight pass (a row is unpacked once per nt tokens), unroll =
superblocks per loop iteration. Layouts and measured figures: docs/kernels-kquants.md.

Also here, for the op module and the tests: `random_weights` (valid random K-quant blocks; gguf
cannot quantise K types), `make_case`, `reference` and `TOLERANCE`.
"""

from __future__ import annotations

import numpy as np

from reame.tensor_types import TENSOR_TYPES

from .. import q8a
from .base import Case, Variant

K_TYPES = ("Q4_K", "Q5_K", "Q6_K")
ARGS = ("w", "xq", "y", "n")

VARIANTS: tuple[Variant, ...] = (
    Variant("kgeneric", "generic", K_TYPES,
            ({"nt": 1, "unroll": 1}, {"nt": 4, "unroll": 1}),
            "portable: 32-lane sext/mul/reduce per 32-block, 8-lane float scaling"),
    Variant("kavx2", "avx2", K_TYPES,
            ({"nt": 1, "unroll": 2}, {"nt": 4, "unroll": 1}),
            "AVX2 vpmaddubsw/vpmaddwd, sub-block scales in vpmaddwd, one 32-block per ymm"),
    Variant("kvnni", "avx512_vnni", K_TYPES,
            ({"nt": 1, "unroll": 1}, {"nt": 1, "unroll": 2}, {"nt": 4, "unroll": 1}),
            "AVX-512 VNNI vpdpbusd, two 32-blocks per zmm"),
)

# (rtol, atol) against the float64 reference, for data drawn as `make_case` does (weights from
# `random_weights`, activations ~ N(0, 1) quantised to Q8A, K <= a few thousand). The kernels
# sum exact integer dots per 32-block (16-group for Q6_K) and accumulate the scaled block sums
# in float32; atol covers the float32 rounding of sums whose terms reach |y| ~ 10-100.
TOLERANCE = {"Q4_K": (1e-4, 2e-3), "Q5_K": (1e-4, 2e-3), "Q6_K": (1e-4, 2e-3)}


def random_weights(dtype: str, rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """Random, valid K-quant weights uint8 [M, K/256 * block bytes]: random quant bits and
    6-bit scales/mins (every bit pattern of the packing is exercised), finite positive f16
    d/dmin sized so weights are O(0.1-1); Q6_K: random int8 scales of either sign. A few
    superblocks get a subnormal f16 d (the f16 conversion must handle them)."""
    assert K % 256 == 0, "K-quant rows are whole 256-superblocks"
    tt = TENSOR_TYPES[dtype]
    nb = M * K // 256
    b = np.frombuffer(rng.bytes(nb * tt.type_size), np.uint8).reshape(nb, tt.type_size).copy()
    if dtype == "Q6_K":                                  # ql[128] qh[64] sc int8[16] d f16
        d = (rng.uniform(0.5, 1.0, nb) / (32 * 64)).astype(np.float16)
        d[rng.random(nb) < 0.02] = np.float16(3e-5)      # subnormal
        b[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    else:                                                # d dmin f16, scales[12], ...
        levels = 16 if dtype == "Q4_K" else 32
        d = (rng.uniform(0.5, 1.0, nb) / (64 * levels)).astype(np.float16)
        d[rng.random(nb) < 0.02] = np.float16(3e-5)
        dmin = (d.astype(np.float32) * rng.uniform(0.5, levels / 2, nb)).astype(np.float16)
        b[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
        b[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    return b.reshape(M, K // 256 * tt.type_size)


def dequant_weights(dtype: str, w: np.ndarray) -> np.ndarray:
    """float64 [M, K] from K-quant rows (gguf.quants.dequantize)."""
    return TENSOR_TYPES[dtype].dequantize(w).astype(np.float64)


def make_case(spec, rng: np.random.Generator, n: int) -> Case:
    M, K = spec.p["M"], spec.p["K"]
    w = random_weights(spec.dtype, rng, M, K)
    x = rng.standard_normal((n, K)).astype(np.float32)
    xq = q8a.quantize_rows(x)
    y = (rng.standard_normal((n, M)) if spec.p.get("acc") else np.zeros((n, M))).astype(np.float32)
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
