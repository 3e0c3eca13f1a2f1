"""softmax over rows of K floats, in place, numerically stable (the max is subtracted first).

args ("x", "n"): x f32 [n, K], overwritten with softmax(x[r, :]). dims ("K",).
Three passes over each row: max, exp(x - max) stored and summed, scale by 1/sum. exp is the
polynomial of templates/_math.ll.j2 (< 1 ulp); -inf entries give exactly 0 (masked logits).
A row of only -inf (or a NaN) gives NaN, as numpy does.
Threading: rows are split between threads (a single row runs on one thread).
Tolerance: rtol 3e-5 plus atol 1e-9, against a float64 reference: the sum is accumulated in
f32 lanes (each lane adds K/(vl*unroll) terms in order), so its relative error grows like
sqrt(K) * 6e-8 (measured 1.2e-6 at K = 4096, up to ~1e-5 at K = 100003, a vocabulary-sized row).
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    K = spec.p["K"]
    x = (rng.standard_normal((n, K)) * 3).astype(np.float32)
    if K > 2:
        x[0, rng.integers(0, K)] = -np.inf                  # a masked logit
        x[-1, rng.integers(0, K)] = 60.0                    # a dominant one
    bufs = {"x": x, "x_in": x.copy()}
    return Case(bufs, OP.pack(bufs, n=n), ("x",))


def softmax(x: np.ndarray) -> np.ndarray:
    """Over the last axis, in x's precision (the reference engine's router, this op's oracle)."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _reference(spec, case):
    return {"x": softmax(case.buffers["x_in"].astype(np.float64))}


SIMD = "tuned: lane-masked row tail, exp with vscalefps (AVX-512), U accumulators"

OP = Op(
    name="softmax",
    args=("x", "n"),
    dims=("K",),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "unroll": 2},),
                "portable 4-lane vectors, power-of-two tails"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 2},), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 1}, {"vl": 16, "unroll": 2}),
                SIMD),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (3e-5, 1e-9),
    example_dims={"K": 4096},
    doc="in-place softmax of f32 rows of K",
)
