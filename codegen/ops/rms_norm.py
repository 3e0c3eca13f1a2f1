"""RMSNorm of activation rows: y = x * w / sqrt(mean(x^2) + eps).

args ("x", "w", "y", "n"): x, y f32 [n, K] (y may be x), w f32 [K]; dims ("K", "eps").
Also Qwen3's per-head q/k norm: rows = n*H, K = head_dim.
Families: "generic" (portable; llvm.fmuladd, so no fmaf libcalls at the x86-64 baseline) and
"simd" (AVX2/AVX-512: tree-reduced sum of squares from U accumulators, masked row tail, rows of
up to 8 vectors kept in registers between the two passes with w hoisted out of the row loop).
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x * w / sqrt(mean(x^2) + eps) over the last axis, in x's precision: the reference
    engine's (float32) and this op's oracle (float64)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _case(spec, rng, n):
    K = spec.p["K"]
    x = rng.standard_normal((n, K)).astype(np.float32)
    w = rng.standard_normal(K).astype(np.float32)
    y = np.zeros((n, K), np.float32)
    bufs = {"x": x, "w": w, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def _reference(spec, case):
    x, w = case.buffers["x"].astype(np.float64), case.buffers["w"].astype(np.float64)
    return {"y": rms_norm(x, w, spec.p["eps"])}


OP = Op(
    name="rms_norm",
    args=("x", "w", "y", "n"),
    dims=("K", "eps"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4},), "portable 4-lane vectors"),
        Variant("generic", "avx2", ("F32",), ({"vl": 8},), "one AVX2 register per step"),
        Variant("generic", "avx512", ("F32",), ({"vl": 16},), "one AVX-512 register per step"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8, "unroll": 4},),
                "tree reduction, masked tail, short rows in registers"),
        Variant("simd", "avx512", ("F32",), ({"vl": 16, "unroll": 2}, {"vl": 16, "unroll": 4}),
                "tree reduction, masked tail, short rows in registers"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-5, 1e-5),
    example_dims={"K": 4096, "eps": 1e-6},
    doc="RMSNorm of n rows of K floats",
)
