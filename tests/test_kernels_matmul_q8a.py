"""matmul_q8a for the legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) against dequant(W) @ dequant(xq)^T
in float64: every variant x tile at the native, avx2|neon and generic levels (and the vnni and panel
families at a forced avx512_vnni level, without VBMI), ragged M (not a multiple
of anything, fewer rows than threads), K with odd block counts (loop, left-over pairs and a lone
block), token counts that leave partial tiles, acc 0/1, 1/2/3 threads; the row-panel family
(16 rows x nt tokens) also on several panels per thread with a ragged last panel."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops import matmul_q8a as mq
from reame.codegen.registry import get_op
from conftest import guarded_bytes, host_levels, isa_at as _isa

OP = get_op("matmul_q8a")
TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL")
LEVELS = host_levels()
# (M, K, acc): K/32 = 7 (a loop step, a left-over pair and a lone block for u=2), 33, 1
DIMS = ((37, 224, 0), (13, 1056, 1), (2, 32, 1))
NS = (1, 5, 10)                 # partial tiles for nt = 4 and nt = 8
THREADS = (1, 2, 3)


def _params():
    out = []
    for dtype in TYPES:
        for M, K, acc in DIMS:
            for level in LEVELS + (("avx512_vnni",) if "avx512_vnni" in detect().levels else ()):
                isa = _isa(level)
                for spec in OP.specs(dtype, isa, M=M, K=K, acc=acc):
                    if level == "avx512_vnni" and spec.family not in ("vnni", "panel"):
                        continue            # vnni without VBMI/BF16 (a Cascade Lake-like target)
                    tiles = ",".join(f"{k}{v}" for k, v in spec.p.items() if k not in ("M", "K", "acc"))
                    out.append(pytest.param(spec, isa, id=f"{dtype}-M{M}K{K}a{acc}-{level}-{spec.family}-{tiles}"))
    return out


@functools.lru_cache(maxsize=None)
def _case(dtype, M, K, acc, n):
    """One random case and its expected output per (type, dims, n), shared by every kernel."""
    spec = OP.specs(dtype, _isa("generic"), M=M, K=K, acc=acc)[0]
    case = OP.make_case(spec, np.random.default_rng([M, K, acc, n, TYPES.index(dtype)]), n)
    return case, OP.reference(spec, case)["y"]


@pytest.mark.parametrize("spec,isa", _params())
def test_matches_reference(spec, isa):
    k = build(spec, isa)
    M, K, acc = spec.p["M"], spec.p["K"], spec.p["acc"]
    rtol, atol = OP.tolerance(spec.dtype)
    for n in NS:
        case, want = _case(spec.dtype, M, K, acc, n)
        y = case.buffers["y"]
        for nth in THREADS:
            y[...] = case.meta["y0"]                    # acc=0 starts from NaN: all overwritten
            k.run_threads(case.args, nth)
            np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                       err_msg=f"{spec.label()} n={n} nth={nth}")


def test_tolerance_catches_one_wrong_block():
    """The tolerance is tight: zeroing one of the 128 blocks of a row is outside it."""
    isa = detect()
    spec = OP.specs("Q8_0", isa, M=8, K=4096, acc=0)[-1]
    case = OP.make_case(spec, np.random.default_rng(1), 2)
    want = OP.reference(spec, case)["y"]
    build(spec, isa).run_threads(case.args, 1)
    rtol, atol = OP.tolerance("Q8_0")
    np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol)
    w = case.buffers["w"]
    w[3, 34 * 17:34 * 17 + 2] = 0                       # d = 0 for block 17 of row 3
    bad = OP.reference(spec, case)["y"]
    err = np.abs(bad - want) / (atol + rtol * np.abs(want))
    assert err[:, 3].min() > 2 and err[:, [0, 1, 2, 4]].max() == 0


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", ("Q4_1", "Q8_0"))
def test_f16_scale_edge_values(level, dtype):
    """Subnormal, zero, negative-zero and large f16 scales and mins (the generic level converts
    f16 with integer ops: x86 without F16C has no usable fpext half)."""
    isa = _isa(level)
    M, K = 6, 256
    specs = OP.specs(dtype, isa, M=M, K=K, acc=0)      # the level's own family, if it has one
    spec = ([s for s in specs if s.family != "generic"] if level != "generic" else [])
    spec = (spec or specs)[0]
    rng = np.random.default_rng(5)
    case = OP.make_case(spec, rng, 3)
    w = case.buffers["w"]
    bb = 20 if dtype == "Q4_1" else 34
    edge = np.array([6e-8, -6e-8, 3e-5, 0.0, -0.0, 1000.0, -2.0 ** -14, 0.5], np.float16)
    fields = (0, 2) if dtype == "Q4_1" else (0,)
    for r in range(M):
        for b in range(K // 32):
            for f in fields:
                w[r, b * bb + f:b * bb + f + 2] = edge[rng.integers(len(edge)):][:1].view(np.uint8)
    want = OP.reference(spec, case)["y"]
    build(spec, isa).run_threads(case.args, 2)
    rtol, atol = OP.tolerance(dtype)
    np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 1000)


def test_registry_and_hook():
    assert set(TYPES) <= set(OP.dtypes())
    assert OP.args == ("w", "xq", "y", "n") and OP.dims == ("M", "K", "acc")
    fams = {v.family for v in OP.variants if set(v.dtypes) & set(TYPES)}
    assert {"generic", "avx2", "vnni"} <= fams
    for v in OP.variants:
        if set(v.dtypes) & set(TYPES):
            assert len(v.tiles) >= 2
    assert all(v in OP.variants for v in mq.K_VARIANTS)


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_weights(dtype, at_end):
    """Weights between PROT_NONE pages: no variant reads a byte before or after them (the vnni
    kernels load 64 bytes per block pair; rows' ends must not run past the buffer)."""
    isa = detect()
    for M, K in ((3, 32), (2, 96), (3, 224)):
        for spec in OP.specs(dtype, isa, M=M, K=K, acc=0):
            case = OP.make_case(spec, np.random.default_rng(0), 2)
            w = case.buffers["w"]
            keep, g = guarded_bytes(w.nbytes, at_end)
            g[:] = w.reshape(-1)
            args = case.args.copy()
            args[OP.args.index("w")] = g.ctypes.data
            build(spec, isa).run_threads(args, 1)
            want = OP.reference(spec, case)["y"]
            rtol, atol = OP.tolerance(dtype)
            np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol)
            del g
            keep.close()


# panels of 16 rows: 4 + 6 rows, 9 + 6, exactly 1, 1 + 1
PANEL_DIMS = ((70, 96, 0), (150, 224, 1), (16, 64, 1), (17, 32, 0))


@pytest.mark.parametrize("dtype", mq.PANEL_FAMILY_TYPES)
@pytest.mark.parametrize("level", ("native", "avx512_vnni"))
def test_panel_tiles(dtype, level):
    """Family `panel` (register tiles of 16 rows x nt tokens): several panels per thread, a last
    panel moved back over rows already done (only its new lanes stored), M a multiple of 16 and
    one more; token counts below, at and above a tile (the last tile padded with zero tokens
    whose outputs are not written: acc=1 would show a double store), 1/2/3 threads and more
    slices than panels (nth = 7, 16)."""
    if level not in ("native",) and level not in detect().levels:
        pytest.skip(f"{level} not available")
    isa = _isa(level)
    rtol, atol = OP.tolerance(dtype)
    for M, K, acc in PANEL_DIMS:
        for spec in OP.specs(dtype, isa, M=M, K=K, acc=acc):
            if spec.family != "panel":
                continue
            k = build(spec, isa)
            for n in (1, 3, 4, 8, 9, 17):
                case, want = _case(dtype, M, K, acc, n)
                y = case.buffers["y"]
                for nth in (1, 2, 3, 7, 16):
                    y[...] = case.meta["y0"]
                    k.run_threads(case.args, nth)
                    np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                               err_msg=f"{spec.label()} n={n} nth={nth}")


@pytest.mark.parametrize("dtype", ("Q4_1", "Q8_0"))
def test_panel_f16_scale_edge_values(dtype):
    """The panels gather the 16 rows' f16 scales (and mins) and convert them with vcvtph2ps:
    subnormal, zero, negative-zero and large values."""
    isa = detect()
    M, K = 37, 256
    rng = np.random.default_rng(6)
    for spec in OP.specs(dtype, isa, M=M, K=K, acc=0):
        if spec.family != "panel":
            continue
        case = OP.make_case(spec, rng, 5)
        w = case.buffers["w"]
        bb = 20 if dtype == "Q4_1" else 34
        edge = np.array([6e-8, -6e-8, 3e-5, 0.0, -0.0, 1000.0, -2.0 ** -14, 0.5], np.float16)
        for f in ((0, 2) if dtype == "Q4_1" else (0,)):
            for r in range(M):
                for b in range(K // 32):
                    e = edge[rng.integers(len(edge)):][:1]
                    w[r, b * bb + f:b * bb + f + 2] = e.view(np.uint8)
        want = OP.reference(spec, case)["y"]
        build(spec, isa).run_threads(case.args, 2)
        rtol, atol = OP.tolerance(dtype)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 1000,
                                   err_msg=spec.label())


@pytest.mark.parametrize("dtype", mq.PANEL_FAMILY_TYPES)
def test_amx_tiles_give_the_panels_bits(dtype):
    """Family `amx` (AMX-INT8 tiles, prompt-sized programs) computes each output with the panel
    family's arithmetic: the same exact int32 block dots, then the same fused float steps in the
    same block order, so every output is bit-identical to the panel's (a token's logits do not
    depend on the program its step ran in). Token counts below, at and across a 16-token tile
    and a chunk (tc), ragged panels, 1-16 threads. Catches an epilogue that rounds differently
    (F * S then + acc instead of one FMA, d_w * d_a in another grouping), a wrong Q4_0 offset,
    a chunk boundary that skips tokens, a partial last tile sent to an epilogue copy of fewer
    rows than it has tokens (6, 13, 24: tiles of 6, 13, 8 tokens; copies of 4, 8, 16), and the
    vpdpbusd remainder of 1-2 tokens (1, 2, 17, 18, 33, 130) with a wrong zero-point start
    (Q8_0/Q4_0 as q + 128 / q + 120: -128 s_a) or the min term left out (Q4_1)."""
    isa = detect()
    if "amx" not in isa.levels or not any(v.family == "amx" and v.usable(isa) for v in OP.variants):
        pytest.skip("this CPU (or OS) has no AMX-INT8 tiles")
    for M, K, acc in PANEL_DIMS + ((37, 1056, 1),):
        specs = OP.specs(dtype, isa, M=M, K=K, acc=acc)
        panel = build(next(s for s in specs if s.family == "panel"), isa)
        amx = [build(s, isa) for s in specs if s.family == "amx"]
        assert amx
        for n in (1, 2, 3, 6, 13, 16, 17, 18, 24, 33, 130):
            case, want = _case(dtype, M, K, acc, n)
            y = case.buffers["y"]
            for nth in (1, 2, 3, 16):
                y[...] = case.meta["y0"]
                panel.run_threads(case.args, nth)
                ref = y.copy()
                for k in amx:
                    y[...] = case.meta["y0"]
                    k.run_threads(case.args, nth)
                    assert np.array_equal(y.view(np.uint32), ref.view(np.uint32)), \
                        f"{k.spec.label()} n={n} nth={nth}: not the panel's bits"
