"""The live dispatch table: every op site of the compiled step calls its kernel through a slot.

The table is double-buffered: `fns[copy][slot]` holds kernel addresses and the step program reads
`fns[active]` (templates/runtime_generic.ll.j2). A new variant is *staged* into the inactive copy
(any thread, any time) and becomes active at the next step boundary by one swap (`commit`, called
by the engine between steps), so a step never mixes variants and no running request sees a
half-updated table. A staged variant must first pass a numerical check against the generic
kernel on that slot's own shape, at every token count the slot's program serves (its smallest
and largest, one past and before them, the middle), so a variant wrong only for some step sizes
is refused; `rollback` restores the previous variant. Per-slot call counts
and cycles (summed over the threads that ran slices of it) are sampled by the runtime on the
steps the engine chooses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .codegen import registry
from .codegen.kernels import Kernel, build
from .codegen.ops.base import compare
from .codegen.runtime import aligned_zeros, cycle_hz
from .errors import ReameError


class VariantRejected(ReameError):
    """A variant failed its numerical check on a slot's shape."""


@dataclass
class Slot:
    index: int
    name: str                      # op site, e.g. "blk.3.ffn_down"
    kernel: Kernel                 # live variant
    history: list[Kernel] = field(default_factory=list)   # earlier live variants (for rollback)
    staged: Kernel | None = None
    verified: set = field(default_factory=set)            # symbols that passed the check here
    rolling_back: bool = False
    counts: tuple[int, ...] = (3,)  # the op's count argument (tokens, rows) values to check at
    trial: bool = False             # the staged variant is a trial: not recorded in history
    base: Kernel | None = None      # the recorded live variant while a trial runs


def check_counts(lo: int, hi: int) -> tuple[int, ...]:
    """Counts a candidate is checked at for a program serving lo..hi: both ends, one in from
    each (ragged tiles), the middle."""
    return tuple(sorted({n for n in (lo, lo + 1, (lo + hi) // 2, hi - 1, hi) if lo <= n <= hi}))


class DispatchTable:
    """Slots grow with the model: when `add` finds the table full it doubles its capacity and
    re-points every program attached to it (`attach`), so a table may only grow between steps
    (slots are added while programs are built, at load)."""

    def __init__(self, capacity: int = 1024):
        self.capacity = capacity
        self.fns = aligned_zeros(2 * capacity)       # [2][capacity] kernel addresses
        self.active = aligned_zeros(8)                # word 0: index of the live copy
        self.stats = aligned_zeros(2 * capacity).reshape(capacity, 2)   # calls, cycles
        self.programs: list = []                      # codegen.runtime.Program reading this table
        self.slots: list[Slot] = []
        self.by_name: dict[str, Slot] = {}
        self._lock = threading.Lock()
        self._dirty = False
        self.swaps = 0

    # ---- building ----
    def add(self, name: str, kernel: Kernel, counts: tuple[int, ...] = (3,)) -> int:
        """A new slot (or the existing one of that name) running `kernel`; returns its index.
        `counts`: the values of the op's count argument the slot's program runs it with, that a
        candidate variant is checked at (dispatch.check_counts)."""
        with self._lock:
            if name in self.by_name:
                return self.by_name[name].index
            if len(self.slots) == self.capacity:
                self._grow(2 * self.capacity)
            s = Slot(len(self.slots), name, kernel, verified={kernel.symbol}, counts=tuple(counts))
            self.slots.append(s)
            self.by_name[name] = s
            self.fns[s.index] = self.fns[self.capacity + s.index] = kernel.address
            return s.index

    def _grow(self, capacity: int) -> None:
        """Move the table to `capacity` slots (both copies, the statistics) and re-point the
        attached programs at it."""
        n, old = len(self.slots), self.capacity
        fns = aligned_zeros(2 * capacity)
        fns[:n] = self.fns[:n]
        fns[capacity:capacity + n] = self.fns[old:old + n]
        stats = aligned_zeros(2 * capacity).reshape(capacity, 2)
        stats[:n] = self.stats[:n]
        self.fns, self.stats, self.capacity = fns, stats, capacity
        for p in self.programs:
            p.point_at(self.table_ptr, capacity)

    def attach(self, program) -> None:
        """A program whose ops call through this table (re-pointed when the table grows)."""
        self.programs.append(program)

    @property
    def table_ptr(self) -> int:
        return self.fns.ctypes.data

    @property
    def active_ptr(self) -> int:
        return self.active.ctypes.data

    def live(self, slot: int) -> Kernel:
        return self.slots[slot].kernel

    # ---- swapping variants ----
    def verify(self, slot: int, kernel: Kernel) -> float:
        """Numerical check of `kernel` against the generic kernel on the slot's shape, at each
        of the slot's counts; returns the worst error in units of the op's tolerance (<= 1
        passes; two kernels each within tolerance of the exact result may differ by twice it).
        Raises VariantRejected."""
        s = self.slots[slot]
        live = s.kernel.spec
        spec = kernel.spec
        if (spec.op, spec.dtype) != (live.op, live.dtype) or any(
                spec.p.get(d) != live.p.get(d) for d in registry.get_op(spec.op).dims):
            raise VariantRejected(f"{spec.label()} does not fit slot {s.name} ({live.label()})")
        op = registry.get_op(spec.op)
        generic = _generic_kernel(op, live)
        rtol, atol = op.tolerance(spec.dtype)
        worst = 0.0
        for n in s.counts:
            case = op.make_case(spec, np.random.default_rng((slot, n)), n)
            want = {k: case.buffers[k].copy() for k in case.outputs}
            inputs = {k: v.copy() for k, v in case.buffers.items()}
            generic.run_threads(case.args, 1)
            expected = {k: case.buffers[k].copy() for k in case.outputs}
            for k, v in inputs.items():             # restore inputs (ops may write in place)
                case.buffers[k][...] = v
            for k in case.outputs:
                case.buffers[k][...] = want[k]
            kernel.run_threads(case.args, 2)
            for k in case.outputs:
                worst = max(worst, compare(case.buffers[k], expected[k], 2 * rtol, 2 * atol))
            if worst > 1.0:
                raise VariantRejected(f"{spec.label()} disagrees with the generic kernel on "
                                      f"{s.name} at n={n} ({worst:.3g}x the tolerance)")
        return worst

    def stage(self, slot: int, kernel: Kernel, verify: bool = True, record: bool = True) -> None:
        """Put `kernel` in the inactive copy; it goes live at the next commit(). With
        record=False it is a trial (the adaptive runtime's A/B): it runs, but the history (what
        rollback returns to) keeps the last recorded variant."""
        s = self.slots[slot]
        if verify and kernel.symbol not in s.verified:
            self.verify(slot, kernel)
            s.verified.add(kernel.symbol)
        with self._lock:
            self._stage_locked(s, kernel, trial=not record)

    def _stage_locked(self, s: Slot, kernel: Kernel, trial: bool = False) -> None:
        inactive = 1 - int(self.active[0])
        self.fns[inactive * self.capacity + s.index] = kernel.address
        s.staged = kernel
        s.trial = trial
        s.rolling_back = False                # a new variant replaces a pending rollback
        self._dirty = True

    def rollback(self, slot: int) -> Kernel | None:
        """Stage the previous live variant of a slot; returns it (None if there is none). Atomic
        with respect to commit(): the variant and the rollback mark are staged together."""
        s = self.slots[slot]
        with self._lock:
            if not s.history:
                return None
            prev = s.history[-1]
            self._stage_locked(s, prev)
            s.rolling_back = True
            return prev

    def commit(self) -> bool:
        """Step boundary: make staged variants live with one swap. Only the engine thread calls
        this, between steps. Returns True if anything changed."""
        with self._lock:
            if not self._dirty:
                return False
            new = 1 - int(self.active[0])
            self.active[0] = new                    # the swap: the next step reads this copy
            old = 1 - new
            base_new, base_old = new * self.capacity, old * self.capacity
            n = len(self.slots)
            self.fns[base_old:base_old + n] = self.fns[base_new:base_new + n]
            for s in self.slots:
                if s.staged is not None:
                    recorded = s.base or s.kernel         # the live variant, trials aside
                    if s.trial:
                        s.base = None if s.staged is recorded else recorded
                    elif s.rolling_back:
                        s.history.pop()
                        s.rolling_back = False
                        s.base = None
                    else:
                        s.history.append(recorded)
                        s.base = None
                    s.kernel, s.staged, s.trial = s.staged, None, False
            self._dirty = False
            self.swaps += 1
            return True

    # ---- statistics ----
    def slot_stats(self) -> list[dict]:
        hz = cycle_hz()
        out = []
        for s in self.slots:
            calls, cyc = (int(x) for x in self.stats[s.index])
            secs = cyc / hz if hz > 0 else 0.0        # a counter that does not tick: no times
            out.append({"slot": s.name, "kernel": s.kernel.spec.label(), "calls": calls,
                        "cycles": cyc,
                        "seconds": secs,          # thread-seconds inside the kernel
                        "mean_us": secs / calls * 1e6 if calls else 0.0})
        return out

    def reset_stats(self) -> None:
        self.stats[...] = 0


_GENERIC: dict = {}


def _generic_kernel(op, spec) -> Kernel:
    """The portable reference kernel for a spec's op, type and dims (cached)."""
    from .codegen.isa import detect
    key = (spec.op, spec.dtype, tuple((d, spec.p.get(d)) for d in op.dims))
    if key not in _GENERIC:
        isa = detect().at("generic")
        dims = {d: spec.p[d] for d in op.dims if d in spec.p}
        cands = op.specs(spec.dtype, isa, **dims)
        if not cands and spec.dtype == "BF16":
            # a reduced-precision variant of a float op (attn_prefill's amx family) is checked
            # against the f32 generic kernel, at its dtype's tolerance (which covers the bf16
            # roundings)
            cands = op.specs("F32", isa, **dims)
        if not cands:
            raise VariantRejected(f"no generic {op.name} kernel for {spec.dtype}")
        _GENERIC[key] = build(cands[0], isa)
    return _GENERIC[key]
