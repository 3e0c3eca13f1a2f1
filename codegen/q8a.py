"""Q8A: the 8-bit activation format the integer-dot matmul kernels read.

Not a file format: activations are quantised on the fly (op `quantize_q8a`) so weight blocks can
be multiplied with integer dot products (VNNI `vpdpbusd`/`vpdpwssd`), as llama.cpp does with Q8_0/
Q8_K. One row of K floats (K a multiple of 32) becomes, at byte offsets:

    0            int8  qs[K]          q = round_half_away(x / d), |q| <= 127
    K            f32   d[K/32]        per 32-block scale d = max|x| / 127 (0 for an all-zero block)
    K + 4*K/32   int32 s[K/32]        per 32-block sum of qs (for weight offsets/mins)

and rows are `row_stride(K)` bytes apart (a multiple of 64). This module is the numpy reference.
"""

from __future__ import annotations

import numpy as np

QBLOCK = 32


def row_stride(K: int) -> int:
    assert K % QBLOCK == 0, "Q8A rows are whole 32-blocks"
    return (K + 8 * (K // QBLOCK) + 63) // 64 * 64


def quantize_rows(x: np.ndarray) -> np.ndarray:
    """float32 [n, K] -> uint8 [n, row_stride(K)] in Q8A layout."""
    x = np.asarray(x, dtype=np.float32)
    n, K = x.shape
    nb = K // QBLOCK
    blocks = x.reshape(n, nb, QBLOCK)
    amax = np.abs(blocks).max(axis=-1)
    d = (amax / 127.0).astype(np.float32)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    v = blocks * inv[..., None]
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -127, 127).astype(np.int8)
    out = np.zeros((n, row_stride(K)), dtype=np.uint8)
    out[:, :K] = q.reshape(n, K).view(np.uint8)
    out[:, K:K + 4 * nb] = d.view(np.uint8).reshape(n, 4 * nb)
    s = q.astype(np.int32).sum(axis=-1, dtype=np.int32)
    out[:, K + 4 * nb:K + 8 * nb] = s.view(np.uint8).reshape(n, 4 * nb)
    return out


def unpack_rows(xq: np.ndarray, K: int):
    """(qs int8 [n, K], d f32 [n, K/32], s int32 [n, K/32]) views of a Q8A buffer."""
    nb = K // QBLOCK
    xq = np.ascontiguousarray(xq)
    qs = xq[:, :K].view(np.int8)
    d = np.ascontiguousarray(xq[:, K:K + 4 * nb]).view(np.float32)
    s = np.ascontiguousarray(xq[:, K + 4 * nb:K + 8 * nb]).view(np.int32)
    return qs, d, s


def dequantize_rows(xq: np.ndarray, K: int) -> np.ndarray:
    qs, d, _ = unpack_rows(xq, K)
    n = qs.shape[0]
    return (qs.reshape(n, -1, QBLOCK).astype(np.float32) * d[..., None]).reshape(n, K)
