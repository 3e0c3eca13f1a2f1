"""Q8K: the 8-bit activation format of the K-quant integer-dot kernels (op `matmul_q8k`).

One f32 scale D per 256-value superblock (the K-quant superblock) and one small *integer*
sub-scale s_j (1..127) per 32 values: value i of 32-block j is `q_i * s_j * D`. Because the
sub-scales are integers, a kernel multiplies them into the weights' integer sub-block scales
(`sc_j * s_j` fits int16) and accumulates the scaled products of the whole superblock in int32,
with one float multiply-add per superblock and token (Q8A, codegen/q8a.py, has a float scale per
32 values: a float multiply-add per 32-block and token). The 32-block step `s_j * D` follows the
block's own magnitude (s_j = ceil(127 amax_j / amax)), so the rounding is as fine as Q8A's,
unlike llama.cpp's Q8_K (one scale per 256 values), which was measured coarser (docs/kernels-
kquants.md).

One row of K floats (K a multiple of 256, NSB = K/256 superblocks) becomes, at byte offsets:

    0                       int8   qs[K]      q = round_half_away(x / (s_j D)), |q| <= 127
    K                       f32    D[NSB]     per superblock: (amax / 127) / 127
    K + 4 NSB               f32    xs[K/16]   per 16 values: (s_j D) * sum(q) in f32, the sum of
                                              the dequantised values (Q4_K/Q5_K mins, Q6_K -32)
    K + 4 NSB + K/4         uint8  s[K/32]    per 32 values: the sub-scale s_j

and rows are `row_stride(K)` bytes apart (a multiple of 64). Quantisation of a superblock, all in
float32 (the op `quantize_q8k` reproduces it bit for bit):

    a_j = max |x| over block j;   amax = max_j a_j;   u = amax / 127;   r = u > 0 ? 1 / u : 0
    s_j = max(1, ceil(min(a_j * r, 127)))        (min ignores NaN: 0 * inf gives 127)
    D = u / 127;   step_j = D * s_j;   inv_j = step_j > 0 ? 1 / step_j : 0
    q = sign(v) * floor(min(|v| + 0.5, 127)),  v = x * inv_j
"""

from __future__ import annotations

import numpy as np

QBLOCK = 256


def offsets(K: int) -> dict[str, int]:
    """Byte offsets of the fields of a row."""
    assert K % QBLOCK == 0, "Q8K rows are whole 256-superblocks"
    nsb = K // QBLOCK
    d = K
    xs = d + 4 * nsb
    s = xs + K // 4
    end = s + K // 32
    return {"d": d, "xs": xs, "s": s, "end": end}


def row_stride(K: int) -> int:
    return (offsets(K)["end"] + 63) // 64 * 64


def quantize_rows(x: np.ndarray) -> np.ndarray:
    """float32 [n, K] -> uint8 [n, row_stride(K)] in Q8K layout (padding bytes zero)."""
    x = np.asarray(x, dtype=np.float32)
    n, K = x.shape
    nsb = K // QBLOCK
    o = offsets(K)
    f = np.float32
    blocks = x.reshape(n, nsb, 8, 32)
    a = np.abs(blocks).max(axis=-1)                               # [n, nsb, 8]
    amax = a.max(axis=-1)                                         # [n, nsb]
    u = (amax / f(127.0)).astype(f)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = np.where(u > 0, f(1.0) / np.where(u > 0, u, f(1.0)), f(0.0)).astype(f)
        t = np.fmin(a * r[..., None], f(127.0))                   # NaN (0 * inf) -> 127
        c = np.trunc(t)
        s = np.maximum(c + (c < t), f(1.0)).astype(np.int32)      # ceil, at least 1
        D = (u / f(127.0)).astype(f)
        step = (D[..., None] * s.astype(f)).astype(f)             # [n, nsb, 8]
        inv = np.where(step > 0, f(1.0) / np.where(step > 0, step, f(1.0)), f(0.0)).astype(f)
        v = blocks * inv[..., None]
        rr = np.fmin(np.abs(v) + f(0.5), f(127.0))                # NaN -> 127, as minnum
        q = np.trunc(rr).astype(np.int32)
        q = np.where(v < 0, -q, q).astype(np.int8)
    qf = q.reshape(n, K)
    s16 = q.reshape(n, nsb, 8, 2, 16).astype(np.int32).sum(-1).astype(f)   # [n, nsb, 8, 2]
    xs = (step[..., None] * s16).astype(f).reshape(n, K // 16)
    out = np.zeros((n, row_stride(K)), dtype=np.uint8)
    out[:, :K] = qf.view(np.uint8)
    out[:, o["d"]:o["xs"]] = np.ascontiguousarray(D).view(np.uint8).reshape(n, 4 * nsb)
    out[:, o["xs"]:o["s"]] = np.ascontiguousarray(xs).view(np.uint8).reshape(n, K // 4)
    out[:, o["s"]:o["end"]] = s.astype(np.uint8).reshape(n, K // 32)
    return out


def unpack_rows(xq: np.ndarray, K: int):
    """(qs int8 [n, K], D f32 [n, K/256], xs f32 [n, K/16], s uint8 [n, K/32]) of a Q8K buffer."""
    o = offsets(K)
    xq = np.ascontiguousarray(xq)
    qs = xq[:, :K].view(np.int8)
    D = np.ascontiguousarray(xq[:, o["d"]:o["xs"]]).view(np.float32)
    xs = np.ascontiguousarray(xq[:, o["xs"]:o["s"]]).view(np.float32)
    s = np.ascontiguousarray(xq[:, o["s"]:o["end"]])
    return qs, D, xs, s


def dequantize_rows(xq: np.ndarray, K: int, dtype=np.float32) -> np.ndarray:
    """q * s_j * D (exact in float64; float32: the integer q * s_j times D, rounded once)."""
    qs, D, _, s = unpack_rows(xq, K)
    n = qs.shape[0]
    qi = qs.reshape(n, -1, 8, 32).astype(np.int64) * s.reshape(n, -1, 8, 1)
    return (qi.astype(dtype) * D.astype(dtype)[..., None, None]).reshape(n, K).astype(dtype)
