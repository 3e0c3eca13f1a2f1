"""Embedding lookup with dequantisation: y[i, :] = dequantise(w[ids[i], :]) (* scale).

dims ("K", "scale"): scale is optional (absent: 1); Gemma multiplies its embeddings by
sqrt(n_embd), one float32 product per value as llama.cpp's ggml_scale (so still exact)."""

from __future__ import annotations

import numpy as np

from reame.tensor_types import TENSOR_TYPES

from .base import Case, Op, Variant
from .matmul import ALL_TYPES, random_weights

VOCAB = 7          # rows of the random test table


def _case(spec, rng, n):
    K = spec.p["K"]
    w = random_weights(spec.dtype, VOCAB, K, rng)
    ids = rng.integers(0, VOCAB, n).astype(np.int32)
    y = np.full((n, K), np.nan, np.float32)          # every element must be written
    bufs = {"w": w, "ids": ids, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",))


def _reference(spec, case):
    table = TENSOR_TYPES[spec.dtype].dequantize(case.buffers["w"]).astype(np.float32)
    y = table[case.buffers["ids"]]
    if spec.p.get("scale", 1.0) != 1.0:
        y = y * np.float32(spec.p["scale"])                     # one float32 product
    return {"y": y.astype(np.float64)}


def _tolerance(dtype: str) -> tuple[float, float]:
    # The dequantisation macros repeat gguf's float32 operations in its order: bit-identical.
    return (0.0, 1e-30)


OP = Op(
    name="get_rows",
    args=("w", "ids", "y", "n"),
    dims=("K", "scale"),
    variants=(
        Variant("generic", "generic", ALL_TYPES, ({"vl": 4},), "portable 4-lane vectors"),
        Variant("generic", "avx2", ALL_TYPES, ({"vl": 8},), "8 lanes (AVX2, F16C)"),
        Variant("generic", "avx512", ALL_TYPES, ({"vl": 16},), "16 lanes (AVX-512)"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=_tolerance,
    example_dims={"K": 4096},                         # whole blocks of every type
    doc="y[i, :] = dequantised row ids[i] of w (embedding lookup); threads split the n rows",
)
