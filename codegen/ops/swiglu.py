"""swiglu: y = silu(g) * u = g * u / (1 + exp(-g)), the gate of the SwiGLU feed-forward block.

args ("g", "u", "y", "n"): g, u, y f32 [n, F]; y may be g (in place). dims ("F",).
exp is the vectorised polynomial of templates/_math.ll.j2 (Cephes expf, < 1 ulp measured over
[-87, 88]); llvm.exp on vectors would scalarise into libm calls.
Threading: the n*F floats are one flat range split in blocks of 64 floats.
Tolerance: rtol 2e-6 (exp ~1 ulp, the division and product ~1.5 ulp), atol 1e-30: for
g < -87.3 the result is a denormal-range value (|silu(g)| < 1e-36) that we may flush to +-0.
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    F = spec.p["F"]
    g = (rng.standard_normal((n, F)) * 4).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-3, -1e-3, 20.0, -20.0, 88.5, -88.5, 87.4, -87.4, 100.0,
                        -100.0, 1e-30, -1e-30], np.float32)
    flat = g.reshape(-1)
    k = min(len(special), flat.size)
    flat[rng.choice(flat.size, k, replace=False)] = special[:k]
    u = rng.standard_normal((n, F)).astype(np.float32)
    y = np.full((n, F), np.nan, np.float32)
    bufs = {"g": g, "u": u, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def _reference(spec, case):
    g, u = case.buffers["g"].astype(np.float64), case.buffers["u"].astype(np.float64)
    with np.errstate(over="ignore"):
        return {"y": g * u / (1.0 + np.exp(-g))}


SIMD = "tuned: exp with vscalefps (AVX-512), lane-masked tails, unrolled"

OP = Op(
    name="swiglu",
    args=("g", "u", "y", "n"),
    dims=("F",),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "unroll": 2},),
                "portable 4-lane vectors, polynomial exp, scalar tails"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 1}, {"vl": 8, "unroll": 2}), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 1}, {"vl": 16, "unroll": 2}),
                SIMD),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (2e-6, 1e-30),
    example_dims={"F": 4864},
    doc="y = silu(g) * u over f32 rows of F (SwiGLU gate)",
)
