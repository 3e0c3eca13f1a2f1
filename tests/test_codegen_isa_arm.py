"""AArch64 detection (codegen/isa_arm.py, isa.host_isa) from what real machines' kernels report,
on any host: the `Features` line of /proc/cpuinfo and the AT_HWCAP/AT_HWCAP2 words of Neoverse
N1, V1, V2 and Apple M2 machines mapped to levels and to the LLVM features compiled with;
big.LITTLE (features of every core), LLVM's own string overridden, forced levels keeping the OS
facts, the SVE vector length, `reame codegen --list` showing them; and the questions read_os()
asks the kernel (through a fake libc)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from reame.codegen import isa_arm
from reame.codegen.isa import ARM_LEVELS, host_isa

# LLVM's host string on these machines: it reads neither asimddp nor i8mm (issue 14)
LLVM_SEEN = "+neon,+fp-armv8,+crc,+lse"

# Recorded Features lines. The HWCAP/HWCAP2 words are what getauxval returns there: the kernel
# prints the Features line from those bits (arch/arm64/kernel/cpuinfo.c), so they were encoded
# from each line with the bit numbers of arch/arm64/include/uapi/asm/hwcap.h, all of them.
MACHINES = {
    # AWS Graviton2 (m6g.metal), Neoverse N1: firecracker-microvm/firecracker,
    # tests/integration_tests/functional/test_cpu_features_aarch64.py, DEFAULT_G2_FEATURES
    "neoverse-n1": ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
                    "asimdrdm lrcpc dcpop asimddp ssbs", 0x10119FFF, 0x0),
    # AWS Graviton3 (c7g.metal), Neoverse V1: same file, DEFAULT_G3_FEATURES_WITH_SVE_AND_PAC_5_10
    "neoverse-v1": ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
                    "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm "
                    "dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh "
                    "rng", 0xDFFFFFFF, 0x1F201),
    # Google Axion (GCP C4A), Neoverse-V2 r0p1: intel/PerfSpect, lscpu "Flags" in the
    # TestParseLsCPUOutput case "GCP C4A Axion"
    "neoverse-v2": ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
                    "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm "
                    "dit uscat ilrcpc flagm sb paca pacg dcpodp sve2 sveaes svepmull svebitperm "
                    "svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh rng bti",
                    0xEFFFFFFF, 0x3F3FF),
    # Apple M2 (MacBook Air) under Asahi Linux, both clusters: Akihiko Odaki, "Developing QEMU
    # on Asahi Linux", daynix.github.io, 2023-06-03 (lscpu "Flags")
    "apple-m2": ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
                 "jscvt fcma lrcpc dcpop sha3 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs "
                 "sb paca pacg dcpodp flagm2 frint i8mm bf16 bti ecv", 0xFFB3FFFF, 0xA6181),
}

# what each machine must get: levels, and the LLVM features added for the native level
WANT = {
    "neoverse-n1": (ARM_LEVELS[:3], {"neon", "dotprod"}),
    "neoverse-v1": (ARM_LEVELS, {"neon", "dotprod", "i8mm", "bf16", "sve"}),
    "neoverse-v2": (ARM_LEVELS, {"neon", "dotprod", "i8mm", "bf16", "sve", "sve2"}),
    "apple-m2": (ARM_LEVELS[:4], {"neon", "dotprod", "i8mm", "bf16"}),
}


def cpuinfo(features: str, cores: int = 2) -> str:
    block = ("processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: {f}\nCPU implementer\t: 0x41\n"
             "CPU architecture: 8\n")
    return "\n".join(block.format(i=i, f=features) for i in range(cores))


def plus(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


@pytest.mark.parametrize("cpu", MACHINES)
@pytest.mark.parametrize("source", ["cpuinfo", "hwcap"])
def test_recorded_machines(cpu, source):
    """Each machine reaches its levels and compiles with its features, from either input.
    Catches: a feature name or HWCAP bit mapped wrong (N1 stopping at neon, M2 reaching sve),
    the OS facts not reaching the level ladder (every machine stuck at neon, as with LLVM's
    string alone), or sve2 not passed to LLVM on V2."""
    line, hwcap, hwcap2 = MACHINES[cpu]
    inputs = ({"cpuinfo": cpuinfo(line)} if source == "cpuinfo"
              else {"hwcap": hwcap, "hwcap2": hwcap2})
    isa = host_isa("aarch64", cpu, LLVM_SEEN, os_inputs=inputs)
    levels, llvm = WANT[cpu]
    assert isa.levels == levels and isa.level == levels[-1]
    assert (isa.cpu_name, isa.host_cpu) == (cpu, cpu)            # native: tuned for the host
    assert plus(isa.features) >= llvm | plus(LLVM_SEEN)
    assert not plus(isa.features) & ({"dotprod", "i8mm", "bf16", "sve", "sve2"} - llvm)
    assert ("sve" in isa.os_features) == ("sve" in levels)


@pytest.mark.parametrize("cpu", MACHINES)
def test_hwcap_bits_name_the_features_of_the_cpuinfo_line(cpu):
    """The bit tables agree with the kernel's names on every machine. Catches a wrong bit
    number (say I8MM read from bit 14, BF16's) that the level test alone might not."""
    line, hwcap, hwcap2 = MACHINES[cpu]
    assert isa_arm.hwcap_features(hwcap, hwcap2) == set(line.split()) & set(isa_arm.KNOWN)


@pytest.mark.parametrize("hwcap,hwcap2,name", [
    (1 << 1, 0, "asimd"), (1 << 20, 0, "asimddp"), (1 << 22, 0, "sve"),
    (0, 1 << 1, "sve2"), (0, 1 << 13, "i8mm"), (0, 1 << 14, "bf16"), (0, 1 << 23, "sme")])
def test_single_bits_of_the_kernel_header(hwcap, hwcap2, name):
    """HWCAP_ASIMDDP = 1 << 20, HWCAP2_I8MM = 1 << 13, ... one at a time (hwcap.h). Catches two
    features swapped where the recorded machines have both (every i8mm machine has bf16)."""
    assert isa_arm.hwcap_features(hwcap, hwcap2) == {name}


def test_llvm_string_alone_stops_at_neon():
    """Without the OS facts (a non-Linux host) nothing above neon is claimed."""
    isa = host_isa("aarch64", "neoverse-n1", LLVM_SEEN)
    assert isa.levels == ("generic", "neon") and isa.os_features == ()


def test_big_little_uses_what_every_core_has():
    """A chip whose little cores lack i8mm: a kernel may run on any core, so no i8mm level.
    Catches reading only the first Features line (a SIGILL on the little cores)."""
    big = MACHINES["apple-m2"][0]
    little = big.replace(" i8mm", "")
    text = cpuinfo(big, 1) + "\n" + cpuinfo(little, 1).replace("processor\t: 0", "processor\t: 1")
    isa = host_isa("aarch64", "cortex-x4", LLVM_SEEN, os_inputs={"cpuinfo": text})
    assert isa.levels == ARM_LEVELS[:3] and "i8mm" not in plus(isa.features)


def test_os_features_replace_llvm_switched_off_ones():
    """LLVM said -dotprod, the kernel says asimddp: the string holds +dotprod only (a string
    with both is ambiguous to LLVM). Catches appending without removing."""
    isa = host_isa("aarch64", "neoverse-n1", "+neon,-dotprod,-i8mm",
                   os_inputs={"cpuinfo": cpuinfo(MACHINES["neoverse-n1"][0])})
    feats = isa.features.split(",")
    assert "+dotprod" in feats and "-dotprod" not in feats and "-i8mm" in feats


def test_forced_levels_keep_the_os_facts():
    """A recorded V1 forced down: generic CPU with exactly the features of the level, and the OS
    facts still there. Catches ISA.at() re-deriving from LLVM's raw host string (on x86 it
    would even take this machine's features) or dropping the SVE length."""
    line, hwcap, hwcap2 = MACHINES["neoverse-v1"]
    isa = host_isa("aarch64", "neoverse-v1", LLVM_SEEN,
                   os_inputs={"hwcap": hwcap, "hwcap2": hwcap2, "sve_bits": 256})
    assert isa.sve_bits == 256
    for level, feats in (("i8mm", {"neon", "dotprod", "i8mm"}), ("dotprod", {"neon", "dotprod"}),
                         ("generic", set())):
        low = isa.at(level)
        assert (low.level, low.cpu_name, plus(low.features)) == (level, "generic", feats)
        assert (low.levels, low.os_features, low.sve_bits) == (isa.levels, isa.os_features, 256)
        assert low.at("sve") == isa
    assert host_isa("aarch64", "neoverse-v1", LLVM_SEEN, level="neon",
                    os_inputs={"hwcap": hwcap, "hwcap2": hwcap2}).cpu_name == "generic"


def test_sve_length_only_with_sve():
    """prctl answers on a kernel without SVE too (an error, or a stale value in a recording):
    no SVE feature, no length."""
    n1 = isa_arm.facts(LLVM_SEEN, cpuinfo=cpuinfo(MACHINES["neoverse-n1"][0]), sve_bits=128)
    v2 = isa_arm.facts(LLVM_SEEN, cpuinfo=cpuinfo(MACHINES["neoverse-v2"][0]), sve_bits=128)
    assert (n1.sve_bits, v2.sve_bits) == (0, 128)
    assert (n1.source, v2.source) == ("cpuinfo", "cpuinfo")


def test_codegen_list_shows_the_arm_facts(monkeypatch, capsys):
    """`reame codegen --list` on a recorded V2: OS features, SVE length and the LLVM features
    compiled with. Catches detection that works but is invisible to the user."""
    from reame.codegen import cli, isa as isa_mod
    line, hwcap, hwcap2 = MACHINES["neoverse-v2"]
    isa = host_isa("aarch64", "neoverse-v2", LLVM_SEEN,
                   os_inputs={"hwcap": hwcap, "hwcap2": hwcap2, "sve_bits": 128})
    monkeypatch.setattr(isa_mod, "detect", lambda level=None: isa.at(level) if level else isa)
    assert cli.cmd_codegen(SimpleNamespace(isa=None, list=True, dump=None)) == 0
    head = capsys.readouterr().out.split("\n\n")[0]
    assert "levels: generic, neon, dotprod, i8mm, sve" in head
    assert ("OS features: asimd asimddp asimdhp bf16 fp fphp i8mm sve sve2 svebf16 svei8mm;"
            in head)
    assert "SVE 128-bit" in head
    assert "LLVM target features: +neon,+dotprod,+bf16,+i8mm,+sve,+sve2" in head


class FakeLibc:
    """getauxval and prctl as a Linux kernel on a 256-bit SVE machine answers them."""
    calls: list = []

    def __init__(self, name, use_errno=False):
        self.getauxval = self._Fn(lambda t: {16: 0x10119FFF, 26: 0x2}.get(t, 0))
        # PR_SVE_GET_VL: vector length in bytes in bits 0-15, flags above (PR_SVE_VL_INHERIT)
        self.prctl = self._Fn(lambda op, *a: (1 << 17) | 32 if op == 51 else -1)

    class _Fn:
        def __init__(self, f):
            self.f = f

        def __call__(self, *args):
            FakeLibc.calls.append(args)
            return self.f(*args)


def test_read_os_asks_the_kernel_the_right_questions(monkeypatch):
    """read_os() through a fake libc: AT_HWCAP (16) and AT_HWCAP2 (26), PR_SVE_GET_VL (51) with
    the flag bits masked off and bytes turned into bits. Catches a wrong constant, or the
    PR_SVE_VL_INHERIT flag read as part of the length."""
    monkeypatch.setattr(isa_arm.ctypes, "CDLL", FakeLibc)
    monkeypatch.setattr(isa_arm.os, "uname", lambda: SimpleNamespace(sysname="Linux"))
    FakeLibc.calls = []
    got = isa_arm.read_os()
    assert (got["hwcap"], got["hwcap2"], got["sve_bits"]) == (0x10119FFF, 0x2, 256)
    assert (16,) in FakeLibc.calls and (26,) in FakeLibc.calls
    assert any(c[0] == 51 for c in FakeLibc.calls)
