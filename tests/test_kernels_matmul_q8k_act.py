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
from reame.codegen.ops.matmul_q8a_kquants import random_activations, random_weights
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
    assert set(fams) == {"generic", "avx2", "vnni", "panel", "amx", "dotprod", "i8mm"}
    assert fams["generic"].min_level == "generic" and fams["panel"].min_level == "avx512_vnni"
    assert fams["amx"].min_level == "amx" and fams["dotprod"].min_level == "dotprod"
    assert fams["i8mm"].min_level == "i8mm"
    for v in OP.variants:   # Q2_K / Q3_K / IQ4_XS: every family but the row panels
        want = {"panel": mk.TUNED, "amx": mk.AMX_TYPES}.get(v.family, TYPES)
        assert set(v.dtypes) == set(want) and len(v.tiles) >= 2
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


def _run_guarded(spec, isa, arg: str, at_end: bool, seed: int, n: int) -> None:
    """Run a random case of `spec` on 2 threads with buffer `arg` (w or xq) copied next to a
    PROT_NONE page (after it when at_end, else before), and compare with the reference."""
    case = OP.make_case(spec, np.random.default_rng(seed), n)
    want = OP.reference(spec, case)["y"]
    buf = case.buffers[arg]
    keep, g = guarded_bytes(buf.nbytes, at_end)   # noqa: F841  (keep: the mapping's owner)
    g[:] = buf.reshape(-1)
    args = case.args.copy()
    args[OP.args.index(arg)] = g.ctypes.data
    case.buffers["y"][...] = np.nan
    build(spec, isa).run_threads(args, 2)
    rtol, atol = mk.TOLERANCE[spec.dtype]
    np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                               err_msg=f"{spec.label()} n={n}")


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_weights(dtype, at_end):
    """Weights between PROT_NONE pages: no vnni, panel or amx tile reads outside them (the
    panels load each row's 16/32-byte pieces and gather 4-byte words at fixed offsets of a
    superblock: Q6_K's d, the last 2 bytes of a 210-byte superblock, is read as the high half
    of the word at offset 206; amx: Q3_K's scales and d, the last 14 bytes of its 110, as 12
    bytes and the word at 106, Q2_K's d/dmin as the word at 80)."""
    isa = detect()
    for M, K in ((3, 256), (17, 512)):
        for v in OP.variants:
            if (v.family not in ("vnni", "panel", "amx") or not v.usable(isa)
                    or dtype not in v.dtypes):
                continue
            for tile in v.tiles:
                spec = _spec(dtype, v.family, "native", tile, M, K, 0)
                _run_guarded(spec, isa, "w", at_end, seed=0, n=5)


def _amx(dtype):
    v = next(v for v in OP.variants if v.family == "amx")
    if dtype not in v.dtypes or not v.usable(detect()):
        pytest.skip(f"no AMX here (or no amx kernel for {dtype})")
    return v


AMX_DIMS = ((70, 256, 1), (16, 768, 0), (17, 512, 1), (2, 1280, 1), (48, 256, 0))


@pytest.mark.parametrize("dtype", mk.AMX_TYPES)
def test_amx_tiles(dtype):
    """Family `amx` (16-token x 16-row AMX tiles): several panels per slice, a last panel moved
    back over rows already done (only its new lanes stored), fewer rows than a panel; token
    counts below, at and above a 16-token tile (the last tile's A and C tiles reconfigured to
    its rows) and above a token chunk (n > tc: the chunk's scale table and decoded panels made
    again); 1/2/3/7 slices; the rows of y after token n untouched (they hold NaN here). Catches
    a tail tile that stores or accumulates its padding tokens (overwrites the NaN rows), a
    moved-back panel that stores all 16 lanes (acc=1 adds those rows twice), and a second
    chunk that reads the first chunk's tokens or scales."""
    v = _amx(dtype)
    rtol, atol = mk.TOLERANCE[dtype]
    for M, K, acc in AMX_DIMS:
        for tile in v.tiles:
            spec = _spec(dtype, "amx", "native", tile, M, K, acc)
            k = build(spec, detect())
            for n in (1, 15, 16, 17, 40, tile["tc"] + 21):
                case = OP.make_case(spec, np.random.default_rng([M, K, n, acc]), n)
                want = OP.reference(spec, case)["y"]
                y = np.full((n + 16, M), np.nan, np.float32)       # 16 guard rows after n
                args = case.args.copy()
                args[2] = y.ctypes.data
                for nth in (1, 2, 3, 7):
                    y[:n] = case.meta["y0"]
                    k.run_threads(args, nth)
                    np.testing.assert_allclose(y[:n], want, rtol=rtol, atol=atol,
                                               err_msg=f"{spec.label()} n={n} nth={nth}")
                    assert np.isnan(y[n:]).all(), (spec.label(), n, nth)


def _extreme_weights(dtype, rng, M, K):
    """Superblocks whose folded int8 products reach the ends of their range: Q3_K scales -32 and
    31 (stored 0 and 63) with quants -4 and 3 (t sc = 4 * -32 = -128, 4 * 31 = 124, -3 * -32 =
    96); Q2_K scales and mins 15 with quants 3 (45); IQ4_XS levels -127 and 113 with scales
    -32 and 31; random d (and dmin) of unit size."""
    w = random_weights(dtype, rng, M, K)
    nsb = K // 256
    b = w.reshape(M, nsb, -1)
    pick = rng.integers(0, 2, (M, nsb, 1)).astype(bool)
    if dtype == "Q3_K":
        b[:, :, 0:32] = np.where(rng.random((M, nsb, 32)) < 0.5, 0, 0xFF)    # hmask: q >= 0 or -4
        b[:, :, 32:96] = np.where(rng.random((M, nsb, 64)) < 0.5, 0, 0xFF)   # low bits 0 or 3
        b[:, :, 96:108] = np.where(pick, 0, 0xFF)                            # scales 0 or 63
    elif dtype == "Q2_K":
        b[:, :, 0:16] = 0xFF                                                 # sc = m = 15
        b[:, :, 16:80] = np.where(rng.random((M, nsb, 64)) < 0.7, 0xFF, 0)   # q = 3 or 0
    else:
        b[:, :, 2:4] = np.where(pick, 0, 0xFF)                               # scales_h
        b[:, :, 4:8] = np.where(pick, 0, 0xFF)                               # sc - 32: -32 / 31
        b[:, :, 8:136] = np.where(rng.random((M, nsb, 128)) < 0.5, 0x00, 0xFF)   # levels 0 / 15
    return w


@pytest.mark.parametrize("dtype", mk.AMX_TYPES)
@pytest.mark.parametrize("family", ("amx", "avx2"))
def test_products_at_the_ends_of_their_range(dtype, family):
    """With every product at the end of its range and activations at +-127, against float64.
    The amx family folds Q3_K's and Q2_K's integer sub-scales into its int8 weights (Q3_K as
    -q sc with the weight scale -d: q sc reaches +128 = -4 * -32, one past int8) and feeds
    IQ4_XS's levels as they are: catches Q3_K folded as +q sc (128 wraps to -128: those
    products change sign) or through a saturating pack (128 -> 127). The avx2 family feeds
    vpmaddubsw |level| and the activation with the level's sign (IQ4_XS: 2 * 127 * 127 per word
    pair, at the edge of int16) and sums scale words x pairs in int32 over a superblock:
    catches the level and the activation swapped (a signed level read as unsigned)."""
    level = "native"
    if family == "amx":
        _amx(dtype)
    else:
        level = "avx2"
        _isa(level)                      # skips where this CPU cannot run it
    M, K, n = 48, 1024, 21
    rng = np.random.default_rng(9)
    spec0 = _spec(dtype, "generic", "generic", {"nt": 1, "u": 1}, M, K, 0)
    case = OP.make_case(spec0, rng, n)
    case.buffers["w"][...] = _extreme_weights(dtype, rng, M, K)
    x = np.where(rng.random((n, K)) < 0.5, 1.0, -1.0).astype(np.float32)
    x[:, ::3] *= rng.random((n, K))[:, ::3].astype(np.float32)    # most quants +-127
    case.buffers["xq"][...] = q8k.quantize_rows(x)
    want = OP.reference(spec0, case)["y"]
    rtol, atol = mk.TOLERANCE[dtype]
    v = next(v for v in OP.variants if v.family == family)
    for tile in v.tiles:
        spec = _spec(dtype, family, level, tile, M, K, 0)
        case.buffers["y"][...] = np.nan
        build(spec, _isa(level)).run_threads(case.args, 2)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 100,
                                   err_msg=spec.label())


@pytest.mark.parametrize("dtype", mk.AMX_TYPES)
def test_amx_reads_stay_inside_the_activations(dtype):
    """The amx family loads its A tiles (16 tokens' quants of a 32-block) straight from the Q8K
    rows: activations ending at a PROT_NONE page, n not a multiple of 16. Catches a last tile
    loaded with 16 rows (reads past token n) and Q2_K's per-16 sums read for padding tokens."""
    _amx(dtype)
    isa = detect()
    M, K = 32, 512
    for n in (5, 17, 30):
        for tile in _amx(dtype).tiles:
            spec = _spec(dtype, "amx", "native", tile, M, K, 0)
            _run_guarded(spec, isa, "xq", True, seed=n, n=n)
