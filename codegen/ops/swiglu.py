"""swiglu: y = silu(g) * u = g * u / (1 + exp(-g)), the gate of the SwiGLU feed-forward block;
with act="gelu", GeGLU's y = gelu(g) * u (Gemma; GELU's tanh form, as llama.cpp's ggml_gelu),
computed as g * u / (1 + exp(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3).

args ("g", "u", "y", "n"): g, u, y f32 [n, F]; y may be g (in place). dims ("F", "act"); act
is optional (absent: silu).
exp is the vectorised polynomial of templates/_math.ll.j2 (Cephes expf, < 1 ulp measured over
[-87, 88]); llvm.exp on vectors would scalarise into libm calls.
Threading: the n*F floats are one flat range split in blocks of 64 floats.
Tolerance: rtol 2e-6 (exp ~1 ulp, the division and product ~1.5 ulp), atol 1e-9: GeGLU's
exponent a = 2z is a float32 product with ~2 ulp of relative error, which exp turns into a
relative error of ~|a| * 1.2e-7 of the result; beyond |a| ~ 10, where that exceeds rtol, the
result is below 1e-4 |g u| and the absolute error below 1e-9. (For silu, below a denormal-range
value that we may flush to +-0.)
"""

from __future__ import annotations

import math

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


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (as llama.cpp's ggml_gelu and Gemma's gelu_pytorch_tanh), the
    reference engine's form (float32); the oracle below uses its exact rewrite, stable in the
    tail for float64 checks of the kernel."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _reference(spec, case):
    g, u = case.buffers["g"].astype(np.float64), case.buffers["u"].astype(np.float64)
    a = g                                   # silu(g) = g / (1 + exp(-a))
    if spec.p.get("act", "silu") == "gelu":  # 0.5 g (1 + tanh z) = g / (1 + exp(-2z)), exactly;
        a = 2 * np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)   # (1 + tanh z loses the tail)
    with np.errstate(over="ignore"):
        return {"y": g * u / (1.0 + np.exp(-a))}


SIMD = "tuned: exp with vscalefps (AVX-512), lane-masked tails, unrolled"

OP = Op(
    name="swiglu",
    args=("g", "u", "y", "n"),
    dims=("F", "act"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4, "unroll": 2},),
                "portable 4-lane vectors, polynomial exp, scalar tails"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 1}, {"vl": 8, "unroll": 2}), SIMD),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 1}, {"vl": 16, "unroll": 2}),
                SIMD),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (2e-6, 1e-9),
    example_dims={"F": 4864},
    doc="y = silu(g) * u over f32 rows of F (SwiGLU gate)",
)
