"""llvm-mca estimates of the AArch64 integer-dot kernels against the generic family's code.

No ARM hardware is needed: each kernel is cross-built (codegen.compiler: object code and
assembly for an aarch64 target from any host) for a Neoverse CPU at the family's level, its hot
loop (the basic block that branches back to itself with the most instructions: the token-tile
loop over weight blocks) is cut out of the assembly and handed to llvm-mca with that CPU's
scheduling model. The figure compared is cycles per 32-weight block, per weight row and token
(a loop iteration covers blocks x rows x tokens of them), the generic family's LLVM
auto-vectorised code at the neon level (no dot product instructions) and at the family's level
(where LLVM turns its sext/mul/reduce into `sdot` by itself) beside it.

    python -m bench.arm_mca [--mca llvm-mca-19] [--cpus neoverse-n1,neoverse-v1]
                            [--only matmul_q8k/] [--out bench/results/arm_mca.md]

Estimates, not measurements: llvm-mca models the core's ports and latencies for a loop whose
data is in L1, with perfect branch prediction; decode reads the weights from DRAM, so these say
how much compute headroom a kernel leaves, not its tokens per second (docs/kernels-arm.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from reame.codegen.compiler import Compiler
from reame.codegen.isa import host_isa
from reame.codegen.spec import KernelSpec, render

# llvm-mca 14 (Debian 12's default) models every Neoverse core with Cortex-A57's scheduling model
# (3-wide, one load pipe); 19 (`apt-get install llvm-19`) has the N1, N2, V1 and V2 models
MCA = ("llvm-mca-19", "/usr/lib/llvm-19/bin/llvm-mca", "llvm-mca")

# recorded machines (tests/test_codegen_isa_arm.py): HWCAP words -> levels and features
CPUS = {
    "neoverse-n1": {"hwcap": 0x10119FFF, "hwcap2": 0x0},          # Graviton2: dotprod
    "neoverse-n2": {"hwcap": 0xEFFFFFFF, "hwcap2": 0x3F3FF},      # V2's features: i8mm, sve2
    "neoverse-v1": {"hwcap": 0xDFFFFFFF, "hwcap2": 0x1F201},      # Graviton3: i8mm, sve
    "neoverse-v2": {"hwcap": 0xEFFFFFFF, "hwcap2": 0x3F3FF},      # Axion / Graviton4
}

# (op, family, level, dtype, tile, blocks of 32 x rows x tokens per loop iteration)
DIMS = {"matmul_q8a": dict(M=4096, K=4096, acc=0), "matmul_q8k": dict(M=4096, K=4096, acc=0)}


def cases():
    out = []
    for dtype in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "IQ4_NL"):
        for nt in (1, 4):
            out.append(("matmul_q8a", "generic", "neon", dtype, {"nt": nt}, (1, 1, nt)))
            out.append(("matmul_q8a", "generic", "dotprod", dtype, {"nt": nt}, (1, 1, nt)))
            out.append(("matmul_q8a", "dotprod", "dotprod", dtype, {"nt": nt}, (4, 1, nt)))
        for nt in (2, 4):
            out.append(("matmul_q8a", "i8mm", "i8mm", dtype, {"nt": nt}, (1, 2, nt)))
    for dtype in ("Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_XS"):
        for nt in (1, 4):
            tile = {"nt": nt, "u": 1}
            out.append(("matmul_q8k", "generic", "neon", dtype, tile, (8, 1, nt)))
            out.append(("matmul_q8k", "generic", "dotprod", dtype, tile, (8, 1, nt)))
            out.append(("matmul_q8k", "dotprod", "dotprod", dtype, tile, (8, 1, nt)))
        # 2-token steps: the dotprod family's nt = 2 against the i8mm family's one token pair
        out.append(("matmul_q8k", "dotprod", "dotprod", dtype, {"nt": 2, "u": 1}, (8, 1, 2)))
        for nt in (2, 4):
            out.append(("matmul_q8k", "i8mm", "i8mm", dtype, {"nt": nt, "u": 1}, (8, 2, nt)))
    return out


def isa_for(cpu: str, level: str):
    """The recorded `cpu` at `level`, its code tuned for that CPU (what llvm-mca models)."""
    isa = host_isa("aarch64", cpu, "+neon,+fp-armv8", os_inputs=CPUS[cpu])
    if level not in isa.levels:
        return None
    low = isa.at(level)
    # the CPU name alone implies its features (an N1 has dotprod): switch off those above level
    off = {"neon": "-dotprod,-i8mm,-sve,-sve2", "dotprod": "-i8mm,-sve,-sve2",
           "i8mm": "-sve,-sve2"}.get(level, "")
    return dataclasses.replace(low, cpu_name=cpu, features=",".join(
        x for x in (low.features, off) if x))


def hot_loop(asm: str) -> list[str]:
    """The instructions of the largest self-looping basic block of `asm`."""
    blocks: list[tuple[str, list[str]]] = []
    label, body = None, []
    for line in asm.splitlines():
        m = re.match(r"^(\.?[A-Za-z_$][\w.$]*):", line)
        if m:
            blocks.append((label, body))
            label, body = m.group(1), []
            continue
        s = line.split("//")[0].strip()
        if not s or s.startswith("."):
            continue
        body.append(s)
        if re.match(r"^(b|b\.\w+|cbn?z|tbn?z|ret)\s", s + " "):    # a branch ends the block
            blocks.append((label, body))
            label, body = None, []
    blocks.append((label, body))
    loops = [b for lab, b in blocks if lab and b and re.match(rf"^b(\.\w+)?\s+{re.escape(lab)}$",
                                                                b[-1])]
    if not loops:
        raise ValueError("no self-looping block in the assembly")
    return max(loops, key=len)


def mca(mca_bin: str, cpu: str, features: str, loop: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(loop[:-1]) + "\n")            # the back edge: mca iterates itself
        path = f.name
    attrs = ",".join(x for x in features.split(",") if x[:1] in "+-")
    r = subprocess.run([mca_bin, "-mtriple=aarch64-linux-gnu", f"-mcpu={cpu}",
                        f"-mattr={attrs}", "-iterations=200", path],
                       capture_output=True, text=True)
    Path(path).unlink()
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr else "llvm-mca failed")
    get = {k: float(re.search(rf"{k}:\s+([\d.]+)", r.stdout).group(1))
           for k in ("Iterations", "Total Cycles", "Instructions", "Block RThroughput")}
    return {"cycles": get["Total Cycles"] / get["Iterations"],
            "insts": get["Instructions"] / get["Iterations"], "rthru": get["Block RThroughput"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mca", default=next((m for m in MCA if shutil.which(m)), MCA[-1]))
    ap.add_argument("--cpus", default="neoverse-n1,neoverse-n2,neoverse-v1,neoverse-v2")
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    ap.add_argument("--only", default="", help="only the cases whose 'op/family/type' contains "
                    "this (e.g. matmul_q8k/, /i8mm/)")
    args = ap.parse_args(argv)
    rows = ["| op | type | family @ level | tile | cpu | insts / iter | cycles / iter "
            "| block-token units / iter | cycles / block / token |",
            "|---|---|---|---|---|---|---|---|---|"]
    for cpu in args.cpus.split(","):
        for op, family, level, dtype, tile, (nb, nr, nt) in cases():
            if args.only not in f"{op}/{family}/{dtype}":
                continue
            isa = isa_for(cpu, level)
            if isa is None:
                continue
            spec = KernelSpec.make(op, dtype, family, level, **tile, **DIMS[op])
            _, ir = render(spec, isa)
            loop = hot_loop(Compiler(isa, cache_dir=None).assembly(ir))
            try:
                m = mca(args.mca, cpu, isa.features, loop)
            except RuntimeError as e:
                print(f"{spec.label()} {cpu}: {e}", file=sys.stderr)
                continue
            units = nb * nr * nt
            tid = ",".join(f"{k}={v}" for k, v in tile.items())
            rows.append(f"| {op} | {dtype} | {family} @ {level} | {tid} | {cpu} | "
                        f"{m['insts']:.0f} | {m['cycles']:.1f} | {units} | "
                        f"{m['cycles'] / units:.2f} |")
            print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n\n" + summary(rows[2:]) + "\n"
    print("\n" + summary(rows[2:]))
    if args.out:
        Path(args.out).write_text(text)
    return 0


def summary(rows: list[str]) -> str:
    """The table of docs/kernels-arm.md: cycles per 32-weight block, row and token, per CPU, of
    generic@neon / generic@dotprod / the ARM family (i8mm: its multi-token tiles)."""
    cells: dict = {}
    cpus: list[str] = []
    for r in rows:
        op, dtype, fam, tile, cpu, _, _, _, cpb = (c.strip() for c in r.strip("|").split("|"))
        nt = int(re.search(r"nt=(\d+)", tile).group(1))
        key = (op, dtype, "1" if nt == 1 else "2-4")
        col = {"generic @ neon": 0, "generic @ dotprod": 1}.get(fam, 2 if "dotprod @" in fam else 3)
        if fam.startswith("i8mm") and nt != 4:
            continue                            # i8mm: the nt=4 tile (2 token pairs)
        if fam.startswith(("generic", "dotprod")) and nt not in (1, 4):
            continue
        cells.setdefault(key, {}).setdefault(cpu, ["-"] * 4)[col] = cpb
        if cpu not in cpus:
            cpus.append(cpu)
    head = "| op | type | tokens | " + " | ".join(
        f"{c}: generic@neon / generic@dotprod / dotprod / i8mm" for c in cpus) + " |"
    out = [head, "|---|---|---|" + "---|" * len(cpus)]
    for (op, dtype, nt), per in cells.items():
        out.append(f"| {op} | {dtype} | {nt} | " + " | ".join(
            " / ".join(per.get(c, ["-"] * 4)) for c in cpus) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
