"""matmul_q8a for the K-quant types (Q4_K, Q5_K, Q6_K) against dequant(W) @ dequant(xq)^T in
float64 (gguf.quants.dequantize for the weights): every variant x tile at the native, avx2 and
generic levels (and each variant's own lowest level: kvnni without GFNI), ragged M (not a
multiple of anything, fewer rows than threads), superblock counts that leave a remainder for
u=2 (and a lone superblock), token counts that leave partial tiles, acc 0/1, 1/2/3 threads."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.ops import matmul_q8a_kquants as mk
from reame.codegen.spec import KernelSpec
from conftest import check_every_tile_native
from conftest import host_levels
from conftest import isa_at as _isa
from conftest import variant_levels as _levels

TYPES = mk.K_TYPES
# (M, K, acc): K/256 = 3 (a u=2 step and a remainder), 1 (remainder only), 5
DIMS = ((37, 768, 0), (2, 256, 1), (13, 1280, 1))
NS = (1, 5, 10)                 # partial tiles for nt = 4
THREADS = (1, 2, 3)


def _spec(dtype, family, level, tile, M, K, acc):
    return KernelSpec.make("matmul_q8a", dtype, family, _isa(level).level, M=M, K=K, acc=acc,
                           **tile)


def _params():
    out = []
    for dtype in TYPES:
        for M, K, acc in DIMS:
            for v in mk.VARIANTS:
                for level in _levels(v):
                    for tile in v.tiles:
                        tiles = ",".join(f"{k}{x}" for k, x in tile.items())
                        out.append(pytest.param(
                            dtype, v.family, level, tile, M, K, acc,
                            id=f"{dtype}-M{M}K{K}a{acc}-{level}-{v.family}-{tiles}"))
    return out


@functools.lru_cache(maxsize=None)
def _case(dtype, M, K, acc, n):
    """One random case and its float64 expectation per (type, dims, n), shared by all kernels."""
    spec = _spec(dtype, "kgeneric", "generic", {"nt": 1, "u": 1}, M, K, acc)
    case = mk.make_case(spec, np.random.default_rng([M, K, acc, n, TYPES.index(dtype)]), n)
    return case, mk.reference(spec, case)["y"]


@pytest.mark.parametrize("dtype,family,level,tile,M,K,acc", _params())
def test_matches_reference(dtype, family, level, tile, M, K, acc):
    spec = _spec(dtype, family, level, tile, M, K, acc)
    k = build(spec, _isa(level))
    rtol, atol = mk.TOLERANCE[dtype]
    for n in NS:
        case, want = _case(dtype, M, K, acc, n)
        y = case.buffers["y"]
        for nth in THREADS:
            y[...] = case.meta["y0"]                 # acc=0 starts from NaN: all overwritten
            k.run_threads(case.args, nth)
            np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                       err_msg=f"{spec.label()} n={n} nth={nth}")


@pytest.mark.parametrize("dtype", TYPES)
def test_long_rows_and_row_chunks_native(dtype):
    """K = 8192 (32 superblocks; rows of 4.5-6.6 KiB, so the ~256 KiB L2 row chunks hold 39-56
    rows, and M = 131 takes 3-4 chunks on one thread, 1-2 on each of 3) on every variant x tile
    at the native level: the chunk loop, and the tolerance for long float32 sums."""
    M, K, n = 131, 8192, 6
    spec0 = _spec(dtype, "kgeneric", "native", {"nt": 1, "u": 1}, M, K, 1)
    case = mk.make_case(spec0, np.random.default_rng(7), n)
    want = mk.reference(spec0, case)["y"]
    check_every_tile_native(mk.VARIANTS,
                            lambda family, tile: _spec(dtype, family, "native", tile, M, K, 1),
                            case, want, mk.TOLERANCE[dtype])


# one 32-block (Q6_K: one 16-group) made wrong: a changed 6-bit sub-block scale / int8 scale
_SCALE_BYTE = {"Q4_K": 4 + 2, "Q5_K": 4 + 2, "Q6_K": 192 + 5}


@pytest.mark.parametrize("dtype", TYPES)
def test_tolerance_catches_one_wrong_subblock(dtype):
    """The tolerance is tight: one wrong sub-block scale in one of 16 superblocks of a row takes
    that row outside it, and only that row."""
    M, K = 6, 4096
    spec = _spec(dtype, "kgeneric", "generic", {"nt": 1, "u": 1}, M, K, 0)
    case = mk.make_case(spec, np.random.default_rng(3), 2)
    want = mk.reference(spec, case)["y"]
    bb = case.buffers["w"].shape[1] // (K // 256)
    off = 9 * bb + _SCALE_BYTE[dtype]                  # superblock 9 of row 2
    case.buffers["w"][2, off] ^= 0x0A                  # flip two bits of one scale
    bad = mk.reference(spec, case)["y"]
    rtol, atol = mk.TOLERANCE[dtype]
    err = np.abs(bad - want) / (atol + rtol * np.abs(want))
    assert err[:, 2].min() > 2 and err[:, [0, 1, 3, 4, 5]].max() == 0


_F16_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


@pytest.mark.parametrize("level", host_levels())
@pytest.mark.parametrize("dtype", TYPES)
def test_f16_edge_scales(dtype, level):
    """Subnormal, zero, negative-zero, negative and large f16 d / dmin (the kgeneric family
    converts f16 with integer ops: x86 without F16C has no usable fpext half)."""
    M, K = 6, 512
    edge = np.array([6e-8, -6e-8, 3e-5, 0.0, -0.0, 1000.0, -2.0 ** -14, 0.5], np.float16)
    rng = np.random.default_rng(5)
    spec0 = _spec(dtype, "kgeneric", "generic", {"nt": 1, "u": 1}, M, K, 0)
    case = mk.make_case(spec0, rng, 3)
    w = case.buffers["w"]
    bb = w.shape[1] // (K // 256)
    for r in range(M):
        for b in range(K // 256):
            for f in _F16_OFFSETS[dtype]:
                w[r, b * bb + f:b * bb + f + 2] = edge[rng.integers(len(edge)):][:1].view(np.uint8)
    want = mk.reference(spec0, case)["y"]
    rtol, atol = mk.TOLERANCE[dtype]
    for v in mk.VARIANTS:
        if not _isa(level).has(v.min_level):
            continue
        spec = _spec(dtype, v.family, level, v.tiles[0], M, K, 0)
        case.buffers["y"][...] = np.nan
        build(spec, _isa(level)).run_threads(case.args, 2)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 1000,
                                   err_msg=spec.label())


def test_variants_and_hook():
    """Three families (portable, AVX2, AVX-512 VNNI) with >= 2 tiles each, all K types with
    Q8A kernels; matmul_q8a carries them and its own check passes on them (its case generator
    uses RANDOM_WEIGHTS and its tolerance TOLERANCE)."""
    fams = {v.family: v for v in mk.VARIANTS}
    assert set(fams) == {"kgeneric", "kavx2", "kvnni"}
    assert fams["kgeneric"].min_level == "generic"
    for v in mk.VARIANTS:
        assert set(v.dtypes) == set(TYPES) and len(v.tiles) >= 2
    assert set(mk.RANDOM_WEIGHTS) == set(TYPES)
    assert set(mk.TOLERANCE) == set(TYPES) | set(mk.Q8K_ONLY_TYPES)
    from reame.codegen.registry import ops
    op = ops()["matmul_q8a"]
    assert all(v in op.variants for v in mk.VARIANTS)
    isa = detect()
    for dtype in TYPES:
        specs = op.specs(dtype, isa, M=11, K=512, acc=1)
        assert {s.family for s in specs} >= {f for f, v in fams.items() if v.usable(isa)}
        for s in specs:
            if s.family in fams:
                ok, worst = op.check(build(s, isa), np.random.default_rng(2), n=5, nth=2)
                assert ok, (s.label(), worst)
