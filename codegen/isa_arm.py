"""AArch64 CPU facts from the operating system.

LLVM's host feature string is not enough on ARM: on Linux it misses `dotprod` and `i8mm` on
Neoverse N1/V1 machines, so the `dotprod`, `i8mm` and `sve` levels were never reached. The kernel
knows: it publishes the CPU's features in the auxiliary vector (AT_HWCAP, AT_HWCAP2, read with
getauxval) and in the `Features` line of /proc/cpuinfo, printed from the same bits. This module
turns those recorded inputs into the features Reame compiles with, as pure functions (`facts`)
so that detection is tested from real machines' records on any host; `read_os()` is the one
impure part. The SVE vector length comes from prctl(PR_SVE_GET_VL).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

# Linux bit numbers, arch/arm64/include/uapi/asm/hwcap.h (kernel spelling, as in /proc/cpuinfo)
HWCAP_BITS = {"fp": 0, "asimd": 1, "fphp": 9, "asimdhp": 10, "asimddp": 20, "sve": 22}
HWCAP2_BITS = {"sve2": 1, "svei8mm": 9, "svebf16": 12, "i8mm": 13, "bf16": 14, "sme": 23}
AT_HWCAP, AT_HWCAP2 = 16, 26            # include/uapi/linux/auxvec.h
PR_SVE_GET_VL, PR_SVE_VL_LEN_MASK = 51, 0xFFFF   # include/uapi/linux/prctl.h

# kernel feature name -> LLVM target feature passed when compiling at the native level
LLVM_FEATURE = {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "bf16": "bf16",
                "sve": "sve", "sve2": "sve2"}
KNOWN = tuple(HWCAP_BITS) + tuple(HWCAP2_BITS)


@dataclass(frozen=True)
class ArmFacts:
    os_features: tuple[str, ...]     # kernel names of the features Reame uses, sorted
    source: str                      # "hwcap" | "cpuinfo" | "llvm"
    features: str                    # LLVM feature string to compile for the host with
    sve_bits: int = 0                # SVE vector length in bits (0: no SVE)


def cpuinfo_features(text: str) -> set[str] | None:
    """Features every core has (the intersection of the `Features` lines: on a big.LITTLE chip
    code may run on any core), or None when the text has no such line."""
    sets = [set(line.split(":", 1)[1].split()) for line in text.splitlines()
            if line.split(":", 1)[0].strip() == "Features" and ":" in line]
    return set.intersection(*sets) if sets else None


def hwcap_features(hwcap: int, hwcap2: int) -> set[str]:
    """Feature names of the AT_HWCAP / AT_HWCAP2 bits Reame knows."""
    return ({n for n, b in HWCAP_BITS.items() if hwcap >> b & 1}
            | {n for n, b in HWCAP2_BITS.items() if hwcap2 >> b & 1})


def facts(llvm_features: str, cpuinfo: str | None = None, hwcap: int | None = None,
          hwcap2: int | None = None, sve_bits: int = 0) -> ArmFacts:
    """What an AArch64 host can run, from recorded inputs. HWCAP wins (it is what the kernel
    enables for this process; under qemu-user, what the emulated CPU has, while /proc/cpuinfo
    is the host's), then /proc/cpuinfo, then LLVM's own host features alone. The
    LLVM string gains `+feature` for every OS feature (and loses a `-feature` LLVM reported
    for it); features LLVM knows and the OS does not mention are kept as they are."""
    if hwcap:
        have, source = hwcap_features(hwcap, hwcap2 or 0), "hwcap"
    elif cpuinfo and (found := cpuinfo_features(cpuinfo)) is not None:
        have, source = found & set(KNOWN), "cpuinfo"
    else:
        have, source = set(), "llvm"
    add = [LLVM_FEATURE[f] for f in sorted(have) if f in LLVM_FEATURE]
    kept = [f for f in llvm_features.split(",") if f and f[1:] not in add]
    feats = ",".join(kept + ["+" + f for f in add])
    return ArmFacts(tuple(sorted(have)), source, feats, sve_bits if "sve" in have else 0)


def read_os() -> dict:
    """This process's inputs to `facts` (Linux; empty elsewhere): cpuinfo text, HWCAP, HWCAP2,
    SVE vector length in bits."""
    out: dict = {}
    try:
        with open("/proc/cpuinfo") as f:
            out["cpuinfo"] = f.read()
    except OSError:
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.getauxval.restype = ctypes.c_ulong
        libc.getauxval.argtypes = (ctypes.c_ulong,)
        out["hwcap"], out["hwcap2"] = libc.getauxval(AT_HWCAP), libc.getauxval(AT_HWCAP2)
        libc.prctl.restype = ctypes.c_int
        vl = libc.prctl(PR_SVE_GET_VL, 0, 0, 0, 0) if os.uname().sysname == "Linux" else -1
        out["sve_bits"] = (vl & PR_SVE_VL_LEN_MASK) * 8 if vl > 0 else 0
    except (AttributeError, OSError):
        pass
    return out
