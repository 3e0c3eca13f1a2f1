"""Q8K: the 8-bit activation format of the K-quant integer-dot kernels (op `matmul_q8k`).

Like llama.cpp's Q8_K: one f32 scale per 256-value superblock (the K-quant superblock), so a
kernel can accumulate the integer products of all sub-blocks of a superblock, scaled by the
weights' integer sub-block scales, in int32, and convert once per superblock and token (Q8A,
codegen/q8a.py, has a scale per 32 values, which costs a float multiply-add per 32-block).

One row of K floats (K a multiple of 256, NSB = K/256 superblocks) becomes, at byte offsets:

    0                 int8   qs[K]       q = round_half_away(x / d), |q| <= 127
    K                 f32    d[NSB]      per superblock d = max|x| / 127 (0 for an all-zero block)
    K + 4 NSB         int16  bs[K/16]    per 16 values, the sum of qs (Q6_K's -32 offset)
    K + 4 NSB + K/8   f32    xs[K/32]    per 32 values, d * (bs[2j] + bs[2j+1]) in f32: the sum
                                         of the dequantised activations (Q4_K/Q5_K mins)

and rows are `row_stride(K)` bytes apart (a multiple of 64). This module is the numpy reference
that the op `quantize_q8k` reproduces bit for bit.
"""

from __future__ import annotations

import numpy as np

QBLOCK = 256


def offsets(K: int) -> tuple[int, int, int]:
    """Byte offsets of d, bs and xs in a row."""
    assert K % QBLOCK == 0, "Q8K rows are whole 256-superblocks"
    nsb = K // QBLOCK
    return K, K + 4 * nsb, K + 4 * nsb + K // 8


def row_stride(K: int) -> int:
    _, _, xs = offsets(K)
    return (xs + K // 8 + 63) // 64 * 64


def quantize_rows(x: np.ndarray) -> np.ndarray:
    """float32 [n, K] -> uint8 [n, row_stride(K)] in Q8K layout (padding bytes zero)."""
    x = np.asarray(x, dtype=np.float32)
    n, K = x.shape
    nsb = K // QBLOCK
    od, ob, ox = offsets(K)
    blocks = x.reshape(n, nsb, QBLOCK)
    amax = np.abs(blocks).max(axis=-1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        v = blocks * inv[..., None]
        r = np.floor(np.abs(v) + np.float32(0.5))
        r = np.where(np.isnan(r), np.float32(127.0), r)      # 0 * inf (1/d overflowed): 127
        q = (np.sign(np.where(np.isnan(v), 1.0, v)) * np.minimum(r, 127)).astype(np.int8)
    qf = q.reshape(n, K)
    bs = qf.reshape(n, K // 16, 16).astype(np.int32).sum(-1).astype(np.int16)
    s32 = bs.reshape(n, K // 32, 2).astype(np.int32).sum(-1).astype(np.float32)
    xs = (np.repeat(d, 8, axis=1) * s32).astype(np.float32)
    out = np.zeros((n, row_stride(K)), dtype=np.uint8)
    out[:, :K] = qf.view(np.uint8)
    out[:, od:ob] = d.view(np.uint8).reshape(n, 4 * nsb)
    out[:, ob:ox] = bs.view(np.uint8).reshape(n, K // 8)
    out[:, ox:ox + K // 8] = xs.view(np.uint8).reshape(n, K // 8)
    return out


def unpack_rows(xq: np.ndarray, K: int):
    """(qs int8 [n, K], d f32 [n, K/256], bs int16 [n, K/16], xs f32 [n, K/32]) of a Q8K buffer."""
    od, ob, ox = offsets(K)
    xq = np.ascontiguousarray(xq)
    qs = xq[:, :K].view(np.int8)
    d = np.ascontiguousarray(xq[:, od:ob]).view(np.float32)
    bs = np.ascontiguousarray(xq[:, ob:ox]).view(np.int16)
    xs = np.ascontiguousarray(xq[:, ox:ox + K // 8]).view(np.float32)
    return qs, d, bs, xs


def dequantize_rows(xq: np.ndarray, K: int) -> np.ndarray:
    qs, d, _, _ = unpack_rows(xq, K)
    n = qs.shape[0]
    return (qs.reshape(n, -1, QBLOCK).astype(np.float32) * d[..., None]).reshape(n, K)
