"""Which LLVM optimisation settings to compile the template kernels with, measured.

    python -m bench.compile_opts [--reps 200] [--json PATH]

For representative kernels (the integer-dot and float matrix products for decode and prefill,
attention, an element-wise op), compiles each with the backend at opt 3 alone (`ir_opt=0`, the
default in codegen/compiler.py) and with LLVM's O2 and O3 IR pipelines first, then times the
kernel on the same in-cache case, interleaving the settings round by round (the machine is
shared). Each kernel is validated against the numpy reference before it is timed. Prints compile
time and run time per setting, and writes JSON (default bench/results/compile_opts.json).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from reame.codegen.compiler import KERNEL_CFUNC, Compiler
from reame.codegen.isa import detect
from reame.codegen.kernels import Kernel
from reame.codegen.registry import get_op
from reame.codegen.spec import render
from reame.jit.select import choose

SETTINGS = (0, 2, 3)          # ir_opt: 0 = backend only


def cases(isa):
    """(label, op, spec, tokens)."""
    out = []

    def pick(op, dtype, n, **dims):
        spec = choose(op, dtype, isa, n, **dims)       # the engine's starting variant
        out.append((f"{op} {dtype} n={n}", get_op(op), spec, n))

    pick("matmul_q8a", "Q8_0", 1, M=896, K=896, acc=0)
    pick("matmul_q8a", "Q4_K", 8, M=896, K=1024, acc=0)
    pick("matmul", "F32", 1, M=896, K=896, acc=0)
    pick("matmul", "F16", 64, M=256, K=896, acc=0)
    pick("attn_decode", "F32", 4, H=14, Hkv=2, D=64, Dv=64, C=512, BS=64, kv="f16", scale=0.125)
    pick("swiglu", "F32", 16, F=4864)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "compile_opts.json"))
    a = ap.parse_args(argv)
    isa = detect()
    compilers = {o: Compiler(isa, cache_dir=None, ir_opt=o) for o in SETTINGS}
    rows = []
    for label, op, spec, n in cases(isa):
        symbol, ir = render(spec, isa)
        kernels, compile_ms = {}, {}
        for o, comp in compilers.items():
            t = time.perf_counter()
            addr = comp.compile(ir, [symbol])[symbol]
            compile_ms[o] = (time.perf_counter() - t) * 1e3
            kernels[o] = Kernel(spec, symbol, addr, ir)
            ok, worst = op.check(kernels[o], np.random.default_rng(0), n=n)
            if not ok:
                raise SystemExit(f"{label} at ir_opt={o} failed its check ({worst:.3g}x tol)")
        case = op.make_case(spec, np.random.default_rng(1), n)
        best = {o: float("inf") for o in SETTINGS}
        for _ in range(a.rounds):
            for o, k in kernels.items():
                fn = KERNEL_CFUNC(k.address)
                ptr = case.args.ctypes.data
                t = time.perf_counter()
                for _ in range(a.reps):
                    fn(ptr, 0, 1)
                best[o] = min(best[o], (time.perf_counter() - t) / a.reps * 1e6)
        rows.append({"kernel": label, "spec": spec.label(), "compile_ms": compile_ms,
                     "run_us": best})
        print(f"{label:32s} " + "  ".join(
            f"ir_opt={o}: compile {compile_ms[o]:6.1f} ms run {best[o]:8.2f} us" for o in SETTINGS),
            flush=True)
    tot_c = {o: sum(r["compile_ms"][o] for r in rows) for o in SETTINGS}
    rel = {o: float(np.exp(np.mean([np.log(r["run_us"][o] / r["run_us"][0]) for r in rows])))
           for o in SETTINGS}
    print("\n| setting | total compile ms | run time vs backend-only (geomean) |\n|---|---|---|")
    for o in SETTINGS:
        name = "backend opt 3 only" if o == 0 else f"O{o} IR pipeline + backend"
        print(f"| {name} | {tot_c[o]:.0f} | {rel[o]:.3f} |")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"rows": rows, "total_compile_ms": tot_c,
                                        "relative_run_time": rel}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
