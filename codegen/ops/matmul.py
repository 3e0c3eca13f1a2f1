"""Float-path matrix product: y[n, M] (+)= x[n, K] @ dequantise(W[M, K])^T, f32 activations.

Families (templates/matmul_{family}.ll.j2):
  generic  dot-product form, portable 4-lane vectors (any LLVM target)
  avx2     the same loop nest tuned for 8 lanes and 16 registers
  avx512   the same loop nest tuned for 16 lanes and 32 registers
  gemm     outer-product register tile over a packed, dequantised weight panel (prefill)

The dot-product families (tile `rows` x `nt`) dequantise each block of `rows` weight rows once
and use it for `nt` tokens; they walk tokens in panels that stay in L2. For n < nt (decode)
they keep one weight-row stream per thread with several accumulators (FACTS.md: several rows per
iteration is 2.6x slower from DRAM). `gemm` (tile `mr` vectors of rows x `nr` tokens, `kc` deep)
dequantises a panel of mr*lanes rows x kc into a k-major buffer on the stack and runs an
outer-product micro-kernel with mr*nr accumulators.

Threads split the M rows into contiguous ranges aligned to the row tile.
"""

from __future__ import annotations

import numpy as np

from reame.tensor_types import TENSOR_TYPES

from .base import Case, HEAVY_SLICES, Op, Variant

# Every type of the tensor-type table: each has a macro in templates/_dequant.ll.j2 (a row
# without its macro fails to render, so the tests name what is missing).
ALL_TYPES = tuple(TENSOR_TYPES)

# Offsets of the f16 scale fields of each quantised block, with the magnitude that keeps the
# dequantised values O(1) for random quant bits (test data: random bits + sane scales).
_SCALES = {
    "Q8_0": ((0, 1 / 64),),
    "Q4_0": ((0, 1 / 8),),
    "Q4_1": ((0, 1 / 8), (2, -1.0)),
    "Q5_0": ((0, 1 / 16),),
    "Q5_1": ((0, 1 / 16), (2, -1.0)),
    "Q4_K": ((0, 1 / 512), (2, 1 / 512)),
    "Q5_K": ((0, 1 / 1024), (2, 1 / 1024)),
    "Q6_K": ((208, 1 / 2048),),
    "Q2_K": ((80, 1 / 32), (82, 1 / 32)),
    "Q3_K": ((108, 1 / 64),),
    "IQ4_NL": ((0, 1 / 128),),
    "IQ4_XS": ((0, 1 / 2048),),
}


def random_weights(dtype: str, rows: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """Raw GGUF bytes uint8 [rows, row_bytes] of a random weight matrix with O(1) values.

    Quantised types: random quant bits and sub-block scales, f16 scales of random sign and
    magnitude ~ _SCALES (one in 16 blocks gets a subnormal f16 scale). F16: a few subnormals."""
    tt = TENSOR_TYPES[dtype]
    if dtype == "F32":
        return rng.standard_normal((rows, K)).astype(np.float32).view(np.uint8)
    if dtype == "F16":
        v = rng.standard_normal((rows, K)).astype(np.float32)
        v[rng.random((rows, K)) < 0.05] *= 1e-6          # f16 subnormals
        return v.astype(np.float16).view(np.uint8)
    if dtype == "BF16":
        v = rng.standard_normal((rows, K)).astype(np.float32)
        return (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    nb = rows * (K // tt.block_size)
    b = rng.integers(0, 256, (nb, tt.type_size), dtype=np.uint8)
    for off, scale in _SCALES.get(dtype, ()):          # a new type: add its f16 scale fields
        mag = rng.uniform(0.5, 1.5, nb) * abs(scale)
        sign = np.sign(scale) * np.where(rng.random(nb) < 0.25, -1, 1)
        d = (sign * mag).astype(np.float16)
        d[rng.random(nb) < 1 / 16] = np.float16(3e-6) * np.float16(np.sign(scale))   # subnormal
        b[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, -1)


def _case(spec, rng, n):
    M, K = spec.p["M"], spec.p["K"]
    w = random_weights(spec.dtype, M, K, rng)
    # activations scaled by 1/sqrt(K): y = O(1) at every K, so one tolerance fits all shapes
    x = (rng.standard_normal((n, K)) / np.sqrt(K)).astype(np.float32)
    if spec.p["acc"]:
        y = rng.standard_normal((n, M)).astype(np.float32)
    else:
        y = np.full((n, M), np.nan, np.float32)        # every element must be written
    bufs = {"w": w, "x": x, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",), {"y0": y.copy()})


def _reference(spec, case):
    W = TENSOR_TYPES[spec.dtype].dequantize(case.buffers["w"]).astype(np.float64)
    out = case.buffers["x"].astype(np.float64) @ W.T
    if spec.p["acc"]:
        out += case.meta["y0"]
    return {"y": out}


# Tolerance (rtol, atol) per type. The dequantised weights are bit-identical to gguf's float32
# dequantisation, so the only error is float32 accumulation (in another order than the float64
# reference): ~sqrt(K) * 2^-24 * sqrt(sum (w x)^2) per output. The test data has |w| = O(1) and
# x ~ N(0, 1/K), so y = O(1) and the error is ~1e-7 .. 4e-6 up to K = 5000 (measured worst:
# 0.22x these tolerances at K = 4864 and K = 512, every variant on this machine). Q4_1/Q5_1
# (offset m) and K-quants (wider spread of magnitudes) get a larger absolute tolerance.
_TOL = {"F32": (1e-5, 1e-5), "F16": (1e-5, 1e-5), "BF16": (1e-5, 1e-5),
        "Q8_0": (1e-5, 1e-5), "Q4_0": (1e-5, 1e-5), "Q5_0": (1e-5, 1e-5),
        "Q4_1": (1e-5, 2e-5), "Q5_1": (1e-5, 2e-5),
        "Q4_K": (1e-5, 2e-5), "Q5_K": (1e-5, 2e-5), "Q6_K": (1e-5, 2e-5),
        "Q2_K": (1e-5, 2e-5), "Q3_K": (1e-5, 2e-5), "IQ4_NL": (1e-5, 1e-5),
        "IQ4_XS": (1e-5, 2e-5)}


def _tolerance(dtype: str) -> tuple[float, float]:
    return _TOL[dtype]


GEMM_MIN_TOKENS = 16


def _prefers(family: str, n_tokens: int, dims: dict) -> bool:
    """The register-tiled GEMM for prompt chunks (> 16 tokens), the streaming dot-product
    families for decode and batches."""
    return (family == "gemm") == (n_tokens > GEMM_MIN_TOKENS)


OP = Op(
    name="matmul",
    prefers=_prefers,
    slices=HEAVY_SLICES,
    args=("w", "x", "y", "n"),
    dims=("M", "K", "acc"),
    variants=(
        Variant("generic", "generic", ALL_TYPES,
                ({"vl": 4, "rows": 1, "nt": 4}, {"vl": 4, "rows": 2, "nt": 4}),
                "dot-product form, portable 4-lane vectors"),
        Variant("avx2", "avx2", ALL_TYPES,
                ({"rows": 1, "nt": 4}, {"rows": 2, "nt": 4}),
                "dot-product form, 8 lanes, 16 registers"),
        Variant("avx512", "avx512", ALL_TYPES,
                ({"rows": 1, "nt": 8}, {"rows": 2, "nt": 6}, {"rows": 4, "nt": 4}),
                "dot-product form, 16 lanes, 32 registers"),
        Variant("gemm", "avx2", ALL_TYPES,
                ({"vl": 8, "mr": 2, "nr": 6}, {"vl": 8, "mr": 1, "nr": 12}),
                "outer-product tile over a packed dequantised panel, 8 lanes (prefill)"),
        Variant("gemm", "avx512", ALL_TYPES,
                ({"vl": 16, "mr": 2, "nr": 12}, {"vl": 16, "mr": 3, "nr": 8}),
                "outer-product tile over a packed dequantised panel, 16 lanes (prefill)"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=_tolerance,
    example_dims={"M": 896, "K": 4864, "acc": 0},     # Qwen2.5-0.5B ffn_down: whole blocks of every type
    doc="y[n, M] (+)= x[n, K] @ dequantise(W[M, K])^T with f32 activations (acc=1 adds into y)",
)
