"""RMSNorm of activation rows: y = x * w / sqrt(mean(x^2) + eps)."""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    K = spec.p["K"]
    x = rng.standard_normal((n, K)).astype(np.float32)
    w = rng.standard_normal(K).astype(np.float32)
    y = np.zeros((n, K), np.float32)
    bufs = {"x": x, "w": w, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def _reference(spec, case):
    x, w = case.buffers["x"].astype(np.float64), case.buffers["w"].astype(np.float64)
    return {"y": x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + spec.p["eps"]) * w}


OP = Op(
    name="rms_norm",
    args=("x", "w", "y", "n"),
    dims=("K", "eps"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4},), "portable 4-lane vectors"),
        Variant("generic", "avx2", ("F32",), ({"vl": 8},), "one AVX2 register per step"),
        Variant("generic", "avx512", ("F32",), ({"vl": 16},), "one AVX-512 register per step"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-5, 1e-5),
    example_dims={"K": 4096, "eps": 1e-6},
    doc="RMSNorm of n rows of K floats",
)
