"""quantize_q8a (f32 -> Q8A) must match codegen/q8a.quantize_rows bit for bit: every variant at the
native, avx2|neon and generic levels, ragged row counts, 1/2/3 threads (uneven block splits)."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen import q8a
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from conftest import host_levels, isa_at as _isa

OP = get_op("quantize_q8a")
LEVELS = host_levels()
KS = (32, 224, 1056)          # 1 block, 7 blocks (odd), 33 blocks


def _specs():
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for K in KS:
            for spec in OP.specs("F32", isa, K=K):
                out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}-vl{spec.p['vl']}-K{K}"))
    return out


def _run(kernel, x, nth):
    n, K = x.shape
    xq = np.full((n, q8a.row_stride(K)), 0xA5, np.uint8)    # padding must stay untouched
    kernel.run_threads(OP.pack({"x": x, "xq": xq}, n=n), nth)
    return xq


def _expect(x):
    want = q8a.quantize_rows(x)
    K = x.shape[1]
    want[:, K + 8 * (K // 32):] = 0xA5
    return want


@pytest.mark.parametrize("spec,isa", _specs())
def test_bit_exact(spec, isa):
    k = build(spec, isa)
    K = spec.p["K"]
    rng = np.random.default_rng(K)
    for n in (1, 5):
        case = OP.make_case(spec, rng, n)
        x = case.buffers["x"]
        for nth in (1, 2, 3):
            got = _run(k, x, nth)
            np.testing.assert_array_equal(got, _expect(x), err_msg=f"n={n} nth={nth}")
    ok, worst = OP.check(k, rng, n=3, nth=2)
    assert ok, worst


@pytest.mark.parametrize("level", LEVELS)
def test_hard_values(level):
    """Exact halves at non-unit scales, huge and tiny magnitudes (1/d overflows to inf), all-zero
    and single-nonzero blocks, negative zeros."""
    isa = _isa(level)
    spec = OP.specs("F32", isa, K=256)[-1]
    k = build(spec, isa)
    rng = np.random.default_rng(7)
    x = np.zeros((3, 256), np.float32)
    for b in range(8):
        d = np.float32(2.0 ** rng.integers(-20, 20))
        x[0, 32 * b:32 * b + 32] = (rng.integers(-127, 127, 32) + 0.5).astype(np.float32) * d
        x[0, 32 * b] = 127 * d
    x[1, :32] = -0.0
    x[1, 40] = -3.0
    x[1, 64:96] = rng.standard_normal(32).astype(np.float32) * np.float32(1e30)
    x[1, 96:128] = np.where(rng.random(32) < 0.5, 1, -1).astype(np.float32) * np.float32(1e-39)
    x[2] = rng.standard_normal(256).astype(np.float32) * np.float32(1e-3)
    with np.errstate(over="ignore"):               # the reference's 1/d overflows, as ours does
        want = _expect(x)
    for nth in (1, 2, 3):
        np.testing.assert_array_equal(_run(k, x, nth), want)


def test_single_row_is_split_between_threads():
    """Decode: one row of many blocks is shared by the threads (each writes a disjoint part)."""
    isa = detect()
    spec = OP.specs("F32", isa, K=1024)[-1]
    k = build(spec, isa)
    x = np.random.default_rng(3).standard_normal((1, 1024)).astype(np.float32)
    xq = np.full((1, q8a.row_stride(1024)), 0xA5, np.uint8)
    args = OP.pack({"x": x, "xq": xq}, n=1)
    k(args, 0, 2)                                  # only the first of two threads runs
    want = _expect(x)
    assert np.array_equal(xq[0, :512], want[0, :512])
    assert np.all(xq[0, 512:1024] == 0xA5)
    k(args, 1, 2)
    assert np.array_equal(xq, want)
