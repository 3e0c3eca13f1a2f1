"""CPU facts: the single source of what this machine can run.

LLVM (through llvmlite) tells the host CPU name and feature flags; py-cpuinfo adds the
human-readable model name and cache sizes. From the features we derive ISA *levels*, ordered from
the most portable to the most specific:

    x86_64:  generic < avx2 (AVX2+FMA+F16C) [< avx_vnni] < avx512 (F/BW/VL/DQ) < avx512_vnni
             < avx512_bf16 < amx
    aarch64: generic < neon < dotprod < i8mm < sve

Levels are cumulative (the ladder stops at the first one missing) except avx_vnni (AVX-VNNI:
vpdpbusd on ymm with a VEX encoding), which a CPU may have or not at any height: Alder Lake and
Sierra Forest have it without AVX-512, Ice Lake has AVX-512 without it, Sapphire Rapids and
Zen 5 have both. It is a level where the CPU has it and skipped where not, so `has("avx_vnni")`
is true at every level from it up on a CPU that has it.

On AArch64 the features come from the operating system as well (codegen/isa_arm.py: HWCAP,
/proc/cpuinfo, the SVE vector length), since LLVM's host string misses dotprod and i8mm there.

A level can be forced lower (never higher) with REAME_ISA=<level> or `--isa`, so every variant is
built and tested on one machine. A forced level compiles for a generic CPU of that level
(x86-64, x86-64-v3, x86-64-v4 + extensions; AArch64 generic + the level's features), so its code
cannot use instructions of a higher one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from dataclasses import dataclass

from reame.errors import ReameError


class UnsupportedLevel(ReameError, ValueError):
    """An ISA level (or a kernel built for one) that this CPU or its architecture lacks. Raised
    before LLVM sees the code: an instruction the target lacks aborts the process there."""


X86_LEVELS = ("generic", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx")
OPTIONAL_LEVELS = ("avx_vnni",)     # skipped where missing instead of ending the ladder
ARM_LEVELS = ("generic", "neon", "dotprod", "i8mm", "sve")

# features each level needs (LLVM spelling)
_NEEDS = {
    "avx2": ("avx2", "fma", "f16c"),
    "avx_vnni": ("avxvnni",),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "avx512_vnni": ("avx512vnni",),
    "avx512_bf16": ("avx512bf16",),
    "amx": ("amx-tile", "amx-int8", "amx-bf16"),
    "neon": ("neon",),
    "dotprod": ("dotprod",),
    "i8mm": ("i8mm",),
    "sve": ("sve",),
}

# how a forced (lower) level is compiled: generic CPU name and extra features
_FORCED_TARGET = {
    "generic": ("x86-64", ""),
    "avx2": ("x86-64-v3", ""),
    "avx_vnni": ("x86-64-v3", "+avxvnni"),
    "avx512": ("x86-64-v4", ""),
    "avx512_vnni": ("x86-64-v4", "+avx512vnni"),
    "avx512_bf16": ("x86-64-v4", "+avx512vnni,+avx512bf16"),
}
_FORCED_TARGET_ARM = {"generic": ("generic", ""), "neon": ("generic", "+neon"),
                      "dotprod": ("generic", "+neon,+dotprod"),
                      "i8mm": ("generic", "+neon,+dotprod,+i8mm"),
                      "sve": ("generic", "+neon,+dotprod,+i8mm,+sve")}

# LLVM target features the OS detection adds on AArch64 (shown by `reame codegen --list`)
_ARM_TARGET_FEATURES = ("neon", "dotprod", "i8mm", "bf16", "sve", "sve2")

# SIMD register width in bits at each level (what templates size their vectors by)
_VECTOR_BITS = {"generic": 128, "avx2": 256, "avx_vnni": 256, "avx512": 512, "avx512_vnni": 512,
                "avx512_bf16": 512, "amx": 512, "neon": 128, "dotprod": 128, "i8mm": 128,
                "sve": 128}


@dataclass(frozen=True)
class ISA:
    arch: str                       # "x86_64" | "aarch64" | other
    level: str                      # the level kernels are built for
    levels: tuple[str, ...]         # every level this machine supports, lowest first
    cpu_name: str                   # LLVM CPU name the code is compiled for
    features: str                   # LLVM feature string the code is compiled for
    host_cpu: str                   # LLVM's name of the host CPU
    host_features: str = ""         # LLVM feature string of the host (with the OS's, on ARM)
    os_features: tuple[str, ...] = ()   # AArch64: features the OS reports (kernel names)
    sve_bits: int = 0               # AArch64: SVE vector length in bits (0: none)

    @property
    def vector_bits(self) -> int:
        return _VECTOR_BITS.get(self.level, 128)

    @property
    def f32_lanes(self) -> int:
        """float32 lanes of one SIMD register at this level."""
        return self.vector_bits // 32

    def has(self, level: str) -> bool:
        """True when code of `level` may run at this (possibly forced) level."""
        return level in self.levels and self.levels.index(level) <= self.levels.index(self.level)

    def at(self, level: str) -> "ISA":
        """The same machine with kernels built for a lower `level`."""
        isa = _make(self.arch, self.levels, level, self.host_cpu,
                    self.host_features or _host()[1])
        return dataclasses.replace(isa, os_features=self.os_features, sve_bits=self.sve_bits)

    def describe(self) -> dict:
        """Human-readable facts: CPU model and caches (py-cpuinfo), levels, target."""
        model, caches = _cpuinfo()
        return {"model": model, **caches, "arch": self.arch, "host_cpu": self.host_cpu,
                "levels": list(self.levels), "level": self.level,
                "target_cpu": self.cpu_name, "vector_bits": self.vector_bits,
                **({"os_features": list(self.os_features), "sve_bits": self.sve_bits,
                    "target_features": [f for f in self.features.split(",")
                                        if f[1:] in _ARM_TARGET_FEATURES and f[0] == "+"]}
                   if self.arch == "aarch64" else {})}


@functools.lru_cache(maxsize=1)
def _host() -> tuple[str, str]:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, dict]:
    try:
        import cpuinfo
        info = cpuinfo.get_cpu_info()
    except Exception:           # py-cpuinfo can fail in odd sandboxes; these facts are cosmetic
        return platform.processor() or "unknown", {}
    caches = {k: info[k] for k in ("l1_data_cache_size", "l2_cache_size", "l3_cache_size")
              if info.get(k)}
    return info.get("brand_raw", "unknown"), caches


def _feature_set(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def supported_levels(arch: str, features: str) -> tuple[str, ...]:
    have = _feature_set(features)
    order = X86_LEVELS if arch == "x86_64" else ARM_LEVELS if arch == "aarch64" else ("generic",)
    levels = ["generic"]
    for level in order[1:]:
        if all(f in have for f in _NEEDS[level]):
            levels.append(level)
        elif level not in OPTIONAL_LEVELS:
            break                       # levels are cumulative
    if arch == "aarch64" and "neon" not in levels and "neon" in order:
        levels.append("neon")           # AArch64 always has Advanced SIMD
    return tuple(levels)


def _make(arch, levels, level, host_cpu, host_features) -> ISA:
    known = X86_LEVELS if arch == "x86_64" else ARM_LEVELS if arch == "aarch64" else ("generic",)
    if level not in known:
        raise UnsupportedLevel(f"unknown ISA level {level!r} "
                               f"(levels of {arch}: {', '.join(known)})")
    if level not in levels:
        raise UnsupportedLevel(f"ISA level {level!r} is not available on this CPU "
                               f"(available: {', '.join(levels)})")
    if level == levels[-1]:             # native: tune for the exact host
        cpu, feats = host_cpu, host_features
    else:
        table = _FORCED_TARGET if arch == "x86_64" else _FORCED_TARGET_ARM
        cpu, feats = table.get(level, ("generic", ""))
        below = levels[:levels.index(level)]
        for opt in OPTIONAL_LEVELS:     # an optional level under this one: its features too
            if opt in below and _FORCED_TARGET[opt][1] not in feats:
                feats = ",".join(f for f in (feats, _FORCED_TARGET[opt][1]) if f)
    return ISA(arch, level, levels, cpu, feats, host_cpu, host_features)


def normalize_arch(machine: str) -> str:
    m = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(m, m)


def host_isa(arch: str, host_cpu: str, llvm_features: str, level: str | None = None,
             os_inputs: dict | None = None) -> ISA:
    """The ISA of a machine from recorded facts (pure): its architecture, LLVM's host CPU name
    and feature string and, on AArch64, what the OS reports (`isa_arm.facts` keywords:
    cpuinfo, hwcap, hwcap2, sve_bits). At `level`, else its highest."""
    os_feats, sve_bits = (), 0
    if arch == "aarch64":
        from . import isa_arm
        f = isa_arm.facts(llvm_features, **(os_inputs or {}))
        llvm_features, os_feats, sve_bits = f.features, f.os_features, f.sve_bits
    levels = supported_levels(arch, llvm_features)
    isa = _make(arch, levels, level or levels[-1], host_cpu, llvm_features)
    return dataclasses.replace(isa, os_features=os_feats, sve_bits=sve_bits)


@functools.lru_cache(maxsize=1)
def _os_inputs() -> dict:
    from .isa_arm import read_os
    return read_os()


@functools.lru_cache(maxsize=None)
def detect(level: str | None = None) -> ISA:
    """This machine's ISA, at `level`, else $REAME_ISA, else its highest level."""
    host_cpu, host_features = _host()
    arch = normalize_arch(platform.machine())
    os_inputs = _os_inputs() if arch == "aarch64" else None
    return host_isa(arch, host_cpu, host_features, level or os.environ.get("REAME_ISA"),
                    os_inputs)
