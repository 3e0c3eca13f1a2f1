"""Built kernels: a spec rendered, compiled, and callable from Python.

Every kernel has the signature `void (ptr args, i32 ith, i32 nth)`: `args` is a block of 64-bit
words (pointers and integers) laid out as the op declares (`Op.args`); thread `ith` of `nth`
computes its slice. From Python a kernel is called with a numpy int64 array as the block.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from .compiler import KERNEL_CFUNC, Compiler, get_compiler
from .isa import ISA, UnsupportedLevel, detect
from .spec import KernelSpec, render


@dataclass
class Kernel:
    spec: KernelSpec
    symbol: str
    address: int
    ir: str

    def __post_init__(self):
        self.cfunc = KERNEL_CFUNC(self.address)

    def __call__(self, args: np.ndarray, ith: int = 0, nth: int = 1) -> None:
        assert args.dtype == np.int64 and args.flags.c_contiguous
        self.cfunc(args.ctypes.data, ith, nth)

    def run_threads(self, args: np.ndarray, nth: int) -> None:
        """Run all `nth` slices on `nth` Python threads (ctypes releases the GIL). For tests
        and benchmarks: the engine enters kernels from its own compiled step instead."""
        if nth == 1:
            return self(args)
        ptr = args.ctypes.data
        threads = [threading.Thread(target=self.cfunc, args=(ptr, i, nth)) for i in range(1, nth)]
        for t in threads:
            t.start()
        self.cfunc(ptr, 0, nth)
        for t in threads:
            t.join()


def pack_args(words) -> np.ndarray:
    """An argument block from a list of ints and numpy arrays (arrays become their address)."""
    out = np.empty(len(words), dtype=np.int64)
    for i, w in enumerate(words):
        if isinstance(w, np.ndarray):
            out[i] = w.ctypes.data
        elif isinstance(w, ctypes.Array):
            out[i] = ctypes.addressof(w)
        else:
            out[i] = int(w)
    return out


def check_buildable(spec: KernelSpec, isa: ISA) -> None:
    """Raise UnsupportedLevel unless `isa`'s machine can run `spec`: its family implements its
    type (another type's code would render silently wrong), its level is one of the machine's
    levels, and its family's lowest level is at or below it (an AVX2 family on AArch64, or a
    level above the host, would abort the process inside LLVM)."""
    from .registry import ops
    if spec.level not in isa.levels:
        raise UnsupportedLevel(f"cannot build {spec.label()}: level {spec.level!r} is not "
                               f"available on this {isa.arch} CPU "
                               f"(available: {', '.join(isa.levels)})")
    op = ops().get(spec.op)
    if op and not any(v.family == spec.family and spec.dtype in v.dtypes for v in op.variants):
        raise UnsupportedLevel(f"cannot build {spec.label()}: family {spec.family!r} of "
                               f"{spec.op} does not implement {spec.dtype}")
    needs = [v.min_level for v in op.variants if v.family == spec.family] if op else []
    at = isa.levels.index(spec.level)
    if needs and not any(n in isa.levels and isa.levels.index(n) <= at for n in needs):
        need = needs[0]
        where = (f"at level {spec.level!r}" if need in isa.levels
                 else f"on this {isa.arch} CPU (levels: {', '.join(isa.levels)})")
        raise UnsupportedLevel(f"cannot build {spec.label()}: family {spec.family!r} needs "
                               f"level {need!r}, not available {where}")


def build(spec: KernelSpec, isa: ISA | None = None, compiler: Compiler | None = None) -> Kernel:
    """Render, compile (or load from the cache) and return a callable kernel. A spec this
    machine cannot run raises UnsupportedLevel before anything is compiled."""
    isa = isa or detect()
    check_buildable(spec, isa)
    if isa.level != spec.level:
        isa = isa.at(spec.level)
    compiler = compiler or get_compiler(isa)
    symbol, ir = render(spec, isa)
    addr = compiler.compile(ir, [symbol])[symbol]
    return Kernel(spec, symbol, addr, ir)
