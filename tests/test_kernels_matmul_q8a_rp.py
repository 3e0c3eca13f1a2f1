"""matmul_q8a_rp (Q8_0 / Q4_0 / Q4_1 weights in the row-panel layout x Q8A activations) and its
layout (codegen/panel_layout.py): the repack against its definition, every variant x tile at the
levels where it runs against dequant(W) @ dequant(xq)^T in float64 (several panels per thread,
more slices than panels, partial token tiles, acc 0/1), bit-for-bit agreement with matmul_q8a's
panels on the GGUF rows and between the 256- and 512-bit renderings, and Q8_0 at the ends of the
int16 range at the avx2 level."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen import panel_layout, q8a
from reame.codegen.kernels import build
from reame.codegen.ops.matmul_q8a import random_weights
from reame.codegen.ops.matmul_q8a_rp import HALVES_TYPES
from reame.codegen.registry import get_op
from reame.codegen.spec import KernelSpec
from conftest import check_against_reference, check_reads_inside_weights
from conftest import isa_at as _isa
from conftest import type_variant_params

OP = get_op("matmul_q8a_rp")
TYPES = ("Q8_0", "Q4_0", "Q4_1", "IQ4_NL")
DIMS = ((32, 224, 0), (16, 32, 1), (80, 1056, 1))   # panels: 2, 1, 5; blocks: 7, 1, 33


@pytest.mark.parametrize("dtype", TYPES)
def test_repack_matches_the_definition(dtype):
    """Record (p, b): each f16 field (off) as 16 halfwords, lane r = bytes [off, off + 2) of row
    16p + r's block b; then segment (off, n), vector k, lane r = bytes [off + 4k, off + 4k + 4)."""
    M, nb = 48, 3
    bb = panel_layout.BLOCK_BYTES[dtype]
    raw = random_weights(dtype, np.random.default_rng(0), M, 32 * nb).reshape(M, nb * bb)
    out = panel_layout.repack(raw, dtype)
    recb = panel_layout.record_bytes(dtype)
    assert recb == 16 * bb and out.nbytes == raw.nbytes        # the same bytes, moved
    offs = panel_layout.record_offsets(dtype)
    for p in range(M // 16):
        for b in range(nb):
            rec = out[(p * nb + b) * recb:(p * nb + b + 1) * recb]
            for r in range(16):
                row = raw[16 * p + r, b * bb:(b + 1) * bb]
                for off in panel_layout.F16_SEGMENTS.get(dtype, ()):
                    assert rec[offs[off] + 2 * r:][:2].tobytes() == row[off:off + 2].tobytes()
                for off, n in panel_layout.SEGMENTS[dtype]:
                    for k in range(n):
                        got = rec[offs[off] + 64 * k + 4 * r:][:4]
                        assert got.tobytes() == row[off + 4 * k:off + 4 * k + 4].tobytes()
    covered = {o + i for o in panel_layout.F16_SEGMENTS.get(dtype, ()) for i in range(2)}
    covered |= {o + i for o, n in panel_layout.SEGMENTS[dtype] for i in range(4 * n)}
    assert sorted(covered) == list(range(bb))                # every byte, once


@pytest.mark.parametrize("dtype,family,level,tile", type_variant_params(OP, TYPES))
def test_matches_reference(dtype, family, level, tile):
    check_against_reference(OP, dtype, family, level, tile, DIMS)


@pytest.mark.parametrize("dtype", TYPES)
def test_records_give_the_gguf_panels_bits(dtype):
    """The 256-bit rendering on records (avx2, avx_vnni) and the 512-bit one equal matmul_q8a's
    zmm panels on the GGUF rows bit for bit (IQ4_NL, which has no panels on GGUF rows: the zmm
    rendering on records): the same integer sums and float steps, read from the records instead
    of transposed and gathered. Catches a record segment read at the wrong offset (Q4_1's m
    taken as d), the ymm halves swapped, Q4_0's zero-point start dropped, IQ4_NL's level table
    looked up in the wrong 16-byte lane, the prompt chunks' second 8-row pass (lanes = 8)
    reading the first one's f16 d or quants."""
    isa = _isa("native")
    if not isa.has("avx512_vnni"):
        pytest.skip("no AVX-512 VNNI here")
    M, K, n = 48, 320, 19
    for nt in (1, 2, 4, 8, 12):
        zmm = KernelSpec.make(OP.name, dtype, "panel", isa.level, M=M, K=K, acc=1, nt=nt)
        case = OP.make_case(zmm, np.random.default_rng([8, nt]), n)
        y0 = case.buffers["y"].copy()
        bufs = {**case.buffers, "w": case.meta["w_gguf"], "y": y0.copy()}
        if dtype == "IQ4_NL":
            bufs["y"][...] = y0
            build(zmm, isa).run_threads(case.args, 2)
            bufs["y"] = case.buffers["y"].copy()
        else:
            gguf = KernelSpec.make("matmul_q8a", dtype, "panel", isa.level, M=M, K=K, acc=1,
                                   nt=nt)
            build(gguf, isa).run_threads(get_op("matmul_q8a").pack(bufs, n=n), 2)
        halves = [{"lanes": 8}] if nt == 8 and dtype in HALVES_TYPES else []
        for level, more in [("native", {})] + [(lv, {}) for lv in ("avx2", "avx_vnni")
                                               if nt <= 8] \
                + [(lv, h) for h in halves for lv in ("avx2", "avx_vnni")]:
            if level != "native" and level not in isa.levels:
                continue
            at = _isa(level)
            spec = KernelSpec.make(OP.name, dtype, "panel", at.level, M=M, K=K, acc=1, nt=nt,
                                   **more)
            case.buffers["y"][...] = y0
            build(spec, at).run_threads(case.args, 2)
            assert np.array_equal(case.buffers["y"], bufs["y"]), (dtype, level, nt, more)


def test_q8_0_at_the_ends_of_the_int16_range():
    """Q8_0 at the avx2 level feeds vpmaddubsw |q| (128 for q = -128) and the activation with
    q's sign, one dword per int16 pair (2 x 128 x 127 < 2^15): every quant -128 or 127, whole
    tokens of activations at +-127, against float64. Catches two dwords' pairs added in int16
    (65024 wraps) and q + 128 fed to vpmaddubsw (2 x 255 x 127 saturates)."""
    low = _isa("avx2")
    M, K, n = 32, 256, 5
    rng = np.random.default_rng(12)
    x = np.where(rng.random((n, K)) < 0.5, 1.0, -1.0).astype(np.float32)
    x[0], x[1] = 1.0, -1.0
    rtol, atol = OP.tolerance("Q8_0")
    for nt in (1, 2, 4, 8):
        spec = KernelSpec.make(OP.name, "Q8_0", "panel", low.level, M=M, K=K, acc=0, nt=nt)
        case = OP.make_case(spec, rng, n)
        raw = case.meta["w_gguf"].reshape(M, K // 32, 34)
        raw[:, :, 2:] = np.where(rng.random((M, K // 32, 32)) < 0.5, 0x80, 0x7F)
        raw[:, 1, 2:] = 0x80                              # a whole block at -128
        case.buffers["w"][...] = panel_layout.repack(raw.reshape(M, -1), "Q8_0")
        case.buffers["xq"][...] = q8a.quantize_rows(x)
        want = OP.reference(spec, case)["y"]
        case.buffers["y"][...] = np.nan
        build(spec, low).run_threads(case.args, 2)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol * 100,
                                   err_msg=spec.label())


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_records(dtype, at_end):
    """Records between PROT_NONE pages: no variant x tile x level loads a byte outside them."""
    for level in ("native", "avx2"):
        check_reads_inside_weights(OP, dtype, _isa(level), ((16, 32), (48, 96)), at_end)


def test_prompt_programs_start_on_the_8_row_passes_below_avx512_vnni_only():
    """Q4_0/Q4_1 prompt programs start on the 8-row passes (lanes = 8) at the 256-bit levels,
    steps and Q8_0/IQ4_NL never; at avx512_vnni and up (the zmm `panel` variant) not at all, and
    there the 256-bit variant's tiles are not offered beside the zmm ones. Catches the variant
    without min_tokens (offered to steps) or a variant without `below` (the zmm levels would
    start on, and offer the adaptive runtime, a second name for the same zmm kernel)."""
    from reame.jit.select import choose
    from reame.tensor_types import PROMPT_STEP
    dims = dict(M=256, K=256, acc=0)
    low = _isa("avx2")
    for dtype in TYPES:
        for n in (1, 8, 16, PROMPT_STEP, 512):
            tile = dict(choose(OP.name, dtype, low, n, **dims).params)
            want = 8 if dtype in HALVES_TYPES and n >= PROMPT_STEP else None
            assert tile.get("lanes") == want, (dtype, n, tile)
    native = _isa("native")
    if native.has("avx512_vnni"):
        for dtype in TYPES:
            assert "lanes" not in dict(choose(OP.name, dtype, native, 512, **dims).params)
            assert not any("lanes" in dict(s.params) for s in OP.specs(dtype, native, **dims))
            labels = [s.label() for s in OP.specs(dtype, native, **dims)]
            assert len(labels) == len(set(labels)), labels


def test_zmm_prompt_programs_start_on_nt_8_and_steps_of_9_to_12_tokens_on_nt_12():
    """At avx512_vnni and up, programs of 9-12 tokens start on the 12-token tile (one pass over
    the weights where nt = 8 takes two), prompt programs on nt = 8 (faster per token in prompt
    chunks: Variant.max_tokens). Catches the 12-token tile offered to prompt chunks (the
    fewest-passes rule then starts them on it) and a max_tokens that select.choose ignores or
    that also keeps it from the 12-token program."""
    from reame.codegen.isa import host_isa
    from reame.jit.select import choose
    from reame.tensor_types import PROMPT_STEP
    # a recorded Zen 4 (choose compiles nothing: any machine can plan for it)
    native = host_isa("x86_64", "znver4", "+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512vl,"
                      "+avx512dq,+avx512vnni,+avx512bf16")
    assert native.level == "avx512_bf16"
    dims = dict(M=256, K=256, acc=0)
    for dtype in TYPES:
        got = {n: dict(choose(OP.name, dtype, native, n, **dims).params)["nt"]
               for n in (1, 8, 9, 12, 13, 16, PROMPT_STEP, 512)}
        assert got == {1: 1, 8: 8, 9: 12, 12: 12, 13: 8, 16: 8, PROMPT_STEP: 8, 512: 8}, (dtype, got)
        # the 12-token tile stays a candidate of every class (the adaptive runtime may try it)
        assert {"nt": 12} in [dict((k, v) for k, v in s.params if k == "nt")
                              for s in OP.specs(dtype, native, **dims)]
