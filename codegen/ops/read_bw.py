"""Streaming-read bandwidth probe: out[0] += sum of n 64-bit words (the ceiling a matrix-vector
product is measured against; bench/kernels.py runs it over a buffer much larger than the caches).

The tensor type is irrelevant (specs carry "F32"); the words are summed as wrapping int64.
"""

from __future__ import annotations

import numpy as np

from .base import Case, Op, Variant


def _case(spec, rng, n):
    words = n * 1000 + 37                    # several steps plus a ragged tail
    buf = rng.integers(0, 1 << 20, words, dtype=np.int64)
    out = np.zeros(1, np.int64)
    bufs = {"buf": buf, "out": out}
    return Case(bufs, OP.pack(bufs, n=words), ("out",))


def _reference(spec, case):
    return {"out": np.array([case.buffers["buf"].sum()], dtype=np.float64)}


OP = Op(
    name="read_bw",
    args=("buf", "out", "n"),
    dims=(),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 2, "unroll": 4},), "<2 x i64> (SSE2)"),
        Variant("generic", "avx2", ("F32",), ({"vl": 4, "unroll": 4},), "<4 x i64> (AVX2)"),
        Variant("generic", "avx512", ("F32",), ({"vl": 8, "unroll": 4},), "<8 x i64> (AVX-512)"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (0.0, 0.0),
    doc="bandwidth probe: out[0] += sum of n int64 words (threads split the buffer)",
)
