"""softcap: y = cap * tanh(x / cap), Gemma 2's soft-capping of the logits (final_logit_softcapping).

args ("x", "y", "n"): x, y f32 [n, K]; y may be x (in place). dims ("K", "cap").
tanh(z) = 1 - 2 / (1 + exp(2z)) with the polynomial exp of templates/_math.ll.j2: saturates
to +-1 (exp overflows to inf or underflows to 0, never NaN); near 0 the subtraction cancels, so
the error is absolute, ~1e-7 of tanh's range, i.e. ~1e-7 * cap in a logit.
Threading: the n*K floats are one flat range split in blocks of 64 floats.
Tolerance: rtol 1e-6, atol 2e-5 against float64 (the error is ~1.5e-7 * cap near 0: Gemma 2's
cap of 30 gives ~5e-6; a logit's error that small moves no probability measurably).
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    K, cap = spec.p["K"], spec.p["cap"]
    x = (rng.standard_normal((n, K)) * 2 * cap).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-6, -1e-6, 100 * cap, -100 * cap, 1e30, -1e30], np.float32)
    flat = x.reshape(-1)
    k = min(len(special), flat.size)
    flat[rng.choice(flat.size, k, replace=False)] = special[:k]
    y = np.full((n, K), np.nan, np.float32)
    bufs = {"x": x, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """cap * tanh(x / cap): Gemma 2's soft-capping of attention scores and logits (0: none), in
    x's precision (the reference engine's float32, this op's float64 oracle)."""
    return cap * np.tanh(x / cap) if cap else x


def _reference(spec, case):
    return {"y": softcap(case.buffers["x"].astype(np.float64), spec.p["cap"])}


SIMD = "tuned: exp with vscalefps (AVX-512), lane-masked tails, unrolled"

OP = Op(
    name="softcap",
    args=("x", "y", "n"),
    dims=("K", "cap"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "unroll": 2},),
                "portable 4-lane vectors, polynomial exp, scalar tails"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 2},), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 2},), SIMD),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-6, 2e-5),
    example_dims={"K": 256000, "cap": 30.0},
    doc="y = cap * tanh(x / cap) over f32 rows of K (Gemma 2's logit soft-capping)",
)
