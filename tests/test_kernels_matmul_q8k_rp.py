"""matmul_q8k_rp (K-quant weights in the row-panel layout x Q8K activations) and the layout
itself (codegen/panel_layout.py): the repack against its definition, every variant x tile at
the levels where it runs against dequant(W) @ dequant(xq)^T in float64 (several panels per
thread, more slices than panels, partial token tiles, acc 0/1, 1/2/3 threads), and bit-for-bit
agreement of the panel family with matmul_q8k's panels on the GGUF rows."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen import panel_layout
from reame.codegen.kernels import build
from reame.codegen.ops.matmul_q8a_kquants import random_weights
from reame.codegen.ops.matmul_q8k import TUNED
from reame.codegen.ops.matmul_q8k_rp import HALVES_TYPES, RP_TYPES
from reame.codegen.registry import get_op
from reame.codegen.spec import KernelSpec
from conftest import check_against_reference, check_reads_inside_weights
from conftest import isa_at as _isa
from conftest import type_variant_params

OP = get_op("matmul_q8k_rp")
TYPES = RP_TYPES                 # Q4_K, Q5_K, Q6_K; IQ4_XS (no zmm panels: ymm levels only)
DIMS = ((32, 768, 0), (16, 256, 1), (80, 1280, 1))   # panels: 2, 1, 5; superblocks: 3, 1, 5


@pytest.mark.parametrize("dtype", TYPES)
def test_repack_matches_the_definition(dtype):
    """Record (p, s), segment (off, n), vector k, lane r = bytes [off + 4k, off + 4k + 4) of row
    16p + r's superblock s."""
    M, nsb = 48, 3
    bb = panel_layout.BLOCK_BYTES[dtype]
    raw = random_weights(dtype, np.random.default_rng(0), M, 256 * nsb).reshape(M, nsb * bb)
    out = panel_layout.repack(raw, dtype)
    recb = panel_layout.record_bytes(dtype)
    assert out.nbytes == M // 16 * nsb * recb
    offs = panel_layout.record_offsets(dtype)
    for p in range(M // 16):
        for s in range(nsb):
            rec = out[(p * nsb + s) * recb:(p * nsb + s + 1) * recb]
            for off, n in panel_layout.SEGMENTS[dtype]:
                for k in range(n):
                    for r in range(16):
                        got = rec[offs[off] + 64 * k + 4 * r:][:4]
                        want = raw[16 * p + r, s * bb + off + 4 * k:][:4]
                        assert got.tobytes() == want.tobytes(), (p, s, off, k, r)
    # every byte of every superblock is in its record (Q6_K: bytes 206-207 twice)
    assert sorted({o + i for o, n in panel_layout.SEGMENTS[dtype] for i in range(4 * n)}) \
        == list(range(bb))
    with pytest.raises(ValueError, match="multiple of 16"):
        panel_layout.repack(raw[:40], dtype)


def _params():
    return type_variant_params(OP, TYPES)


@pytest.mark.parametrize("dtype,family,level,tile", _params())
def test_matches_reference(dtype, family, level, tile):
    check_against_reference(OP, dtype, family, level, tile, DIMS)


@pytest.mark.parametrize("dtype", TUNED)
@pytest.mark.parametrize("nt", [1, 4, 8])
def test_panel_equals_matmul_q8k_panel_bit_for_bit(dtype, nt):
    """The same panel kernel reading records instead of transposing rows: identical floats."""
    isa = _isa("native")
    if not isa.has("avx512_vnni"):
        pytest.skip("no AVX-512 VNNI here")
    M, K, n = 64, 1280, 11
    tile = {"nt": nt, "pf_loc": 3}
    rp = KernelSpec.make(OP.name, dtype, "panel", isa.level, M=M, K=K, acc=0, pf_bytes=8192, **tile)
    base = KernelSpec.make("matmul_q8k", dtype, "panel", isa.level, M=M, K=K, acc=0, **tile)
    case = OP.make_case(rp, np.random.default_rng(5), n)
    q8k_op = get_op("matmul_q8k")
    bufs = {**case.buffers, "w": case.meta["w_gguf"], "y": case.buffers["y"].copy()}
    build(base, isa).run_threads(q8k_op.pack(bufs, n=n), 2)
    build(rp, isa).run_threads(case.args, 2)
    assert np.array_equal(case.buffers["y"], bufs["y"])


@pytest.mark.parametrize("dtype", TYPES)
def test_256_bit_panels_equal_the_512_bit_ones_bit_for_bit(dtype):
    """The panel family below avx512_vnni computes each 16-row lane vector as two ymm halves
    (vpmaddubsw, pairs summed in i16, vpmaddwd): the same integer sums and the same float steps
    as vpdpbusd on zmm, so the same floats; so do the prompt chunks' two passes of 8 rows
    (lanes = 8). Catches the halves swapped (rows 0-7 and 8-15 exchanged), Q6_K's second
    16-group chain started from the first one's offset, a dword left out of a group, or the
    second 8-row pass reading (or storing to) the first one's rows. IQ4_XS: |level| x the signed
    activation on ymm and level + 128 from -128 x the block's sum on zmm are the same integers
    (catches the zmm correction taken from another block or token)."""
    isa = _isa("native")
    if not isa.has("avx512_vnni"):
        pytest.skip("no AVX-512 VNNI here")
    M, K, n = 48, 1280, 11
    tiles = [{"nt": nt} for nt in (1, 4, 8)]
    tiles += [{"nt": 8, "lanes": 8}] if dtype in HALVES_TYPES else []
    for level in ("avx2", "avx_vnni"):       # AVX-VNNI: vpdpbusd on each ymm half
        if level not in isa.levels:
            continue
        low = _isa(level)
        for tile in tiles:
            nt = tile["nt"]
            zmm = KernelSpec.make(OP.name, dtype, "panel", isa.level, M=M, K=K, acc=1, nt=nt)
            ymm = KernelSpec.make(OP.name, dtype, "panel", low.level, M=M, K=K, acc=1, **tile)
            case = OP.make_case(zmm, np.random.default_rng([5, nt]), n)
            y0 = case.buffers["y"].copy()
            build(zmm, isa).run_threads(case.args, 2)
            want = case.buffers["y"].copy()
            case.buffers["y"][...] = y0
            build(ymm, low).run_threads(case.args, 2)
            assert np.array_equal(case.buffers["y"], want), (dtype, level, tile)


def _extreme_weights(dtype, rng, M, K):
    """Every quant at the top of its range (Q4_K 15, Q5_K 31, Q6_K 63) or 0, scales and mins at
    theirs (6-bit 63; Q6_K's int8 -128 / 127); IQ4_XS: every index 15 or 0 (levels 113, -127),
    its 6-bit scales 63 or 0 (31, -32)."""
    w = random_weights(dtype, rng, M, K)
    bb = panel_layout.BLOCK_BYTES[dtype]
    b = w.reshape(M, K // 256, bb)
    top = np.where(rng.random(b.shape) < 0.7, 0xFF, 0x00).astype(np.uint8)
    if dtype == "Q6_K":                      # ql, qh; int8 scales -128 / 127
        b[:, :, :192] = top[:, :, :192]
        b[:, :, 192:208] = np.where(rng.random((*b.shape[:2], 16)) < 0.5, 0x80, 0x7F)
    elif dtype == "Q2_K":                    # 4-bit scales and mins 15; qs
        b[:, :, :16] = 0xFF
        b[:, :, 16:80] = top[:, :, 16:80]
    elif dtype == "Q3_K":                    # hmask and qs; 6-bit scales 63 or 0 (31, -32)
        b[:, :, :96] = top[:, :, :96]
        b[:, :, 96:108] = np.where(rng.random((*b.shape[:2], 12)) < 0.5, 0xFF, 0x00)
    elif dtype == "IQ4_XS":                  # scales_h, scales_l; the indices
        b[:, :, 2:8] = np.where(rng.random((*b.shape[:2], 6)) < 0.5, 0xFF, 0x00)
        b[:, :, 8:] = top[:, :, 8:]
    else:                                    # 6-bit scales and mins 63; Q5_K's qh; quants
        b[:, :, 4:16] = 0xFF
        b[:, :, 16:] = top[:, :, 16:]
    return w


@pytest.mark.parametrize("dtype", TYPES)
def test_256_bit_panels_at_the_ends_of_the_int16_range(dtype):
    """The AVX2 panels add vpmaddubsw's byte pairs in int16 before widening: 8 dwords of Q4_K
    (8 x 2 x 15 x 127), 4 of Q5_K, 2 of Q6_K, 1 of IQ4_XS (2 x 127 x 127) stay below 2^15. With
    every quant at its top and whole tokens of activations at +127 or -127, against float64:
    catches a group of dwords one larger (Q5_K 8: 62992 wraps; Q6_K 4: 64008; IQ4_XS 2: 64516)
    or the unsigned and signed operands of vpmaddubsw exchanged."""
    from reame.codegen import q8k
    low = _isa("avx2")
    M, K, n = 32, 1024, 6
    rng = np.random.default_rng(11)
    x = np.where(rng.random((n, K)) < 0.5, 1.0, -1.0).astype(np.float32)
    x[0], x[1] = 1.0, -1.0                   # every product of a token at one end
    rtol, atol = OP.tolerance(dtype)
    tiles = [{"nt": nt} for nt in (1, 2, 4, 8)]
    tiles += [{"nt": 8, "lanes": 8}] if dtype in HALVES_TYPES else []
    for tile in tiles:
        spec = KernelSpec.make(OP.name, dtype, "panel", low.level, M=M, K=K, acc=0, **tile)
        case = OP.make_case(spec, rng, n)
        raw = _extreme_weights(dtype, rng, M, K)
        case.meta["w_gguf"][...] = raw
        case.buffers["w"][...] = panel_layout.repack(raw.reshape(M, -1), dtype)
        case.buffers["xq"][...] = q8k.quantize_rows(x)
        want = OP.reference(spec, case)["y"]
        case.buffers["y"][...] = np.nan
        build(spec, low).run_threads(case.args, 2)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 100,
                                   err_msg=spec.label())


def test_rows_must_fill_panels():
    spec = KernelSpec.make(OP.name, "Q4_K", "generic", "generic", M=24, K=256, acc=0, nt=1, u=1)
    with pytest.raises(ValueError, match="multiple of 16"):
        OP.make_case(spec, np.random.default_rng(0), 1)


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_records(dtype, at_end):
    """Records between PROT_NONE pages: no variant x tile loads a byte outside them (prefetches
    may run ahead: they do not fault)."""
    check_reads_inside_weights(OP, dtype, _isa("native"), ((16, 256), (48, 512)), at_end)


def test_prompt_programs_start_on_the_8_row_passes_and_steps_do_not(monkeypatch):
    """select.choose: programs of >= PROMPT_STEP tokens below avx512_vnni start on the 8-row
    passes (lanes = 8) for the HALVES_TYPES, steps and every other type or level on the 16-lane
    tiles. Catches the variant offered to steps (min_tokens dropped: steps read weights from
    DRAM, where the passes lose) or offered at the zmm levels (`below` dropped: a second name
    for the same zmm kernel among the adaptive runtime's candidates), and, with a made-up op
    whose tile order favours the general variant, a choose() that does not prefer at one level
    the variant declared for bigger programs."""
    from reame.codegen.ops.base import Op, Variant
    from reame.jit import select
    from reame.tensor_types import PROMPT_STEP
    dims = dict(M=256, K=256, acc=0)
    low = _isa("avx2")
    for dtype in TYPES:
        for n in (1, 4, 16, PROMPT_STEP, 512):
            tile = dict(select.choose(OP.name, dtype, low, n, **dims).params)
            want = 8 if dtype in HALVES_TYPES and n >= PROMPT_STEP else None
            assert tile.get("lanes") == want, (dtype, n, tile)
    native = _isa("native")
    if native.has("avx512_vnni"):
        for dtype in TYPES:
            tile = dict(select.choose(OP.name, dtype, native, 512, **dims).params)
            assert "lanes" not in tile, (dtype, tile)
            # nor among the candidates the adaptive runtime may measure (the same zmm kernel)
            assert not any("lanes" in dict(s.params) for s in OP.specs(dtype, native, **dims))
    fake = Op(name="fake", args=("w",), dims=("M",), make_case=None, reference=None,
              variants=(Variant("a", "avx2", ("F32",), ({"nt": 8},)),
                        Variant("b", "avx2", ("F32",), ({"nt": 8, "z": 1},),
                                min_tokens=PROMPT_STEP)))
    monkeypatch.setattr(select.registry, "get_op", lambda name: fake)
    assert select.choose("fake", "F32", low, 512, M=16).family == "b"
    assert select.choose("fake", "F32", low, 16, M=16).family == "a"
