"""ISA facts (codegen/isa.py): levels derived from LLVM feature strings (x86-64 and AArch64, with
features missing in the middle of the ladder), forcing a lower level (REAME_ISA, detect(level),
ISA.at), refusing a higher or unknown one, forced levels compiled for generic CPUs (so their
assembly cannot hold wider registers than the level allows), and default_threads()."""

from __future__ import annotations

import os
import re

import pytest

from reame.codegen import isa as isa_mod
from reame.codegen.compiler import Compiler
from reame.codegen.isa import ARM_LEVELS, X86_LEVELS, UnsupportedLevel, detect, supported_levels
from reame.codegen.kernels import build, check_buildable
from reame.codegen.registry import get_op
from reame.codegen.runtime import default_threads
from reame.codegen.spec import KernelSpec, render
from reame.errors import ReameError

AVX2 = "+avx,+avx2,+fma,+f16c,+sse4.2"
AVX512 = AVX2 + ",+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512cd"
HOST = detect()
X86 = HOST.arch == "x86_64"


# ---- levels from feature strings ----

@pytest.mark.parametrize("features,want", [
    ("", ("generic",)),
    ("+sse2,+sse4.2,+popcnt", ("generic",)),
    (AVX2, ("generic", "avx2")),
    # fma missing: avx2 is not reached, and nothing above it counts (levels are cumulative)
    ("+avx,+avx2,+f16c," + AVX512.split(",", 5)[5] + ",+avx512vnni",
     ("generic",)),
    # a feature switched off is not a feature
    (AVX2.replace("+fma", "-fma"), ("generic",)),
    (AVX512, ("generic", "avx2", "avx512")),
    # one of the four AVX-512 subsets missing: stays at avx2 even with VNNI/BF16 present
    (AVX512.replace("+avx512dq", "-avx512dq") + ",+avx512vnni,+avx512bf16", ("generic", "avx2")),
    (AVX512 + ",+avx512vnni", ("generic", "avx2", "avx512", "avx512_vnni")),
    # bf16 without vnni: the ladder stops at avx512
    (AVX512 + ",+avx512bf16", ("generic", "avx2", "avx512")),
    (AVX512 + ",+avx512vnni,+avx512bf16", ("generic", "avx2", "avx512", "avx512_vnni",
                                           "avx512_bf16")),
    (AVX512 + ",+avx512vnni,+avx512bf16,+amx-tile,+amx-int8",                   # no amx-bf16
     ("generic", "avx2", "avx512", "avx512_vnni", "avx512_bf16")),
    (AVX512 + ",+avx512vnni,+avx512bf16,+amx-tile,+amx-int8,+amx-bf16,+avxvnni", X86_LEVELS),
    # AVX-VNNI is a level where present and skipped where not (Alder Lake: without AVX-512;
    # Ice Lake: AVX-512 without it), never the end of the ladder
    (AVX2 + ",+avxvnni", ("generic", "avx2", "avx_vnni")),
    (AVX512 + ",+avx512vnni,+avxvnni", ("generic", "avx2", "avx_vnni", "avx512", "avx512_vnni")),
    (AVX2.replace("+fma", "-fma") + ",+avxvnni", ("generic",)),
])
def test_x86_levels_from_features(features, want):
    assert supported_levels("x86_64", features) == want


@pytest.mark.parametrize("features,want", [
    ("", ("generic", "neon")),                          # Advanced SIMD is architectural
    ("+neon,+fp-armv8", ("generic", "neon")),
    ("+neon,+dotprod", ("generic", "neon", "dotprod")),
    ("+neon,+i8mm,+sve", ("generic", "neon")),           # dotprod missing in the middle
    ("+neon,+dotprod,+sve", ("generic", "neon", "dotprod")),   # i8mm missing
    ("+neon,+dotprod,+i8mm", ("generic", "neon", "dotprod", "i8mm")),
    ("+neon,+dotprod,+i8mm,+sve,+sve2", ARM_LEVELS),
    ("+neon,+dotprod,-i8mm,+sve", ("generic", "neon", "dotprod")),
])
def test_aarch64_levels_from_features(features, want):
    assert supported_levels("aarch64", features) == want


def test_other_architectures_are_generic_only():
    assert supported_levels("riscv64", "+v,+zvfh") == ("generic",)
    assert isa_mod.normalize_arch("AMD64") == "x86_64"
    assert isa_mod.normalize_arch("arm64") == "aarch64"


# ---- forcing levels ----

def test_host_levels_are_consistent():
    assert HOST.levels == supported_levels(HOST.arch, HOST.host_features)
    if HOST.arch != "aarch64":             # the OS adds features on AArch64 only
        assert HOST.host_features == isa_mod._host()[1]
    assert HOST.level in HOST.levels
    assert HOST.has("generic") and HOST.has(HOST.level)
    assert HOST.f32_lanes * 32 == HOST.vector_bits


@pytest.mark.parametrize("level", HOST.levels)
def test_forced_levels(level):
    forced = detect(level)
    assert forced == HOST.at(level)
    assert forced.level == level and forced.levels == HOST.levels
    assert forced.host_cpu == HOST.host_cpu
    higher = HOST.levels[HOST.levels.index(level) + 1:]
    assert all(not forced.has(h) for h in higher)
    assert all(forced.has(lo) for lo in HOST.levels[:HOST.levels.index(level) + 1])
    if level == HOST.levels[-1]:
        assert (forced.cpu_name, forced.features) == (HOST.host_cpu, HOST.host_features)
    elif X86:          # a forced level targets a generic CPU of that level, not the host
        want = {"generic": "x86-64", "avx2": "x86-64-v3", "avx_vnni": "x86-64-v3"}.get(
            level, "x86-64-v4")
        assert forced.cpu_name == want
        assert forced.cpu_name != HOST.host_cpu
        # an optional level below a forced one is compiled in (its code may run there)
        below = HOST.levels[:HOST.levels.index(level)]
        assert ("+avxvnni" in forced.features.split(",")) == ("avx_vnni" in below
                                                              or level == "avx_vnni")


@pytest.fixture
def fresh_detect(monkeypatch):
    """detect() reads $REAME_ISA once (lru_cache): clear the cache around the test."""
    detect.cache_clear()
    yield monkeypatch
    monkeypatch.delenv("REAME_ISA", raising=False)
    detect.cache_clear()


def test_reame_isa_forces_a_lower_level(fresh_detect):
    fresh_detect.setenv("REAME_ISA", "generic")
    isa = detect()
    assert isa.level == "generic" and isa.levels == HOST.levels
    # the registry then offers only what the forced level may run
    specs = get_op("rms_norm").specs("F32", isa, K=64, eps=1e-6)
    assert specs and {s.level for s in specs} == {"generic"}
    assert {s.family for s in specs} == {"generic"}
    # an explicit level still wins over the variable
    assert detect(HOST.level).level == HOST.level


def test_refuses_a_level_above_the_cpu(fresh_detect):
    above = [lv for lv in (X86_LEVELS if X86 else ARM_LEVELS) if lv not in HOST.levels]
    if not above:
        pytest.skip("this CPU has every level of its architecture")
    msg = f"ISA level '{above[0]}' is not available on this CPU"
    with pytest.raises(ValueError, match=msg):
        detect(above[0])
    with pytest.raises(ValueError, match=msg):
        HOST.at(above[0])
    fresh_detect.setenv("REAME_ISA", above[0])
    with pytest.raises(ValueError, match=r"available: generic"):
        detect()


def test_refuses_a_level_above_a_synthetic_cpu():
    # independent of the host: an AVX2 machine asked for AVX-512
    levels = supported_levels("x86_64", AVX2)
    with pytest.raises(ValueError, match=r"'avx512' is not available on this CPU "
                                         r"\(available: generic, avx2\)"):
        isa_mod._make("x86_64", levels, "avx512", "haswell", AVX2)
    isa = isa_mod._make("x86_64", levels, "avx2", "haswell", AVX2)
    assert (isa.cpu_name, isa.features) == ("haswell", AVX2)           # native: exact host
    isa = isa_mod._make("x86_64", levels, "generic", "haswell", AVX2)
    assert (isa.cpu_name, isa.features) == ("x86-64", "")


def test_unknown_level_is_named_as_unknown():
    with pytest.raises(ValueError, match=r"unknown ISA level 'avx9000'"):
        detect("avx9000")
    with pytest.raises(ValueError, match=r"unknown ISA level 'AVX2'"):
        HOST.at("AVX2")


# ---- forced levels compile for their level only ----

def _asm(level, op_name, dtype, family, **dims):
    isa = detect(level)
    op = get_op(op_name)
    specs = [s for s in op.specs(dtype, isa, **{**op.example_dims, **dims}) if s.family == family]
    assert specs, f"no {op_name}/{family} at {level}"
    symbol, ir = render(specs[-1], isa)
    asm = Compiler(isa, cache_dir=None).assembly(ir)
    assert re.search(rf"^{symbol}:", asm, re.M), "the kernel symbol is not defined"
    return asm


@pytest.mark.skipif(not X86 or "avx2" not in HOST.levels, reason="x86-64 with AVX2")
def test_avx2_level_assembly_has_no_zmm():
    for op_name, dtype, family, dims in (("rms_norm", "F32", "simd", {"K": 200}),
                                         ("matmul", "Q8_0", "avx2", {"M": 64, "K": 64}),
                                         ("matmul_q8a", "Q4_K", "kavx2", {"M": 64, "K": 256})):
        asm = _asm("avx2", op_name, dtype, family, **dims)
        assert "ymm" in asm, f"{op_name}/{family}: expected AVX2 code"
        assert "zmm" not in asm, f"{op_name}/{family} at avx2 uses AVX-512 registers"


@pytest.mark.skipif(not X86 or "avx_vnni" not in HOST.levels, reason="x86-64 with AVX-VNNI")
def test_avx_vnni_level_panels_use_vex_vpdpbusd():
    """The row panels at avx_vnni take vpdpbusd on ymm (VEX), at avx2 vpmaddubsw: catches an
    avx_vnni level whose kernels never reach the instruction (their results are the same)."""
    vnni = _asm("avx_vnni", "matmul_q8k_rp", "Q4_K", "panel", M=64, K=512)
    assert re.search(r"\{vex\}\s+vpdpbusd\s+%ymm", vnni) and "zmm" not in vnni
    plain = _asm("avx2", "matmul_q8k_rp", "Q4_K", "panel", M=64, K=512)
    assert "vpdpbusd" not in plain and "vpmaddubsw" in plain and "zmm" not in plain


@pytest.mark.skipif(not X86, reason="x86-64")
def test_generic_level_assembly_has_no_ymm_or_zmm():
    # the generic family sized for 16 lanes must still lower to SSE registers at x86-64
    for op_name, dtype, family, dims in (("rms_norm", "F32", "generic", {"K": 200}),
                                         ("matmul", "Q8_0", "generic", {"M": 64, "K": 64}),
                                         ("matmul_q8a", "Q4_K", "kgeneric", {"M": 64, "K": 256})):
        asm = _asm("generic", op_name, dtype, family, **dims)
        assert "xmm" in asm
        assert not re.search(r"[yz]mm", asm), f"{op_name}/{family} at generic uses AVX registers"


@pytest.mark.skipif(not X86 or "avx512" not in HOST.levels, reason="x86-64 with AVX-512")
def test_avx512_level_assembly_uses_zmm():
    # the positive control: the same check would see zmm registers where they are allowed
    assert "zmm" in _asm("avx512", "matmul", "Q8_0", "avx512", M=64, K=64)


# ---- refusing what the target lacks, before LLVM sees it ----

class _NoCompiler:
    """Stands for LLVM: a refused spec must never get here (LLVM aborts the whole process on an
    instruction the target lacks, e.g. "Do not know how to split the result of this operator")."""

    def compile(self, ir, symbols):
        raise AssertionError(f"{symbols} reached LLVM")


AVX2_CPU = isa_mod._make("x86_64", supported_levels("x86_64", AVX2), "avx2", "haswell", AVX2)
N1_CPU = isa_mod.host_isa("aarch64", "neoverse-n1", "+neon",      # asimd, asimddp: no i8mm, sve
                          os_inputs={"hwcap": 0x10119FFF, "hwcap2": 0})


@pytest.mark.parametrize("cpu,op,family,level,why", [
    (N1_CPU, "matmul", "avx2", "neon", "family 'avx2' needs level 'avx2', not available on this "
                                       "aarch64 CPU"),
    (N1_CPU, "rms_norm", "generic", "avx2", "level 'avx2' is not available on this aarch64 CPU"),
    (N1_CPU, "rms_norm", "generic", "i8mm", r"level 'i8mm' is not available .*dotprod\)"),
    (AVX2_CPU, "rms_norm", "generic", "neon", "level 'neon' is not available on this x86_64"),
    (AVX2_CPU, "matmul", "avx512", "avx512", "level 'avx512' is not available on this x86_64"),
    (AVX2_CPU, "matmul", "avx512", "avx2", "family 'avx512' needs level 'avx512'"),
], ids=["x86-family-on-arm", "x86-level-on-arm", "above-n1", "arm-level-on-x86",
        "above-avx2", "family-above-its-level"])
def test_build_refuses_what_the_target_lacks(cpu, op, family, level, why):
    """Recorded CPUs on any host: another architecture's level or family, a level above the
    CPU, a family above the spec's level: a ReameError naming the spec, before compiling.
    Catches checking the level alone (an AVX2 family at level neon passes that), the family
    alone, or leaving it to LLVM."""
    spec = KernelSpec.make(op, "F32", family, level, K=64)
    with pytest.raises(UnsupportedLevel, match=why) as err:
        build(spec, cpu, compiler=_NoCompiler())
    assert isinstance(err.value, ReameError) and spec.label() in str(err.value)


def test_build_refuses_the_other_architecture_on_this_host():
    """On this machine, with the default target: a level of the other architecture."""
    other = "neon" if X86 else "avx2"
    with pytest.raises(UnsupportedLevel, match=f"level '{other}' is not available"):
        build(KernelSpec.make("rms_norm", "F32", "generic", other, K=64),
              compiler=_NoCompiler())


@pytest.mark.parametrize("family,level", [("generic", "generic"), ("generic", "neon"),
                                          ("generic", "dotprod")])
def test_what_the_target_has_is_not_refused(family, level):
    """The control: generic families at N1's levels pass the check (no refusal of everything)."""
    check_buildable(KernelSpec.make("rms_norm", "F32", family, level, K=64), N1_CPU)


# ---- threads ----

def test_default_threads_is_sane():
    n = default_threads()
    assert isinstance(n, int) and n >= 1
    assert n <= len(os.sched_getaffinity(0)) <= (os.cpu_count() or 1)
