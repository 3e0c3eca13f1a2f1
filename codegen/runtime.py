"""The native step runtime: a pool of threads that run compiled programs of kernels.

A program is a list of (dispatch-table slot, argument block, flags) that every pool thread walks
once per step (templates/runtime_generic.ll.j2). Each op is cut into slices that threads claim
dynamically and run as the kernel's `(ith, nth)`; the next op starts once every slice of this
one is done, waited for inside generated code. Python enters native code once per step
(`NativePool.run`), not once per op: per-op synchronisation from Python would cost 36-108 us an
op (docs/FACTS), more than a small matrix-vector product. Because work is claimed rather than
assigned, a thread that loses its core to another process holds up one slice, not the step.

Workers are Python threads parked inside the generated `_worker` loop (ctypes releases the GIL):
they spin briefly after a step, then sleep on a futex until the next one. Waits for an op to
complete spin, then sleep on the same futex, so no thread burns a core another one needs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import threading

import numpy as np

from .compiler import get_compiler
from .isa import ISA, detect
from .spec import environment

CTL_WORDS = 48
PROGRAM_HEADER = 8          # words before the first op
OP_WORDS = 8                # slot, args pointer, flags, claim and done counters; one cache line
FLAG_WAIT = 1               # the next op needs this one complete
SLICES_SHIFT = 8            # flags bits 8-15: slices per thread
SPIN = 20_000               # relax-loop iterations a thread spins before sleeping (~0.2-1 ms)

_RUNTIME: dict = {}
_LOCK = threading.Lock()


RUNTIME_FUNCTIONS = ("run", "worker", "launch", "shutdown", "cycles", "hz")


def runtime_ir(isa: ISA, system: str) -> tuple[str, str]:
    """(symbol prefix, IR) of the runtime for `isa` on an OS (platform.system() spelling)."""
    osname = "linux" if system == "Linux" else system.lower()
    tpl = environment().get_template("runtime_generic.ll.j2")
    probe = tpl.render(p={"prefix": "__RT__", "os": osname}, isa=isa)
    prefix = "reame_rt_" + hashlib.sha256(probe.encode()).hexdigest()[:12]
    return prefix, probe.replace("__RT__", prefix)


def _runtime(isa: ISA) -> dict[str, int]:
    """Compile (once per process) the runtime functions; returns name -> address."""
    with _LOCK:
        if isa in _RUNTIME:
            return _RUNTIME[isa]
        prefix, ir = runtime_ir(isa, platform.system())
        names = [f"{prefix}_{n}" for n in RUNTIME_FUNCTIONS]
        addrs = get_compiler(isa).compile(ir, names)
        _RUNTIME[isa] = {n.rsplit("_", 1)[1]: addrs[n] for n in names}
        return _RUNTIME[isa]


def aligned_zeros(n_words: int, align: int = 64) -> np.ndarray:
    """int64 zeros whose data starts on an `align`-byte boundary."""
    raw = np.zeros(n_words + align // 8, dtype=np.int64)
    off = (-raw.ctypes.data % align) // 8
    return raw[off:off + n_words]


def default_threads() -> int:
    """Physical cores this process may use (logical CPUs of its affinity mask, halved when SMT
    siblings are visible)."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:
        cpus = set(range(os.cpu_count() or 1))
    cores = set()
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/core_id") as f:
                core = f.read().strip()
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/physical_package_id") as f:
                pkg = f.read().strip()
            cores.add((pkg, core))
        except OSError:
            cores.add(("?", c))
    return max(1, len(cores))


_CYCLE_HZ: float | None = None


def cycle_hz() -> float:
    """Ticks per second of the counter the runtime samples op times with: the frequency the
    hardware states (AArch64: CNTFRQ_EL0), else measured against perf_counter over 50 ms (the
    TSC). 0.0 if the counter does not tick (callers must not divide by it)."""
    global _CYCLE_HZ
    if _CYCLE_HZ is None:
        rt = _runtime(detect("generic"))
        stated = ctypes.CFUNCTYPE(ctypes.c_int64)(rt["hz"])()
        _CYCLE_HZ = float(stated) if stated > 0 else _measure_hz(rt["cycles"])
    return _CYCLE_HZ


def _measure_hz(cycles_addr: int, seconds: float = 0.05) -> float:
    import time
    read = ctypes.CFUNCTYPE(ctypes.c_int64)(cycles_addr)
    c0, t0 = read(), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = read(), time.perf_counter()
    return max(0.0, (c1 - c0) / (t1 - t0))


class NativePool:
    """`nth` threads (the caller's plus nth-1 workers) that run programs step by step."""

    def __init__(self, nth: int | None = None, isa: ISA | None = None, spin: int = SPIN,
                 cpus: list[int] | None = None):
        """`cpus`: thread i runs on cpus[i] only (the thread calling run() on cpus[0], pinned
        at its first step); None: threads float (the OS places them)."""
        self.nth = max(1, nth or default_threads())
        self.cpus = list(cpus) if cpus else None
        self._pinned_callers: set[int] = set()
        rt = _runtime(isa or detect("generic"))
        vp, i32 = ctypes.c_void_p, ctypes.c_int32
        self._launch = ctypes.CFUNCTYPE(None, vp, vp, i32)(rt["launch"])
        self._worker = ctypes.CFUNCTYPE(None, vp, i32)(rt["worker"])
        self._shutdown = ctypes.CFUNCTYPE(None, vp)(rt["shutdown"])
        self.ctl = aligned_zeros(CTL_WORDS)
        self.ctl[27] = spin
        self._ctl_ptr = self.ctl.ctypes.data
        self._threads = [threading.Thread(target=self._work, args=(i,),
                                          name=f"reame-worker-{i}", daemon=True)
                         for i in range(1, self.nth)]
        for t in self._threads:
            t.start()
        self._closed = False

    def _cpu(self, i: int) -> int:
        return self.cpus[i % len(self.cpus)]

    def _work(self, i: int) -> None:
        if self.cpus:
            os.sched_setaffinity(0, {self._cpu(i)})      # this thread only (Linux)
        self._worker(self._ctl_ptr, i)

    def run(self, program: np.ndarray, nth: int | None = None) -> None:
        """Run one step of `program` on the pool (blocks until every thread is done)."""
        if self._closed:
            raise RuntimeError("thread pool is closed")
        if self.cpus and threading.get_ident() not in self._pinned_callers:
            os.sched_setaffinity(0, {self._cpu(0)})
            self._pinned_callers.add(threading.get_ident())
        self._launch(self._ctl_ptr, program.ctypes.data, min(nth or self.nth, self.nth))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._shutdown(self._ctl_ptr)
            for t in self._threads:
                t.join()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(nth: int, isa: ISA, cpus: list[int] | None = None) -> NativePool:
    """The process's pool of `nth` compute threads for this ISA and CPU list, made once: the
    engines of several models served by one process share it (their steps never overlap:
    reame/turns.py). With nth = 1 it has no worker thread at all."""
    key = (nth, isa.arch, isa.level, isa.features, tuple(cpus) if cpus else None)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool._closed:
            pool = _POOLS[key] = NativePool(nth, isa, cpus=cpus)
        return pool


class Program:
    """A list of ops as the runtime reads it: a header, then one cache line per op: slot, args
    pointer, flags (wait-for-completion bit, slices per thread), claim and done counters."""

    def __init__(self, table_ptr: int, active_ptr: int, n_slots: int,
                 ops: list[tuple[int, int, bool, int]]):
        """ops: (slot, args pointer, wait for completion before the next op[, slices/thread,
        default 1])."""
        self.words = aligned_zeros(PROGRAM_HEADER + OP_WORDS * len(ops))
        w = self.words
        w[0], w[1], w[2], w[3] = len(ops), table_ptr, active_ptr, n_slots
        for i, (slot, args_ptr, wait, *rest) in enumerate(ops):
            slices = rest[0] if rest else 1
            j = PROGRAM_HEADER + OP_WORDS * i
            w[j], w[j + 1] = slot, args_ptr
            w[j + 2] = (FLAG_WAIT if wait else 0) | (max(1, min(255, slices)) << SLICES_SHIFT)
        if ops:                       # a step returns when its last op is complete
            w[PROGRAM_HEADER + OP_WORDS * (len(ops) - 1) + 2] |= FLAG_WAIT

    def point_at(self, table_ptr: int, n_slots: int) -> None:
        """The dispatch table moved (it grew): read it from its new place."""
        self.words[1], self.words[3] = table_ptr, n_slots

    def set_stats(self, stats: np.ndarray | None) -> None:
        self.words[4] = 0 if stats is None else stats.ctypes.data

    def __len__(self) -> int:
        return int(self.words[0])
