"""quantize_q8a: f32 activation rows -> Q8A (codegen/q8a.py), the input of the integer-dot
matmul `matmul_q8a`.

Bit-exact with `q8a.quantize_rows`: d = amax / 127 in f32, inv = 1 / d (0 for an all-zero
block), q = sign(v) * floor(|v| + 0.5) with v = x * inv, all in f32 as numpy does; s = sum(q).

Threading: the n * K/32 blocks of the batch are split into `nth` contiguous ranges (blocks are
independent), so one decode row is split between threads as evenly as a prefill batch is.
Padding bytes of a row (up to `row_stride(K)`) are never written.
"""

from __future__ import annotations

import numpy as np

from .. import q8a
from .base import Case, Op, Variant


def quantize_op(name: str, fmt, block: int, doc: str) -> Op:
    """The op quantising f32 rows to an activation format `fmt` (a module with row_stride and
    quantize_rows) whose scales cover `block` values; bit-exact with fmt.quantize_rows."""

    def make_case(spec, rng, n):
        K = spec.p["K"]
        x = rng.standard_normal((n, K)).astype(np.float32)
        x *= np.exp(rng.uniform(-3, 3, size=(n, K // block, 1))).astype(np.float32).repeat(
            block, -1).reshape(n, K)
        if K >= 2 * block and n >= 1:
            x[0, :block] = 0.0                  # an all-zero block: d = 0, inv = 0
            # d = 1 exactly (amax = 127), every other value exactly halfway: round half away
            half = (np.arange(block - 1) % 200 - min(100, (block - 1) // 2)).astype(
                np.float32) + 0.5
            x[0, block:2 * block] = np.concatenate([[127.0], half]).astype(np.float32)
        xq = np.zeros((n, fmt.row_stride(K)), np.uint8)
        bufs = {"x": x, "xq": xq}
        return Case(bufs, op.pack(bufs, n=n), ("xq",))

    def reference(spec, case):
        return {"xq": fmt.quantize_rows(case.buffers["x"])}

    op = Op(
        name=name,
        args=("x", "xq", "n"),
        dims=("K",),
        variants=(
            Variant("generic", "generic", ("F32",), ({"vl": 4},), "portable 4-lane vectors"),
            Variant("generic", "avx2", ("F32",), ({"vl": 8},), "one AVX2 register per step"),
            Variant("generic", "avx512", ("F32",), ({"vl": 16},), "one AVX-512 register per step"),
        ),
        make_case=make_case,
        reference=reference,
        tolerance=lambda dtype: (0.0, 1e-6),    # bit-exact: any differing byte fails
        example_dims={"K": 4096},
        doc=doc,
    )
    return op


OP = quantize_op("quantize_q8a", q8a, 32,
                 "quantise n f32 rows of K to Q8A (int8 + per-32 f32 scale + int32 block sum)")
