"""The AArch64 kernel families (matmul_q8a dotprod / i8mm, matmul_q8k dotprod) on any host.

- Cross-built on every host for a recorded Neoverse-V1 forced to each family's level (object
  code and assembly only, never run off ARM): every type x tile renders, compiles, and its
  assembly holds the instruction the family exists for (`sdot`, `smmla`) and no call.
- Against the numpy reference at the family's own level (not only at the host's highest),
  where the machine has that level: natively on ARM, or under qemu-user (its default CPU has
  dotprod, i8mm and SVE: docs/kernels-arm.md).
- Refused before LLVM where the target lacks the level; and the starting kernel an ARM host
  picks (reame/jit/select.py) is the family of its highest level.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from reame.codegen import q8k
from reame.codegen.compiler import Compiler
from reame.codegen.isa import UnsupportedLevel, detect, host_isa
from reame.codegen.kernels import build, check_buildable
from reame.codegen.registry import get_op
from reame.codegen.spec import KernelSpec, render

# a recorded Neoverse-V1 (AWS Graviton3: tests/test_codegen_isa_arm.py), whatever the host
V1 = host_isa("aarch64", "neoverse-v1", "+neon,+fp-armv8",
              os_inputs={"hwcap": 0xDFFFFFFF, "hwcap2": 0x1F201})
N1 = host_isa("aarch64", "neoverse-n1", "+neon,+fp-armv8", os_inputs={"hwcap": 0x10119FFF})

# (op, family): the instruction its assembly must use
FAMILIES = {("matmul_q8a", "dotprod"): "sdot", ("matmul_q8a", "i8mm"): "smmla",
            ("matmul_q8k", "dotprod"): "sdot", ("matmul_q8k", "i8mm"): "smmla"}
ARM_LEVELS = ("dotprod", "i8mm")


def _variants():
    for (op_name, family), instr in FAMILIES.items():
        op = get_op(op_name)
        for v in op.variants:
            if v.family == family:
                yield op, v, instr


def _dims(op_name):
    # matmul_q8a: K/32 = 7 (a group of 4 blocks and a partial group of 3), 33, 1; matmul_q8k:
    # 1 and 3 superblocks
    return (((37, 224, 0), (13, 1056, 1), (2, 32, 1)) if op_name == "matmul_q8a"
            else ((37, 256, 0), (11, 768, 1)))


def _cross_params():
    out = []
    for op, v, instr in _variants():
        for dtype in v.dtypes:
            for tile in v.tiles:
                tid = ",".join(f"{k}{x}" for k, x in tile.items())
                out.append(pytest.param(op.name, v, dtype, tile, instr,
                                        id=f"{op.name}-{v.family}-{dtype}-{tid}"))
    return out


@functools.lru_cache(maxsize=None)
def _cross_compiler(level):
    return Compiler(V1.at(level), cache_dir=None)


@pytest.mark.parametrize("op_name,variant,dtype,tile,instr", _cross_params())
def test_cross_build_uses_the_family_instruction(op_name, variant, dtype, tile, instr):
    """Every type x tile of an ARM family builds for a forced-level Neoverse-V1 from any host, and
    its code uses the family's instruction, no per-block `addv` and calls nothing. Catches the
    family's code being the generic family's again (checked by rendering the generic template
    as the family: LLVM matches its sext/mul/reduce to `sdot` at this level too, but sums every
    block with an `addv`; an i8mm family without `smmla`: matmul_q8k's dotprod template
    rendered as its i8mm tiles), a family registered at a level whose
    features lack its instruction (LLVM aborts the process: 'Cannot select'), and a conversion
    lowered to a libcall (`bl __extendhfsf2`), which the JIT cannot resolve."""
    isa = V1.at(variant.min_level)
    if variant.family == "i8mm" and tile["nt"] == 1:
        instr = "sdot"                  # decode: the dotprod code (no token pair for smmla)
    for M, K, acc in _dims(op_name):
        spec = KernelSpec.make(op_name, dtype, variant.family, isa.level, **tile, M=M, K=K,
                               acc=acc)
        check_buildable(spec, isa)
        _, ir = render(spec, isa)
        comp = _cross_compiler(isa.level)
        asm = comp.assembly(ir)
        assert re.search(rf"^\s+{instr}\s", asm, re.M), f"{spec.label()}: no {instr}"
        # one addv per block and token is what LLVM makes of the generic IR (sext/mul/reduce)
        assert not re.search(r"^\s+addv\s", asm, re.M), f"{spec.label()}: addv per block"
        assert not re.search(r"^\s+(bl|blr)\s", asm, re.M), f"{spec.label()}: calls"
        if instr == "smmla":            # the tiles' dots come out in their lanes: no addp tree
            assert not re.search(r"^\s+(addp|sdot)\s", asm, re.M), f"{spec.label()}: addp/sdot"
        assert comp.object_code(ir)[:4] == b"\x7fELF"


def test_cross_compiler_never_loads():
    """A cross compiler (aarch64 code on a host of another architecture) refuses to load what it
    built instead of jumping into foreign code. Catches compile() on an x86 host running ARM
    instructions (SIGILL, the whole test run lost)."""
    comp = _cross_compiler("dotprod")
    if not comp.cross:
        pytest.skip("this host is aarch64: nothing is cross-built")
    spec = get_op("matmul_q8a").specs("Q8_0", V1.at("dotprod"), M=4, K=64, acc=0)[0]
    with pytest.raises(RuntimeError, match="cannot load"):
        comp.compile(render(spec, V1.at("dotprod"))[1], ["x"])


def _host_params():
    out = []
    host = detect()
    for op, v, _ in _variants():
        level = v.min_level
        for dtype in v.dtypes:
            for M, K, acc in _dims(op.name):
                for tile in v.tiles:
                    tid = ",".join(f"{k}{x}" for k, x in tile.items())
                    marks = () if level in host.levels else pytest.mark.skip(
                        reason=f"this {host.arch} CPU has no {level} level (run under "
                               "qemu-aarch64: docs/kernels-arm.md)")
                    out.append(pytest.param(op.name, v.family, dtype, level, tile, (M, K, acc),
                                            marks=marks,
                                            id=f"{op.name}-{v.family}-{dtype}-M{M}K{K}a{acc}-{tid}"))
    return out


@functools.lru_cache(maxsize=None)
def _case(op_name, dtype, M, K, acc, n):
    op = get_op(op_name)
    spec = op.specs(dtype, detect().at("generic"), M=M, K=K, acc=acc)[0]
    case = op.make_case(spec, np.random.default_rng([M, K, acc, n, len(dtype)]), n)
    return case, op.reference(spec, case)["y"]


@pytest.mark.parametrize("op_name,family,dtype,level,tile,dims", _host_params())
def test_matches_reference_at_the_family_level(op_name, family, dtype, level, tile, dims):
    """The family at its own level (generic CPU + exactly that level's features) against the
    float64 reference: ragged M (odd row counts: the i8mm row pairs' duplicated last row), K with
    a partial group of blocks, token counts that leave partial tiles (the i8mm token pairs'
    duplicated last token), acc 0/1, 1 and 3 threads. Catches a wrong zero-point correction
    (Q4_0/Q5_0: S - c s), a lane order mistake in the addp tree or the smmla operands (block
    sums or row/token lanes swapped), a scale lane of the partial group left undefined, a
    duplicated row or token stored twice with acc=1; matmul_q8k: a 16-group scale applied to
    the wrong group's sum (Q6_K), a block's mins against another block's activation sums (Q4_K);
    matmul_q8k's i8mm tiles: smmla operands swapped (rows and tokens transposed), a per-16
    group's scale applied to the other half of the block (Q6_K/Q3_K/Q2_K), the rows' scale
    pattern or the token pair's sub-scales or D in the wrong lane order, the mins' faddp tree
    crossing rows and tokens, Q4_K/Q5_K mins against unpaired per-16 sums, the second 8 quants
    of a half zipped like the first, each lane's y loaded, added and stored in turn with acc=1.
    (Each of these, made on purpose, failed it under qemu-aarch64.)"""
    M, K, acc = dims
    isa = detect().at(level)
    op = get_op(op_name)
    spec = KernelSpec.make(op_name, dtype, family, level, **tile, M=M, K=K, acc=acc)
    k = build(spec, isa)
    rtol, atol = op.tolerance(dtype)
    for n in (1, 2, 5, 10):
        case, want = _case(op_name, dtype, M, K, acc, n)
        y = case.buffers["y"]
        for nth in (1, 3):
            y[...] = case.meta["y0"]
            k.run_threads(case.args, nth)
            np.testing.assert_allclose(y, want, rtol=rtol, atol=atol,
                                       err_msg=f"{spec.label()} n={n} nth={nth}")


@pytest.mark.parametrize("op_name,family", list(FAMILIES))
def test_refused_where_the_level_is_missing(op_name, family):
    """Building an ARM family for a target without its level raises UnsupportedLevel before LLVM
    sees it: on an N1 (dotprod, no i8mm) forced to neon, on an N1 for i8mm, and on x86. Catches a
    min_level that lets `smmla` reach a CPU without i8mm (SIGILL at run time, or LLVM aborting
    the process at build time)."""
    v = next(v for v in get_op(op_name).variants if v.family == family)
    dtype = v.dtypes[0]
    for isa in (N1.at("neon"), N1, host_isa("x86_64", "x86-64-v3", "+avx2,+fma,+f16c")):
        if isa.has(v.min_level):
            continue
        spec = KernelSpec.make(op_name, dtype, family, isa.level, **v.tiles[0], M=4, K=256,
                               acc=0)
        with pytest.raises(UnsupportedLevel, match=family):
            build(spec, isa)


def test_arm_hosts_start_with_their_families():
    """select.choose / matmul_site on recorded ARM machines: the most specific family of the
    level (N1: dotprod; V1: i8mm for Q8A types and for the K-quants on Q8K, with its smmla tiles
    for multi-token steps and the dotprod code, nt = 1, for decode), never the generic one.
    Catches a family missing from the variant list or registered under a level the ladder does
    not rank above generic (the auto-vectorised generic code would be chosen), and decode
    handed a 2 x 2 tile (half of it a duplicated token)."""
    from reame.jit.select import choose, matmul_site
    for isa, fam in ((N1, "dotprod"), (V1.at("dotprod"), "dotprod"), (V1, "i8mm")):
        for dtype in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"):
            for n in (1, 2, 8):
                spec = choose("matmul_q8a", dtype, isa, n, M=4096, K=4096, acc=0)
                assert spec.family == fam, (isa.level, dtype, n, spec.label())
                site = matmul_site(dtype, 4096, 4096, n, isa)
                assert (site.op, site.act, site.spec.family) == ("matmul_q8a", "q8a", fam)
    k_types = next(v for v in get_op("matmul_q8k").variants if v.family == "dotprod").dtypes
    assert set(k_types) == set(next(v for v in get_op("matmul_q8k").variants
                                    if v.family == "i8mm").dtypes)
    for isa, fam in ((N1, "dotprod"), (V1.at("dotprod"), "dotprod"), (V1, "i8mm")):
        for dtype in k_types:
            for n, nt in ((1, 1), (2, 2), (4, 4)):
                site = matmul_site(dtype, 4096, 4096, n, isa)
                assert (site.op, site.act, site.spec.family, site.spec.p["nt"]) == \
                    ("matmul_q8k", "q8k", fam, nt), (isa.level, dtype, site)


def _range_end_weights(dtype, w):
    """Every superblock of `w` (uint8 [M, row bytes], d and dmin kept) with each quant and
    sub-block scale at the end of its range where their product is largest: Q4_K/Q5_K q = 15/31
    with sc = m = 63; Q6_K q - 32 = -32 with sc = -128; Q3_K q - 4 = -4 with sc = -32; Q2_K
    q = 3 with sc = m = 15; IQ4_XS level -127 with sc = -32."""
    M = w.shape[0]
    b = w.reshape(M, -1, {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "Q3_K": 110, "Q2_K": 84,
                          "IQ4_XS": 136}[dtype])
    if dtype in ("Q4_K", "Q5_K"):
        b[:, :, 4:] = 0xFF
    elif dtype == "Q6_K":
        b[:, :, 0:192] = 0
        b[:, :, 192:208] = 0x80
    elif dtype == "Q3_K":
        b[:, :, 0:108] = 0
    elif dtype == "Q2_K":
        b[:, :, 0:80] = 0xFF
    else:
        b[:, :, 2:] = 0
    return w


def _k_families():
    out = []
    host = detect()
    for family in ("dotprod", "i8mm"):
        v = next(v for v in get_op("matmul_q8k").variants if v.family == family)
        for dtype in v.dtypes:
            marks = () if v.min_level in host.levels else pytest.mark.skip(
                reason=f"this {host.arch} CPU has no {v.min_level} level")
            out.append(pytest.param(family, dtype, marks=marks, id=f"{family}-{dtype}"))
    return out


@pytest.mark.parametrize("family,dtype", _k_families())
def test_q8k_int32_sums_at_the_ends_of_their_range(family, dtype):
    """matmul_q8k's ARM families add scaled block (or 16-group) dots in int32 before converting
    (dotprod: 1-2 per lane; i8mm: a span of blocks, Q4_K 4, Q5_K 2, Q6_K and IQ4_XS 1, Q3_K and
    Q2_K 8): with every weight quant and sub-block scale at the end of its range and constant
    activations (every Q8K quant 127, every sub-scale 127) those sums reach 98% of 2^31 for
    Q6_K and IQ4_XS, 91% for Q4_K, 94% for Q5_K. Catches a span one longer than int32
    allows (the sum wraps: a sign flip far outside the tolerance), e.g. Q4_K summed over its 8
    blocks, or an i16 scale product that saturates or wraps."""
    M, K = 7, 512
    op = get_op("matmul_q8k")
    rng = np.random.default_rng(5)
    spec0 = op.specs(dtype, detect().at("generic"), M=M, K=K, acc=0)[0]
    case = op.make_case(spec0, rng, 5)
    _range_end_weights(dtype, case.buffers["w"])
    case.buffers["xq"][...] = q8k.quantize_rows(np.ones((5, K), np.float32))
    want = op.reference(spec0, case)["y"]
    v = next(v for v in op.variants if v.family == family)
    rtol, atol = op.tolerance(dtype)
    for tile in v.tiles:
        spec = KernelSpec.make("matmul_q8k", dtype, family, v.min_level, **tile, M=M, K=K, acc=0)
        case.buffers["y"][...] = np.nan
        build(spec, detect().at(v.min_level)).run_threads(case.args, 2)
        np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                                   err_msg=spec.label())
