"""quantize_q8k: f32 activation rows -> Q8K (codegen/q8k.py), the input of `matmul_q8k`.

Bit-exact with `q8k.quantize_rows`: per 256-superblock d = amax / 127 in f32, inv = 1 / d (0 for
an all-zero block), q = sign(v) * floor(|v| + 0.5) with v = x * inv, all in f32 as numpy does;
bs = sum(q) per 16 values (int16), xs = d * (bs[2j] + bs[2j+1]) per 32 values (f32).

Threading: the n * K/256 superblocks of the batch are split into `nth` contiguous ranges, so one
decode row is split between threads as evenly as a prefill batch is. Padding bytes of a row (up
to `row_stride(K)`) are never written.
"""

from __future__ import annotations

import numpy as np

from .. import q8k
from .base import Case, Op, Variant


def _case(spec, rng, n):
    K = spec.p["K"]
    x = rng.standard_normal((n, K)).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, size=(n, K // 256, 1))).astype(np.float32).repeat(
        256, -1).reshape(n, K)
    if K >= 512 and n >= 1:
        x[0, :256] = 0.0                        # an all-zero superblock: d = 0, inv = 0
        # d = 1 exactly (amax = 127), other values exactly halfway: round half away from zero
        half = (np.arange(255) % 200 - 100).astype(np.float32) + 0.5
        x[0, 256:512] = np.concatenate([[127.0], half]).astype(np.float32)
    xq = np.zeros((n, q8k.row_stride(K)), np.uint8)
    bufs = {"x": x, "xq": xq}
    return Case(bufs, OP.pack(bufs, n=n), ("xq",))


def _reference(spec, case):
    return {"xq": q8k.quantize_rows(case.buffers["x"])}


OP = Op(
    name="quantize_q8k",
    args=("x", "xq", "n"),
    dims=("K",),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4},), "portable 4-lane vectors"),
        Variant("generic", "avx2", ("F32",), ({"vl": 8},), "one AVX2 register per step"),
        Variant("generic", "avx512", ("F32",), ({"vl": 16},), "one AVX-512 register per step"),
    ),
    make_case=_case,
    reference=_reference,
    # bit-exact: any differing byte (a quant, or any bit of d, bs or xs) fails
    tolerance=lambda dtype: (0.0, 1e-6),
    example_dims={"K": 4096},
    doc="quantise n f32 rows of K to Q8K (int8 + per-256 f32 scale + per-16 sums + per-32 "
        "dequantised sums)",
)
