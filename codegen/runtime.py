"""The native step runtime: a pool of threads that run compiled programs of kernels.

A program is a list of (dispatch-table slot, argument block, flags) that every pool thread walks
once per step, calling each kernel for its own slice `(ith, nth)` and meeting the others at a
spin barrier inside generated code between ops (templates/runtime_generic.ll.j2). Python enters
native code once per step (`NativePool.run`), not once per op: per-op synchronisation from
Python would cost 36-108 us an op (docs/FACTS), more than a small matrix-vector product.

Workers are Python threads parked inside the generated `_worker` loop (ctypes releases the GIL):
they spin briefly after a step, then sleep on a futex until the next one. Barriers spin, then
sleep on a futex too, so a thread never burns a core its partner (or another process) needs.
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
OP_WORDS = 3                # slot, args pointer, flags
FLAG_BARRIER = 1
WORKER_SPIN = 50_000        # relax-loop iterations a worker spins after a step before sleeping
BARRIER_SPIN = 4_000        # ... and a thread spins in a barrier before sleeping (~50-100 us)

_RUNTIME: dict = {}
_LOCK = threading.Lock()


def _runtime(isa: ISA) -> dict[str, int]:
    """Compile (once per process) the runtime functions; returns name -> address."""
    with _LOCK:
        if isa in _RUNTIME:
            return _RUNTIME[isa]
        osname = "linux" if platform.system() == "Linux" else platform.system().lower()
        tpl = environment().get_template("runtime_generic.ll.j2")
        probe = tpl.render(p={"prefix": "__RT__", "os": osname}, isa=isa)
        prefix = "reame_rt_" + hashlib.sha256(probe.encode()).hexdigest()[:12]
        ir = probe.replace("__RT__", prefix)
        names = [f"{prefix}_{n}" for n in ("run", "worker", "launch", "shutdown", "cycles")]
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
    """Ticks per second of the counter the runtime samples op times with."""
    global _CYCLE_HZ
    if _CYCLE_HZ is None:
        import time
        read = ctypes.CFUNCTYPE(ctypes.c_int64)(_runtime(detect("generic"))["cycles"])
        c0, t0 = read(), time.perf_counter()
        time.sleep(0.05)
        c1, t1 = read(), time.perf_counter()
        _CYCLE_HZ = (c1 - c0) / (t1 - t0)
    return _CYCLE_HZ


class NativePool:
    """`nth` threads (the caller's plus nth-1 workers) that run programs step by step."""

    def __init__(self, nth: int | None = None, isa: ISA | None = None, spin: int = WORKER_SPIN,
                 barrier_spin: int = BARRIER_SPIN):
        self.nth = max(1, nth or default_threads())
        rt = _runtime(isa or detect("generic"))
        vp, i32 = ctypes.c_void_p, ctypes.c_int32
        self._launch = ctypes.CFUNCTYPE(None, vp, vp, i32)(rt["launch"])
        self._worker = ctypes.CFUNCTYPE(None, vp, i32)(rt["worker"])
        self._shutdown = ctypes.CFUNCTYPE(None, vp)(rt["shutdown"])
        self.ctl = aligned_zeros(CTL_WORDS)
        self.ctl[27], self.ctl[28] = spin, barrier_spin
        self._ctl_ptr = self.ctl.ctypes.data
        self._threads = [threading.Thread(target=self._worker, args=(self._ctl_ptr, i),
                                          name=f"reame-worker-{i}", daemon=True)
                         for i in range(1, self.nth)]
        for t in self._threads:
            t.start()
        self._closed = False

    def run(self, program: np.ndarray, nth: int | None = None) -> None:
        """Run one step of `program` on the pool (blocks until every thread is done)."""
        if self._closed:
            raise RuntimeError("thread pool is closed")
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


class Program:
    """A list of ops as the runtime reads it: header + (slot, args pointer, flags) per op."""

    def __init__(self, table_ptr: int, active_ptr: int, n_slots: int,
                 ops: list[tuple[int, int, bool]]):
        self.words = aligned_zeros(PROGRAM_HEADER + OP_WORDS * len(ops))
        w = self.words
        w[0], w[1], w[2], w[3] = len(ops), table_ptr, active_ptr, n_slots
        for i, (slot, args_ptr, barrier) in enumerate(ops):
            j = PROGRAM_HEADER + OP_WORDS * i
            w[j], w[j + 1], w[j + 2] = slot, args_ptr, FLAG_BARRIER if barrier else 0
        if ops:                       # a step always ends with every thread done
            w[PROGRAM_HEADER + OP_WORDS * (len(ops) - 1) + 2] |= FLAG_BARRIER

    def set_stats(self, stats: np.ndarray | None) -> None:
        self.words[4] = 0 if stats is None else stats.ctypes.data

    def __len__(self) -> int:
        return int(self.words[0])
