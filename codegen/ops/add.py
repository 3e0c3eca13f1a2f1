"""add: y = a + b over activation rows (residual add), or a + b[0] (bias add).

args ("a", "b", "y", "n"): a f32 [n, K]; b f32 [n, K] (bcast=0) or [K] (bcast=1); y f32 [n, K],
which may be `a` itself (in place). dims ("K", "bcast").

Threading: bcast=0 treats the n*K floats as one flat range split between threads in blocks of
64 floats (so a single decode row is shared by all threads); bcast=1 splits the rows.
Exact: one f32 addition per element, as numpy does (tolerance 0).
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    K, bcast = spec.p["K"], spec.p["bcast"]
    a = rng.standard_normal((n, K)).astype(np.float32)
    b = rng.standard_normal((K,) if bcast else (n, K)).astype(np.float32)
    y = np.full((n, K), np.nan, np.float32)
    bufs = {"a": a, "b": b, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def _reference(spec, case):
    a, b = case.buffers["a"], case.buffers["b"]
    return {"y": (a + b).astype(np.float64)}     # f32 addition is exact-rounded: compare to it


SIMD = "tuned: lane-masked tails (vmaskmovps / AVX-512 k-masks), unrolled"

OP = Op(
    name="add",
    args=("a", "b", "y", "n"),
    dims=("K", "bcast"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "unroll": 2},),
                "portable 4-lane vectors, scalar tails"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 2}, {"vl": 8, "unroll": 4}), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 1}, {"vl": 16, "unroll": 4}),
                SIMD),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (0.0, 1e-30),      # exact (atol > 0 only to avoid 0/0)
    example_dims={"K": 896, "bcast": 0},
    doc="y = a + b (residual) or a + b[0] (bias, bcast=1), f32 rows of K",
)
