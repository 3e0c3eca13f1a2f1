"""Attention kernels (attn_decode, attn_prefill) against the float64 reference of reame's
attention loop: every variant x tile at the native, avx2|neon and generic levels; f32 and f16
caches; paged caches with blocks of 16, 32 and 64 positions (scattered blocks, one shared by two
slots) and the contiguous layout; GQA ratios 1, 2 and 7; head sizes 8, 20/12 (D != Dv), 32, 64,
80, 128; 1/2/3 threads.
Decode: random positions and slots (including position 0 and the last cache row). Prefill:
chunks starting at 0 and at an offset (earlier positions already cached), mixed batches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops.attn_decode import case_reference, make_attention_case, reference
from reame.codegen.registry import get_op
from conftest import host_levels, isa_at as _isa

LEVELS = host_levels()

# (H, Hkv, D, Dv, kv): GQA ratio 7, 2, 1, 7, 1 (D != Dv), 2
SHAPES = [(14, 2, 64, 64, "f16"), (4, 2, 32, 32, "f32"), (2, 2, 8, 8, "f16"),
          (7, 1, 80, 80, "f32"), (3, 3, 20, 12, "f16"), (2, 1, 128, 128, "f32")]


# (C, BS): the contiguous layout, and paged pools of 16-, 32- and 64-position blocks
LAYOUTS = ((100, 0), (96, 16), (96, 32), (128, 64))


def _params(op_name):
    """Every spec at every level, on every shape, in every layout; at the native level with both
    cache types."""
    op = get_op(op_name)
    out = []
    for level in LEVELS:
        isa = _isa(level)
        for si, (H, Hkv, D, Dv, kv) in enumerate(SHAPES):
            kvs = (kv, "f32" if kv == "f16" else "f16") if level == "native" else (kv,)
            for kvt in kvs:
                for C, BS in LAYOUTS if level == "native" else LAYOUTS[si % 2::2]:
                    dims = dict(H=H, Hkv=Hkv, D=D, Dv=Dv, C=C, BS=BS, kv=kvt,
                                scale=1 / math.sqrt(D))
                    for spec in op.specs("F32", isa, **dims):
                        tiles = ",".join(f"{k}={v}" for k, v in spec.params if k not in dims)
                        out.append(pytest.param(spec, isa, id=f"{level}-{spec.family}[{tiles}]-"
                                                f"H{H}/{Hkv}-D{D}/{Dv}-{kvt}-BS{BS}"))
    return out


def _run(op, kernel, case, nth, what):
    want = case_reference(kernel.spec, case)["out"]
    case.buffers["out"][:] = np.nan
    kernel.run_threads(case.args, nth)
    got = case.buffers["out"]
    rtol, atol = op.tolerance("F32")
    assert np.all(np.isfinite(got)), f"{what}: rows left unwritten"
    err = np.abs(got - want) / (atol + rtol * np.abs(want))
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err.max() <= 1.0, (f"{what}: out{list(worst)} = {got[worst]!r}, want {want[worst]!r} "
                              f"({err.max():.3g} x tolerance)")


@pytest.mark.parametrize("spec,isa", _params("attn_decode"))
def test_attn_decode(spec, isa):
    op = get_op("attn_decode")
    k = build(spec, isa)
    for n in (1, 5):
        rng = np.random.default_rng(n)
        case = make_attention_case(op, spec, rng, n)           # random slots and positions
        for nth in (1, 2, 3):
            _run(op, k, case, nth, f"{spec.label()} n={n} nth={nth}")


def _prefill_batches(rng, C):
    """(positions, slots) of prefill-shaped batches."""
    yield list(range(0, 37)), [0] * 37                      # a chunk from position 0
    yield list(range(23, 52)), [1] * 29                     # a chunk after 23 cached positions
    pos = [5, 9] + list(range(40, 58)) + [70] + list(range(0, 13)) + [C - 1]
    seq = [2, 0] + [1] * 18 + [0] + [2] * 13 + [1]          # decode tokens + two chunks
    yield pos, seq
    yield [int(rng.integers(0, C))], [0]                   # a single token


@pytest.mark.parametrize("spec,isa", _params("attn_prefill"))
def test_attn_prefill(spec, isa):
    op = get_op("attn_prefill")
    k = build(spec, isa)
    rng = np.random.default_rng(11)
    for b, (pos, seq) in enumerate(_prefill_batches(rng, spec.p["C"])):
        case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
        for nth in (1, 2, 3):
            _run(op, k, case, nth, f"{spec.label()} batch {b} nth={nth}")


@pytest.mark.parametrize("BS", (0, 32))
@pytest.mark.parametrize("kv", ("f16", "f32"))
@pytest.mark.parametrize("op_name", ("attn_decode", "attn_prefill"))
def test_long_context(op_name, kv, BS):
    """Many key blocks and tiles, the last one partial; a long and a short sequence together
    (the cost-balanced split gives them to different threads)."""
    op = get_op(op_name)
    isa = detect()
    C = 1024 if BS else 1000
    spec = op.specs("F32", isa, H=14, Hkv=2, D=64, Dv=64, C=C, BS=BS, kv=kv, scale=0.125)[-1]
    k = build(spec, isa)
    rng = np.random.default_rng(12)
    if op_name == "attn_decode":
        pos, seq = [999, 3, 517], [0, 1, 2]
    else:
        pos, seq = list(range(900, 1000)) + [4], [0] * 100 + [1]
    case = make_attention_case(op, spec, rng, len(pos), positions=pos, seq_ids=seq)
    for nth in (1, 2, 3):
        _run(op, k, case, nth, f"{spec.label()} nth={nth}")


@pytest.mark.parametrize("BS", (0, 16, 64))
def test_prefill_matches_decode(BS):
    """The two kernels compute the same function: a prefill chunk and the same tokens through
    decode agree to rounding."""
    isa = detect()
    dims = dict(H=8, Hkv=2, D=64, Dv=64, C=128, BS=BS, kv="f32", scale=0.125)
    pre = get_op("attn_prefill")
    dec = get_op("attn_decode")
    kp = build(pre.specs("F32", isa, **dims)[-1], isa)
    kd = build(dec.specs("F32", isa, **dims)[-1], isa)
    rng = np.random.default_rng(13)
    case = make_attention_case(pre, kp.spec, rng, 60, positions=list(range(60, 120)),
                               seq_ids=[1] * 60)
    kp.run_threads(case.args, 2)
    a = case.buffers["out"].copy()
    kd.run_threads(case.args, 2)
    np.testing.assert_allclose(a, case.buffers["out"], rtol=1e-5, atol=1e-5)


def test_reference_matches_reame_reference():
    """Our float64 oracle is reame.reference's attention loop (same cache, same math)."""
    rng = np.random.default_rng(14)
    H, Hkv, D, C = 6, 2, 16, 20
    q = rng.standard_normal((3, H, D)).astype(np.float32)
    kc = rng.standard_normal((2, Hkv, C, D)).astype(np.float32)
    vc = rng.standard_normal((2, Hkv, C, D)).astype(np.float32)
    pos, seq = np.array([0, 7, 19]), np.array([1, 0, 1])
    ours = reference(q, kc, vc, pos, seq, 0.25)
    for i in range(3):                          # reame/reference.py, ReferenceEngine.forward
        keys, vals = kc[seq[i], :, :pos[i] + 1], vc[seq[i], :, :pos[i] + 1]
        for hq in range(H):
            s = keys[hq // (H // Hkv)] @ q[i, hq] * 0.25
            s = np.exp(s - s.max())
            np.testing.assert_allclose(ours[i, hq], (s / s.sum()) @ vals[hq // (H // Hkv)],
                                       rtol=1e-5, atol=1e-6)
