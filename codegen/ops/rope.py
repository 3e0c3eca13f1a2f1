"""rope: rotary position embedding of q or k, in place, from a precomputed (cos, sin) table.

args ("x", "pos", "cs", "n"): x f32 [n, H, D] rotated in place; pos i32 [n]; cs f32
[n_ctx, R/2, 2], cs[p, i] = (cos, sin) of pair i at position p, which the engine fills from
rope_angles below (frequency factors, linear and YaRN scaling and YaRN's magnitude
scale are folded into the table, so the kernel is exact for all of them).
dims ("H", "D", "R", "neox"): R <= D rotated dims (the leading ones; the rest stay as they are),
neox=1 rotates pairs (i, i + R/2) (NeoX/Qwen), neox=0 adjacent pairs (2i, 2i+1) (Llama GGUF).
Threading: the n*H (token, head) rows are split between threads.
Tolerance: rtol 1e-6, atol 1e-6 (x0 cos - x1 sin with one fused rounding; a cancellation leaves
an absolute error of an ulp of |x|).
"""

from __future__ import annotations

import math

import numpy as np

from .base import Case, Op, Variant


def rope_angles(c, positions: np.ndarray, freq_factors=None):
    """cos, sin [n, rope_dim/2] and the magnitude scale for each position (llama.cpp's rope_yarn):
    the angles the rope kernel reads, for a model config `c` (rope_dim, rope_theta,
    rope_scaling). Both engines take them from here."""
    half = c.rope_dim // 2
    inv_freq = c.rope_theta ** (-np.arange(half, dtype=np.float64) * 2.0 / c.rope_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    theta_extrap = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    s, mscale = c.rope_scaling, 1.0
    if s.type in ("linear", "yarn"):
        theta = theta_extrap / s.factor                   # interpolation
        if s.type == "yarn":
            # blend interpolation and extrapolation per dimension pair (YaRN ramp)
            def corr_dim(n_rot):
                return c.rope_dim * math.log(s.orig_ctx / (n_rot * 2 * math.pi)) / (
                    2 * math.log(c.rope_theta))
            low = max(0.0, math.floor(corr_dim(s.beta_fast)))
            high = min(c.rope_dim - 1.0, math.ceil(corr_dim(s.beta_slow)))
            y = (np.arange(half) - low) / max(0.001, high - low)
            ramp = (1.0 - np.clip(y, 0.0, 1.0)) * s.ext_factor
            theta = theta * (1 - ramp) + theta_extrap * ramp
            mscale = s.attn_factor * (1.0 + 0.1 * math.log(s.factor))
    else:
        theta = theta_extrap
        mscale = s.attn_factor
    return (np.cos(theta) * mscale).astype(np.float32), (np.sin(theta) * mscale).astype(np.float32)


def _case(spec, rng, n):
    H, D, R = spec.p["H"], spec.p["D"], spec.p["R"]
    n_ctx = 64
    x = rng.standard_normal((n, H, D)).astype(np.float32)
    pos = rng.integers(0, n_ctx, n).astype(np.int32)
    half = R // 2
    inv = 10000.0 ** (-np.arange(half) * 2.0 / R) / rng.uniform(1.0, 2.0, half)
    th = np.arange(n_ctx)[:, None] * inv[None, :]
    mscale = 1.1
    cs = np.stack([np.cos(th) * mscale, np.sin(th) * mscale], axis=-1).astype(np.float32)
    bufs = {"x": x, "x_in": x.copy(), "pos": pos, "cs": cs}
    return Case(bufs, OP.pack(bufs, n=n), ("x",))


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rope_dim: int, neox: bool):
    """Rotate the first rope_dim dims of every head, in x's precision (the reference engine's
    float32, this op's float64 oracle). x [n, heads, head_dim]; cos/sin [n, rope_dim/2]."""
    half = rope_dim // 2
    out = x.copy()
    if neox:                          # pairs (i, i + half): the two halves of the head
        x0, x1 = x[..., :half], x[..., half:rope_dim]
    else:                             # pairs (2i, 2i + 1): adjacent dims
        x0, x1 = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
    c, s = cos[:, None, :], sin[:, None, :]
    r0, r1 = x0 * c - x1 * s, x0 * s + x1 * c
    if neox:
        out[..., :half], out[..., half:rope_dim] = r0, r1
    else:
        out[..., 0:rope_dim:2], out[..., 1:rope_dim:2] = r0, r1
    return out


def reference(x, pos, cs, R, neox):
    """float64 rotation of x [n, H, D] by the kernel's cos/sin table cs [position, R/2, 2]."""
    f64 = lambda a: a.astype(np.float64)           # noqa: E731
    return rotate(f64(x), f64(cs[pos, :, 0]), f64(cs[pos, :, 1]), R, neox)


def _reference(spec, case):
    b = case.buffers
    return {"x": reference(b["x_in"], b["pos"], b["cs"], spec.p["R"], spec.p["neox"])}


OP = Op(
    name="rope",
    args=("x", "pos", "cs", "n"),
    dims=("H", "D", "R", "neox"),
    variants=(
        Variant("generic", "generic", ("F32",), ({"vl": 4},), "portable: 4 pairs per step"),
        Variant("simd", "avx2", ("F32",), ({"vl": 8},), "8 pairs per step, FMA"),
        Variant("simd", "avx512", ("F32",), ({"vl": 16},), "16 pairs per step, FMA"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: (1e-6, 1e-6),
    example_dims={"H": 14, "D": 64, "R": 64, "neox": 1},
    doc="rotary embedding of n tokens x H heads x D (first R dims), in place, from a cos/sin table",
)
