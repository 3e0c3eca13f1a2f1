"""matmul_q8a: quantised weights times Q8A activations with integer dot products.

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T

`w` holds M rows of K/block weight blocks (GGUF layout), `xq` holds n activation rows in the Q8A
format of codegen/q8a.py (made by the op `quantize_q8a`), `y` is float32 [n, M]. With `acc=1` the
result is added to y (residual connections). Threads split the M rows of w (one weight-row
stream per thread, which is what reaches the bandwidth ceiling for decode), and the tokens are
processed in tiles of `nt` so that each weight block is unpacked once per tile.

The expected result is dequant(W) @ dequant(xq)^T in float64: integer block dots are exact, so
the only error is float32 rounding of the per-block scales and of the summation over blocks.

The K-quant types (Q4_K, Q5_K, Q6_K) are families of this op defined in
codegen/ops/matmul_q8a_kquants.py (VARIANTS, RANDOM_WEIGHTS, TOLERANCE; templates
matmul_q8a_k*.ll.j2), appended here. (Not to be confused with the op matmul_q8k, which reads
Q8K activations.)
"""

from __future__ import annotations

import numpy as np

from reame.tensor_types import TENSOR_TYPES

from .. import q8a
from . import matmul_q8a_kquants as _k
from .base import Case, HEAVY_SLICES, Op, Variant
from .matmul_q8k import AmxVariant

LEGACY = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
LEVELS4 = ("IQ4_NL",)          # 4-bit indices into 16 levels: every family but the row panels
PANEL_FAMILY_TYPES = ("Q8_0", "Q4_0", "Q4_1")   # family `panel` (row-panel register tiles)

K_VARIANTS: tuple[Variant, ...] = _k.VARIANTS
K_RANDOM_WEIGHTS: dict = _k.RANDOM_WEIGHTS
K_TOLERANCE: dict = _k.TOLERANCE

# byte offsets of the f16 fields of a block (d, and m / dmin): set to sane finite values in random
# blocks; every other byte of a block (quants, high bits, sub-block scales) may be any value
_F16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
               "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,)}
# magnitude of d for weights of about unit size (quant range times sub-block scale range)
_D_SCALE = {"Q8_0": 1 / 64, "Q4_0": 1 / 8, "Q4_1": 1 / 8, "Q5_0": 1 / 16, "Q5_1": 1 / 16,
            "Q4_K": 1 / 256, "Q5_K": 1 / 512, "Q6_K": 1 / 2048, "IQ4_NL": 1 / 128}


def random_weights(dtype: str, rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """uint8 [M, row_bytes]: valid blocks of `dtype` with random quant bits, f16 scales of either
    sign and mins (Q4_1/Q5_1) of either sign."""
    if dtype in K_RANDOM_WEIGHTS:
        return K_RANDOM_WEIGHTS[dtype](rng, M, K)
    tt = TENSOR_TYPES[dtype]
    nb = M * (K // tt.block_size)
    b = np.frombuffer(rng.bytes(nb * tt.type_size), np.uint8).reshape(nb, tt.type_size).copy()
    for i, off in enumerate(_F16_FIELDS[dtype]):
        v = rng.uniform(0.5, 1.5, nb) * _D_SCALE[dtype] * (4.0 if i else 1.0)
        if dtype in LEGACY + LEVELS4:
            v *= rng.choice((-1.0, 1.0), nb)
        b[:, off:off + 2] = v.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return b.reshape(M, tt.row_bytes(K))


def random_activations(rng: np.random.Generator, n: int, K: int) -> np.ndarray:
    """float32 [n, K] with per-block magnitudes spread over ~2 decades, one all-zero block, and
    a scale such that a product with unit-size weights has about unit size for any K."""
    x = rng.standard_normal((n, K // 32, 32)).astype(np.float32)
    x *= np.exp(rng.uniform(-2.3, 2.3, (n, K // 32, 1))).astype(np.float32)
    x *= np.float32(0.3 / np.sqrt(K))
    if K >= 64:
        x[0, 1] = 0.0
    return x.reshape(n, K)


def _case(spec, rng, n):
    M, K = spec.p["M"], spec.p["K"]
    w = random_weights(spec.dtype, rng, M, K)
    xq = q8a.quantize_rows(random_activations(rng, n, K))
    y = rng.standard_normal((n, M)).astype(np.float32) if spec.p.get("acc") else \
        np.full((n, M), np.nan, np.float32)          # acc=0 must overwrite every output
    bufs = {"w": w, "xq": xq, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",), {"y0": y.copy()})


def _reference(spec, case):
    K = spec.p["K"]
    w = TENSOR_TYPES[spec.dtype].dequantize(case.buffers["w"]).astype(np.float64)
    x = q8a.dequantize_rows(case.buffers["xq"], K).astype(np.float64)
    y = x @ w.T
    if spec.p.get("acc"):
        y += case.meta["y0"].astype(np.float64)
    return {"y": y}


def _tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for the data of make_case (unit-size weights, activations scaled so that
    |y| ~ 1 for any K): the only error is f32 rounding of d_w * d_a and of the sums over K/32
    blocks. Measured worst absolute errors: 5e-7 (K=256) to 4e-6 (K=16384), all types and
    families; one wrong block costs ~1/sqrt(K/32) >= 0.04."""
    if dtype in K_TOLERANCE:
        return K_TOLERANCE[dtype]
    return (1e-5, 2e-5)


_TOKENS_DOC = "nt = tokens per pass over a weight block"

def _prefers(family: str, n_tokens: int, dims: dict) -> bool:
    """The row panels (16 weight rows x nt tokens per register tile) in every program, decode
    too on the nt = 1 tile, from the kernel timings in docs/kernels-int8.md (2 threads, weights
    from DRAM): 1.5-3x the 1-row tiles at 4-8 tokens and prefill, and faster in one-token steps
    (2026-12-02: SmolLM2-135M Q4_1 3.2-3.5 vs 4.2 ms, a 0.5B Q4_0 12.5-13.0 vs 13.4-13.6, Q8_0
    21.2-21.9 vs 23.3-23.5); every row is then computed by one arithmetic in every program of
    1-16 tokens: a token's logits do not depend on how many other tokens share its step
    (batched decode and speculation's verify steps give the one-token step's exact numbers)."""
    return family == "panel"


OP = Op(
    name="matmul_q8a",
    prefers=_prefers,
    slices=HEAVY_SLICES,
    args=("w", "xq", "y", "n"),
    dims=("M", "K", "acc"),
    variants=(
        Variant("generic", "generic", LEGACY + LEVELS4, ({"nt": 1}, {"nt": 4}),
                "portable vector IR: sext i8 -> i32, mul, reduce add; " + _TOKENS_DOC),
        Variant("avx2", "avx2", LEGACY + LEVELS4,
                ({"nt": 1, "u": 1, "pf_bytes": 8192}, {"nt": 2, "u": 1, "pf_bytes": 8192},
                 {"nt": 4, "u": 1, "pf_bytes": 8192}, {"nt": 8, "u": 1, "pf_bytes": 8192}),
                "AVX2: one block per vpmaddubsw + vpmaddwd; " + _TOKENS_DOC
                + ", u = blocks per loop step, pf_bytes = weight prefetch distance (bytes)"),
        Variant("vnni", "avx512_vnni", LEGACY + LEVELS4,
                ({"nt": 1, "u": 1, "pf_bytes": 8192}, {"nt": 4, "u": 1, "pf_bytes": 8192},
                 {"nt": 8, "u": 1, "pf_bytes": 8192}),
                "AVX-512 VNNI: two blocks per vpdpbusd, zero points folded into the accumulator; "
                + _TOKENS_DOC + ", u = block pairs per loop step, pf_bytes = weight prefetch "
                "distance (bytes)"),
        Variant("panel", "avx512_vnni", PANEL_FAMILY_TYPES,
                ({"nt": 1, "pf_loc": 3}, {"nt": 2, "pf_loc": 3}, {"nt": 4, "pf_loc": 3},
                 {"nt": 8, "pf_loc": 3}, {"nt": 8, "pf_loc": 2}, {"nt": 8},
                 {"nt": 12, "pf_loc": 3}, {"nt": 16, "pf_loc": 3}),
                "AVX-512 VNNI register tiles of 16 rows x nt tokens, rows in the vector lanes: "
                "weight quants transposed per block, one vpdpbusd per dword and token with the "
                "activation broadcast, scales applied to 16 rows per instruction; activations "
                "repacked block-major per token tile; " + _TOKENS_DOC
                + ", pf_loc = next-panel prefetch locality (3: L1, 2: L2, none: off)"),
        AmxVariant("amx", "amx", PANEL_FAMILY_TYPES, ({"tc": 128}, {"tc": 64}),
                   "AMX-INT8: family `panel`'s arithmetic with the integer dots on tiles: per "
                   "16-row panel and token chunk the rows' blocks decoded once into int8 B tiles, "
                   "per 16-token tile and 32-block one tdpbssd (A = the Q8A quants), the int32 tile "
                   "scaled into float accumulators by the panel's own fused steps, so a token's "
                   "outputs are bit-identical to the panel's; tc = tokens per chunk"),
        Variant("dotprod", "dotprod", LEGACY + LEVELS4, ({"nt": 1}, {"nt": 2}, {"nt": 4}),
                "AArch64 dot product: two sdot per block and token, 4 blocks' sums gathered by "
                "two levels of addp, then one scvtf / fmul (4 weight x 4 activation scales) / "
                "fmla per 4 blocks; zero points corrected by the Q8A block sums (mla), IQ4_NL "
                "levels by tbl; " + _TOKENS_DOC),
        Variant("i8mm", "i8mm", LEGACY + LEVELS4, ({"nt": 1}, {"nt": 2}, {"nt": 4}),
                "AArch64 int8 matrix multiply: register tiles of 2 rows x 2 tokens, four smmla "
                "per block (rows zipped, token pairs interleaved once per tile in a stack "
                "buffer), one scvtf/fmul/fmla per block and tile; nt = 1 is the dotprod code "
                "(decode: no token pair); " + _TOKENS_DOC + " (even: token pairs)"),
    ) + K_VARIANTS,
    make_case=_case,
    reference=_reference,
    tolerance=_tolerance,
    example_dims={"M": 4096, "K": 4096, "acc": 0},
    doc="y[n, M] (+)= W[M, K] @ X[n, K]^T, quantised weights x Q8A activations, integer dots",
)
