"""quantize_q8k (f32 -> Q8K) must match codegen/q8k.quantize_rows bit for bit: every variant at
the native, avx2|neon and generic levels, ragged row counts, 1/2/3 threads (uneven superblock
splits), hard values; and the format itself (dequantisation, sums) against its definition."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen import q8k
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from conftest import host_levels, isa_at as _isa

OP = get_op("quantize_q8k")
LEVELS = host_levels()
KS = (256, 768, 2304)          # 1, 3, 9 superblocks


def _specs():
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for K in KS:
            for spec in OP.specs("F32", isa, K=K):
                out.append(pytest.param(spec, isa, id=f"{level}-vl{spec.p['vl']}-K{K}"))
    return out


def _run(kernel, x, nth):
    n, K = x.shape
    xq = np.full((n, q8k.row_stride(K)), 0xA5, np.uint8)    # padding must stay untouched
    kernel.run_threads(OP.pack({"x": x, "xq": xq}, n=n), nth)
    return xq


def _expect(x):
    want = q8k.quantize_rows(x)
    K = x.shape[1]
    want[:, q8k.offsets(K)["end"]:] = 0xA5
    return want


@pytest.mark.parametrize("spec,isa", _specs())
def test_bit_exact(spec, isa):
    k = build(spec, isa)
    K = spec.p["K"]
    rng = np.random.default_rng(K)
    for n in (1, 5):
        x = OP.make_case(spec, rng, n).buffers["x"]
        for nth in (1, 2, 3):
            np.testing.assert_array_equal(_run(k, x, nth), _expect(x), err_msg=f"n={n} nth={nth}")
    ok, worst = OP.check(k, rng, n=3, nth=2)
    assert ok, worst


@pytest.mark.parametrize("level", LEVELS)
def test_hard_values(level):
    """Exact halves at non-unit scales, huge and tiny magnitudes (1/d overflows to inf, zeros
    then map to 127 as in quantize_q8a), all-zero and single-nonzero superblocks, negative zeros."""
    isa = _isa(level)
    k = build(OP.specs("F32", isa, K=512)[-1], isa)
    rng = np.random.default_rng(7)
    x = np.zeros((4, 512), np.float32)
    for b in range(2):
        d = np.float32(2.0 ** rng.integers(-20, 20))
        x[0, 256 * b:256 * b + 256] = (rng.integers(-127, 127, 256) + 0.5).astype(np.float32) * d
        x[0, 256 * b] = 127 * d
    x[1, :256] = -0.0
    x[1, 40] = -3.0
    x[1, 256:] = rng.standard_normal(256).astype(np.float32) * np.float32(1e30)
    x[2, :256] = np.where(rng.random(256) < 0.5, 1, -1).astype(np.float32) * np.float32(1e-39)
    x[2, 256:] = rng.standard_normal(256).astype(np.float32) * np.float32(1e-3)
    x[3, :256] = np.float32(1e-39)
    x[3, 7] = 0.0                                   # 0 * inf: NaN in f32, 127 as minnum gives
    with np.errstate(over="ignore"):
        want = _expect(x)
    for nth in (1, 2, 3):
        np.testing.assert_array_equal(_run(k, x, nth), want)


def test_single_row_is_split_between_threads():
    isa = detect()
    k = build(OP.specs("F32", isa, K=1024)[-1], isa)
    x = np.random.default_rng(3).standard_normal((1, 1024)).astype(np.float32)
    xq = np.full((1, q8k.row_stride(1024)), 0xA5, np.uint8)
    args = OP.pack({"x": x, "xq": xq}, n=1)
    k(args, 0, 2)                                  # only the first of two threads runs
    want = _expect(x)
    assert np.array_equal(xq[0, :512], want[0, :512]) and np.all(xq[0, 512:1024] == 0xA5)
    k(args, 1, 2)
    assert np.array_equal(xq, want)


def test_format():
    """The layout's fields against their definitions: |q| <= 127, s_j in 1..127 following each
    32-block's magnitude, dequantised values within step/2 of x (as fine as Q8A's per-32 scale,
    up to the ceil of s_j), xs = step * sums per 16."""
    rng = np.random.default_rng(1)
    K = 1024
    x = rng.standard_normal((3, K)).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, (3, K // 32, 1))).astype(np.float32).repeat(32, -1).reshape(3, K)
    xq = q8k.quantize_rows(x)
    assert q8k.row_stride(K) % 64 == 0 and xq.shape == (3, q8k.row_stride(K))
    qs, D, xs, s = q8k.unpack_rows(xq, K)
    assert np.abs(qs.astype(int)).max() == 127 and s.min() >= 1 and s.max() == 127
    blocks = np.abs(x).reshape(3, -1, 8, 32).max(-1)
    amax = blocks.max(-1)
    assert np.allclose(D, amax / 127 / 127, rtol=1e-6)
    step = (D[..., None] * s.reshape(3, -1, 8)).reshape(3, -1)          # per 32-block
    assert np.all(step * 127 >= blocks.reshape(3, -1) * (1 - 1e-6))
    assert np.all(step <= blocks.reshape(3, -1) / 127 + D.repeat(8, 1) * (1 + 1e-6))
    deq = q8k.dequantize_rows(xq, K, np.float64)
    assert np.all(np.abs(deq - x) <= np.repeat(step, 32, axis=1) * (0.5 + 1e-6))
    s16 = qs.reshape(3, -1, 16).astype(int).sum(-1)
    assert np.array_equal(xs, (np.repeat(step, 2, axis=1).astype(np.float32) * s16.astype(np.float32)))
    # an all-zero superblock: D = 0, s = 1, q = 0, xs = 0
    z = q8k.quantize_rows(np.zeros((1, 256), np.float32))
    qz, Dz, xz, sz = q8k.unpack_rows(z, 256)
    assert not qz.any() and Dz[0, 0] == 0 and not xz.any() and (sz == 1).all()
