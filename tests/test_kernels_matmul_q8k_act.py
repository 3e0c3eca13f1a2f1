"""matmul_q8k (K-quant weights x Q8K activations) against dequant(W) @ dequant(xq)^T in float64
(gguf.quants.dequantize for the weights, codegen/q8k.py for the activations): every variant x
tile at the native, avx2|neon and generic levels where it runs (and avx512_vnni: the vnni family
without GFNI), ragged M (fewer rows than threads), superblock counts with a u=2 remainder and a
lone superblock, token counts with partial tiles, acc 0/1, 1/2/3 threads; long rows; f16 edge
scales; extreme activations; the tolerance's tightness; the quantize_q8k -> matmul_q8k chain; the
row-panel family (16 rows x nt tokens) on several panels per thread with a ragged last panel,
padded token tiles, more slices than panels, and its weight reads between guard pages."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from reame.codegen import q8k
from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops import matmul_q8k as mk
from reame.codegen.ops.matmul_q8_kquants import random_activations, random_weights
from reame.codegen.registry import get_op
from reame.codegen.spec import KernelSpec
from conftest import check_every_tile_native
from conftest import guarded_bytes
from conftest import host_levels
from conftest import isa_at as _isa
from conftest import type_variant_params
from conftest import variant_levels as _levels

OP = get_op("matmul_q8k")
TYPES = mk.K_TYPES
DIMS = ((37, 768, 0), (2, 256, 1), (13, 1280, 1))   # K/256 = 3, 1, 5
NS = (1, 5, 10)
THREADS = (1, 2, 3)


def _spec(dtype, family, level, tile, M, K, acc):
    return KernelSpec.make("matmul_q8k", dtype, family, _isa(level).level, M=M, K=K, acc=acc,
                           **tile)


def _params():
    return type_variant_params(OP, TYPES)


@functools.lru_cache(maxsize=None)
def _case(dtype, M, K, acc, n):
    spec = _spec(dtype, "generic", "generic", {"nt": 1, "u": 1}, M, K, acc)
    case = OP.make_case(spec, np.random.default_rng([M, K, acc, n, TYPES.index(dtype)]), n)
    return case, OP.reference(spec, case)["y"]


@pytest.mark.parametrize("dtype,family,level,tile", _params())
def test_matches_reference(dtype, family, level, tile):
    rtol, atol = mk.TOLERANCE[dtype]
    for M, K, acc in DIMS:
        spec = _spec(dtype, family, level, tile, M, K, acc)
        k = build(spec, _isa(level))
        for n in NS:
            case, want = _case(dtype, M, K, acc, n)
            y = case.buffers["y"]
            for nth in THREADS:
                y[...] = case.meta["y0"]             # acc=0 starts from NaN: all overwritten
                k.run_threads(case.args, nth)
                np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                           err_msg=f"{spec.label()} n={n} nth={nth}")


@pytest.mark.parametrize("dtype", TYPES)
def test_long_rows_native(dtype):
    """K = 8192 (32 superblocks, several ~256 KiB row chunks for M = 131): every variant x tile
    at the native level, 1 and 3 threads, n = 17 (two 8-tiles and a remainder)."""
    M, K, n = 131, 8192, 17
    spec0 = _spec(dtype, "generic", "native", {"nt": 1, "u": 1}, M, K, 1)
    case = OP.make_case(spec0, np.random.default_rng(7), n)
    want = OP.reference(spec0, case)["y"]
    check_every_tile_native(OP.variants,
                            lambda family, tile: _spec(dtype, family, "native", tile, M, K, 1),
                            case, want, mk.TOLERANCE[dtype])


def _all_native_and_low(M, K, acc=0):
    for level in host_levels():
        for v in OP.variants:
            if _isa(level).has(v.min_level):
                for tile in v.tiles:
                    yield level, _spec("Q4_K", v.family, level, tile, M, K, acc)


_F16_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q2_K": (80, 82), "Q3_K": (108,),
                "IQ4_XS": (0,)}


@pytest.mark.parametrize("dtype", TYPES)
def test_f16_edge_scales_and_extreme_activations(dtype):
    """Subnormal, zero, negative-zero, negative and large f16 d / dmin; activations with full-
    range quants (|q| = 127 everywhere: the largest int16 pair sums and int32 lane sums) and an
    all-zero superblock (d_x = 0), at every level, first tile of every family."""
    M, K, n = 6, 512, 3
    edge = np.array([6e-8, -6e-8, 3e-5, 0.0, -0.0, 1000.0, -2.0 ** -14, 0.5], np.float16)
    rng = np.random.default_rng(5)
    spec0 = _spec(dtype, "generic", "generic", {"nt": 1, "u": 1}, M, K, 0)
    case = OP.make_case(spec0, rng, n)
    w = case.buffers["w"]
    bb = w.shape[1] // (K // 256)
    for r in range(M):
        for b in range(K // 256):
            for f in _F16_OFFSETS[dtype]:
                w[r, b * bb + f:b * bb + f + 2] = edge[rng.integers(len(edge)):][:1].view(np.uint8)
    x = np.where(rng.random((n, K)) < 0.5, 1.0, -1.0).astype(np.float32)
    x[1] = 1.0
    x[2, :256] = 0.0
    case.buffers["xq"][...] = q8k.quantize_rows(x)
    want = OP.reference(spec0, case)["y"]
    rtol, atol = mk.TOLERANCE[dtype]
    for level in host_levels():
        for v in OP.variants:
            if not _isa(level).has(v.min_level) or dtype not in v.dtypes:
                continue
            for tile in (v.tiles[0], v.tiles[-1]):
                spec = _spec(dtype, v.family, level, tile, M, K, 0)
                case.buffers["y"][...] = np.nan
                build(spec, _isa(level)).run_threads(case.args, 2)
                np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol,
                                           atol=atol * 1000, err_msg=spec.label())


_SCALE_BYTE = {"Q4_K": 4 + 2, "Q5_K": 4 + 2, "Q6_K": 192 + 5, "Q2_K": 5, "Q3_K": 96 + 5,
               "IQ4_XS": 4 + 1}


@pytest.mark.parametrize("dtype", TYPES)
def test_tolerance_catches_one_wrong_subblock(dtype):
    M, K = 6, 4096
    spec = _spec(dtype, "generic", "generic", {"nt": 1, "u": 1}, M, K, 0)
    case = OP.make_case(spec, np.random.default_rng(3), 2)
    want = OP.reference(spec, case)["y"]
    bb = case.buffers["w"].shape[1] // (K // 256)
    case.buffers["w"][2, 9 * bb + _SCALE_BYTE[dtype]] ^= 0x0A
    bad = OP.reference(spec, case)["y"]
    rtol, atol = mk.TOLERANCE[dtype]
    err = np.abs(bad - want) / (atol + rtol * np.abs(want))
    assert err[:, 2].min() > 2 and err[:, [0, 1, 3, 4, 5]].max() == 0


@pytest.mark.parametrize("dtype", TYPES)
def test_quantize_then_matmul_close_to_float(dtype):
    """The chain the engine runs: quantize_q8k (kernel) then matmul_q8k, against the float64
    product of the unquantised activations: the Q8K rounding error only (per-256 scale)."""
    isa = detect()
    M, K, n = 64, 2048, 8
    rng = np.random.default_rng(11)
    w = random_weights(dtype, rng, M, K)
    x = rng.standard_normal((n, K)).astype(np.float32)
    xq = np.zeros((n, q8k.row_stride(K)), np.uint8)
    qop = get_op("quantize_q8k")
    build(qop.specs("F32", isa, K=K)[-1], isa).run_threads(qop.pack({"x": x, "xq": xq}, n=n), 2)
    assert np.array_equal(xq, q8k.quantize_rows(x))
    y = np.zeros((n, M), np.float32)
    from reame.jit.select import choose
    k = build(choose("matmul_q8k", dtype, isa, n, M=M, K=K, acc=0), isa)
    k.run_threads(OP.pack({"w": w, "xq": xq, "y": y}, n=n), 2)
    W = mk.TENSOR_TYPES[dtype].dequantize(w).astype(np.float64)
    exact = x.astype(np.float64) @ W.T
    rel = np.linalg.norm(y - exact) / np.linalg.norm(exact)
    assert rel < 0.01, rel


def test_variants():
    fams = {v.family: v for v in OP.variants}
    assert set(fams) == {"generic", "avx2", "vnni", "panel"}
    assert fams["generic"].min_level == "generic" and fams["panel"].min_level == "avx512_vnni"
    for v in OP.variants:         # Q2_K / Q3_K: the portable and VNNI families only
        assert set(v.dtypes) == (set(TYPES) if v.family in ("generic", "vnni")
                                 else set(mk.TUNED)) and len(v.tiles) >= 2
    assert {t["nt"] for t in fams["vnni"].tiles} == {1, 4, 8}
    assert {t["nt"] for t in fams["panel"].tiles} == {4, 8}
    assert random_activations is not None


PANEL_DIMS = ((70, 256, 0), (150, 768, 1), (16, 512, 1), (17, 256, 0))


@pytest.mark.parametrize("dtype", mk.TUNED)
def test_panel_tiles(dtype):
    """Family `panel`: several 16-row panels per thread, a last panel moved back over rows
    already done (only its new lanes stored), M a multiple of 16 and one more; token counts
    below, at and above a tile (padded with zero tokens whose outputs are not written: acc=1
    would show a double store); 1/2/3 threads and more slices than panels (7, 16)."""
    v = next(v for v in OP.variants if v.family == "panel")
    for level in _levels(v):
        for M, K, acc in PANEL_DIMS:
            for tile in v.tiles:
                spec = _spec(dtype, "panel", level, tile, M, K, acc)
                k = build(spec, _isa(level))
                rtol, atol = mk.TOLERANCE[dtype]
                for n in (1, 3, 4, 8, 9, 17):
                    case, want = _case(dtype, M, K, acc, n)
                    y = case.buffers["y"]
                    for nth in (1, 2, 3, 7, 16):
                        y[...] = case.meta["y0"]
                        k.run_threads(case.args, nth)
                        np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                                   err_msg=f"{spec.label()} n={n} nth={nth}")


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_weights(dtype, at_end):
    """Weights between PROT_NONE pages: no vnni or panel tile reads outside them (the panels
    load each row's 16/32-byte pieces and gather 4-byte words at fixed offsets of a superblock:
    Q6_K's d, the last 2 bytes of a 210-byte superblock, is read as the high half of the word
    at offset 206)."""
    isa = detect()
    for M, K in ((3, 256), (17, 512)):
        for v in OP.variants:
            if v.family not in ("vnni", "panel") or not v.usable(isa) or dtype not in v.dtypes:
                continue
            for tile in v.tiles:
                spec = _spec(dtype, v.family, "native", tile, M, K, 0)
                case = OP.make_case(spec, np.random.default_rng(0), 5)
                want = OP.reference(spec, case)["y"]
                w = case.buffers["w"]
                keep, g = guarded_bytes(w.nbytes, at_end)
                g[:] = w.reshape(-1)
                args = case.args.copy()
                args[0] = g.ctypes.data
                case.buffers["y"][...] = np.nan
                build(spec, isa).run_threads(args, 2)
                rtol, atol = mk.TOLERANCE[dtype]
                np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                                           err_msg=spec.label())
                del g, keep
