"""The live dispatch table: every op site of the compiled step calls its kernel through a slot.

The table is double-buffered: `fns[copy][slot]` holds kernel addresses and the step program reads
`fns[active]` (templates/runtime_generic.ll.j2). A new variant is *staged* into the inactive copy
(any thread, any time) and becomes active at the next step boundary by one swap (`commit`, called
by the engine between steps), so a step never mixes variants and no running request sees a
half-updated table; `rollback` restores the previous variant. Per-slot call counts and cycles
(summed over the threads that ran slices of it) are sampled by the runtime on the steps the
engine chooses.

The guard (`verify`): a staged variant must first pass a numerical check against the generic
kernel on that slot's own shape, at every residue of the count (tokens, rows) its tiles can
produce within the counts the slot's program serves (lo..hi): every count from lo to lo + its
largest count tile (`count_tile`), hi - 1 and hi, and both sides of each token-chunk boundary
(`check_counts`), so a variant wrong only for some step sizes is refused. It runs the way the
step runtime runs it: cut into the slot's slices per thread x the table's threads (the pool's;
by default codegen.runtime.default_threads(), the engine's default) as its `(ith, nth)`, the
slices run by that many threads, not as one or two calls. A NaN or infinity anywhere in the
variant's output refuses it, whatever the generic kernel gives there; so does a write past the
count's rows or into an input. One random case is made, for the largest count, and every smaller
count runs on its first rows (valid: kernels read and write the rows < n only, with row strides
fixed at compile time, as in the engine's buffers; the MoE routing ops, whose outputs are not
rows of the count, get a case per count); for ops whose output row i depends on input row i
only (`ROW_WISE`) the generic kernel runs once, at the largest count, and each count compares
its first rows (the rest must stay untouched). Measured on the qwen2-0.5b-shaped Q8_0 model's 90
slot classes (2 threads, n_ctx 2048, each live kernel as the candidate): 51 ms a verify on
average, 17 ms without the 5 output heads (0.63 s each, mostly making 136 MB of random weights);
the earlier check (five counts, a fresh case and generic run at each, two slices) took 244 ms,
71 ms and 3.2 s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .codegen import registry
from .codegen.kernels import Kernel, build
from .codegen.ops.base import compare
from .codegen.runtime import aligned_zeros, cycle_hz, default_threads
from .codegen.spec import KernelSpec
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
    trial: bool = False             # the staged variant is a trial: not recorded in history
    base: Kernel | None = None      # the recorded live variant while a trial runs
    # the op's count argument (tokens, rows) takes the values step * (lo..hi) in the slot's
    # program; the op runs cut into slices x threads pieces (the runtime's nth)
    lo: int = 3
    hi: int = 3
    step: int = 1
    slices: int = 1
    threads: int = 1

    def counts(self, spec: KernelSpec | None = None) -> tuple[int, ...]:
        """The count values a variant of `spec` (default: the live one) is checked at here."""
        spec = spec or self.kernel.spec
        return check_counts(self.lo, self.hi, count_tile(spec), self.step,
                            int(spec.p.get("tc", 0)))

    @property
    def nth(self) -> int:
        return self.slices * self.threads


# ops whose output row i (axis 0, the count) is a function of input row i only, with every
# count-indexed buffer's row stride fixed at compile time: the first n rows of a case made for
# N > n rows are a case for n rows (the engine's buffers are likewise max_tokens rows long)
ROW_WISE = frozenset({"add", "rms_norm", "softcap", "softmax", "swiglu", "rope", "get_rows",
                      "quantize_q8a", "quantize_q8k", "matmul", "matmul_q8a", "matmul_q8k",
                      "matmul_q8k_rp", "matmul_q8a_rp", "attn_decode", "attn_prefill"})
# ops whose first n tokens of a case for N > n tokens are a case for n tokens, but whose output is
# not rows of the count (store_kv writes cache cells): the generic kernel runs at each count
PREFIX = frozenset({"store_kv"})
MAX_TILE = 64       # counts checked from lo on: at most this many more
EXACT_ROWS = 64     # same_bits checks a row-wise op on at least this many rows


def count_tile(spec: KernelSpec) -> int:
    """The largest tile of `spec` over its op's count (a kernel runs whole tiles, then a
    remainder, so its code paths repeat with the count modulo it): `nt` (token tiles of the
    matmuls), `nr` (gemm), `rb` (attn_prefill query tokens), the amx attention tile's 16 mb query
    rows over the G heads of a kv head, the 16-token tiles of the amx matmul; 1 for ops tiled
    over other dimensions only."""
    p = spec.p
    tiles = [int(p[k]) for k in ("nt", "nr", "rb") if k in p]
    if "mb" in p:
        tiles.append(16 * int(p["mb"]) // max(1, int(p["H"]) // int(p["Hkv"])))
    if "tc" in p:
        tiles.append(16)
    return max(1, min(MAX_TILE, max(tiles, default=1)))


def check_counts(lo: int, hi: int, tile: int = 1, step: int = 1,
                 chunk: int = 0) -> tuple[int, ...]:
    """Count values a candidate is checked at for a program whose count runs step * (lo..hi):
    every n from lo to lo + tile (each residue modulo the candidate's count tile, and one full
    tile more), hi - 1 and hi (the program's edges: its largest steps, every token panel of the
    kernel), and with token chunks (amx: chunks of `chunk` tokens, then the rest) each chunk
    boundary and one past it."""
    ns = set(range(lo, lo + tile + 1)) | {hi - 1, hi}
    if chunk:
        for c in range(chunk, step * hi + 1, chunk):
            ns |= {c // step, c // step + 1}
    return tuple(step * n for n in sorted(ns) if lo <= n <= hi)


class DispatchTable:
    """Slots grow with the model: when `add` finds the table full it doubles its capacity and
    re-points every program attached to it (`attach`), so a table may only grow between steps
    (slots are added while programs are built, at load). `threads`: the threads of the pool that
    runs the programs (default: codegen.runtime.default_threads(), the engine's default for
    models that are not tiny): an op of `slices` slices per thread runs as slices x threads
    pieces, and candidates are checked cut so."""

    def __init__(self, capacity: int = 1024, threads: int | None = None):
        self.capacity = capacity
        self.threads = max(1, threads or default_threads())
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
    def add(self, name: str, kernel: Kernel, span: tuple[int, int] = (3, 3), step: int = 1,
            slices: int = 1, threads: int | None = None) -> int:
        """A new slot (or the existing one of that name) running `kernel`; returns its index.
        The slot's program runs the op with its count argument at step * (lo..hi) for
        `span` = (lo, hi), cut into `slices` slices per thread of `threads` (default: the
        table's); a candidate variant is checked so (verify)."""
        lo, hi = span
        with self._lock:
            if name in self.by_name:
                return self.by_name[name].index
            if len(self.slots) == self.capacity:
                self._grow(2 * self.capacity)
            s = Slot(len(self.slots), name, kernel, verified={kernel.symbol}, lo=lo, hi=hi,
                     step=step, slices=max(1, slices), threads=max(1, threads or self.threads))
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
        of the slot's check counts for it (Slot.counts), run cut into the slot's production nth;
        returns the worst error in units of the op's tolerance (<= 1 passes; two kernels each
        within tolerance of the exact result may differ by twice it). Raises VariantRejected:
        a worse error, a non-finite output value, a write past the count's rows or into an
        input."""
        s = self.slots[slot]
        live = s.kernel.spec
        spec = kernel.spec
        if (spec.op, spec.dtype) != (live.op, live.dtype) or any(
                spec.p.get(d) != live.p.get(d) for d in registry.get_op(spec.op).dims):
            raise VariantRejected(f"{spec.label()} does not fit slot {s.name} ({live.label()})")
        op = registry.get_op(spec.op)
        generic = _generic_kernel(op, live)
        rtol, atol = op.tolerance(spec.dtype)
        check = _Check(spec, s, 2 * rtol, 2 * atol)
        counts = s.counts(spec)
        if spec.op not in ROW_WISE and spec.op not in PREFIX:
            for n in counts:                    # a fresh case per count
                case = op.make_case(spec, np.random.default_rng((slot, n)), n)
                init = {k: v.copy() for k, v in case.buffers.items()}
                _run(generic, case.args, s.threads, s.threads)
                expected = {k: case.buffers[k].copy() for k in case.outputs}
                for k, v in init.items():       # restore inputs (ops may write in place)
                    case.buffers[k][...] = v
                _run(kernel, case.args, s.nth, s.threads)
                for k in case.outputs:
                    check(k, n, case.buffers[k], expected[k])
            return check.worst
        # one case for the largest count; each count runs on its first rows
        top = max(counts)
        case = op.make_case(spec, np.random.default_rng((slot, top)), top)
        nword = op.args.index("n")
        out = case.outputs
        init = {k: case.buffers[k].copy() for k in out}
        digest = {k: _digest(v) for k, v in case.buffers.items() if k not in out}

        def reference(n: int) -> dict[str, np.ndarray]:
            """The generic kernel's outputs at count n (then the outputs restored)."""
            case.args[nword] = n
            _run(generic, case.args, s.threads, s.threads)
            want = {k: case.buffers[k].copy() for k in out}
            for k in out:
                case.buffers[k][...] = init[k]
            return want
        expected = reference(top) if spec.op in ROW_WISE else {}
        for n in counts:
            if spec.op in PREFIX:
                expected = reference(n)
            case.args[nword] = n
            _run(kernel, case.args, s.nth, s.threads)
            for k in out:
                got = case.buffers[k]
                if spec.op in PREFIX:
                    check(k, n, got, expected[k])
                    got[...] = init[k]
                    continue
                check(k, n, got[:n], expected[k][:n])
                if not _same_bits(got[n:], init[k][n:]):
                    raise VariantRejected(f"{spec.label()} writes past row {n} of {k} on "
                                          f"{s.name}")
                got[:n] = init[k][:n]
        for k, d in digest.items():
            if _digest(case.buffers[k]) != d:
                raise VariantRejected(f"{spec.label()} writes its input {k} on {s.name}")
        return check.worst

    def same_bits(self, slot: int, kernel: Kernel, other: Kernel) -> None:
        """Exactness check: `kernel` must give outputs bit-identical to `other`'s (the live
        variant's) at every count either is checked at on this slot (a row-wise op also at
        EXACT_ROWS rows or more), cut into the slot's production slices, on random inputs.
        Raises VariantRejected where a bit differs (another summation order or precision: a
        variant within the op's tolerance that would still change a greedy token somewhere).
        Run after verify(): it does not look for writes out of bounds."""
        s = self.slots[slot]
        spec = kernel.spec
        op = registry.get_op(spec.op)
        counts = sorted(set(s.counts(spec)) | set(s.counts(other.spec)))

        def differs(case, n: int, rows: bool) -> None:
            # a row-wise op writes only its outputs (verify() checked): restore those alone, not
            # the weights (a model head's are tens of MB, at each of ~20 counts)
            keep = {k: v.copy() for k, v in case.buffers.items() if not rows or k in case.outputs}
            _run(other, case.args, s.nth, s.threads)
            want = {k: case.buffers[k].copy() for k in case.outputs}
            for k, v in keep.items():
                case.buffers[k][...] = v
            _run(kernel, case.args, s.nth, s.threads)
            for k in case.outputs:
                got, ref = case.buffers[k], want[k]
                if rows:
                    got, ref = got[:n], ref[:n]
                if not _same_bits(got, ref):
                    raise VariantRejected(
                        f"{spec.label()} is not bit-identical to {other.spec.label()} on "
                        f"{s.name} at n={n} ({s.nth} slices): another arithmetic")
            for k, v in keep.items():
                case.buffers[k][...] = v

        if spec.op in ROW_WISE:
            # and at a count of EXACT_ROWS rows or more, when the slot's are fewer: another
            # summation order shows only in some rows of random data (rms_norm's unroll x vector
            # length: ~1 row in 13), so the decode program's one row passed it most times
            top = max(counts)
            rows = top * -(-EXACT_ROWS // top)
            case = op.make_case(spec, np.random.default_rng((slot, rows, 1)), rows)
            nword = op.args.index("n")
            for n in counts + [rows] * (rows > top):
                case.args[nword] = n
                differs(case, n, True)
            return
        for n in counts:
            differs(op.make_case(spec, np.random.default_rng((slot, n, 1)), n), n, False)

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


class _Check:
    """Compares a candidate's output with the generic kernel's; keeps the worst error."""

    def __init__(self, spec: KernelSpec, slot: Slot, rtol: float, atol: float):
        self.spec, self.slot, self.rtol, self.atol = spec, slot, rtol, atol
        self.worst = 0.0

    def __call__(self, name: str, n: int, got: np.ndarray, want: np.ndarray) -> None:
        where = f"{self.slot.name} at n={n} ({self.slot.nth} slices)"
        err = None
        if got.dtype != np.float32 and got.dtype == want.dtype and np.array_equal(got, want):
            err = 0.0                           # bit-exact ops (quantize: bytes), quickly
        elif got.dtype == want.dtype == np.float32 and self.atol > 0:
            # the common case in one float32 pass: |got - want| / (atol + rtol |want|) is
            # within 1e-6 relative of base.compare's float64 value; not finite when either
            # side has a NaN or an infinity (then: the checks below)
            with np.errstate(all="ignore"):
                e = np.abs(got - want)
                e /= np.float32(self.atol) + np.float32(self.rtol) * np.abs(want)
                err = float(e.max()) if e.size else 0.0
            if not np.isfinite(err):
                err = None
        if err is None:
            if np.issubdtype(got.dtype, np.floating) and not np.isfinite(got).all():
                bad = np.argwhere(~np.isfinite(got))[0]
                raise VariantRejected(f"{self.spec.label()} gives {got[tuple(bad)]} in {name}"
                                      f"{list(bad)} on {where}")
            err = compare(got, want, self.rtol, self.atol)
        self.worst = max(self.worst, err)
        if self.worst > 1.0:
            raise VariantRejected(f"{self.spec.label()} disagrees with the generic kernel on "
                                  f"{where} ({self.worst:.3g}x the tolerance)")


def _run(kernel: Kernel, args: np.ndarray, nth: int, threads: int) -> None:
    """Run every slice (ith of nth) of `kernel`, as the step runtime does: `threads` threads
    each run slices one after another (thread t: slices t, t + threads, ...; the runtime's
    threads claim them in whatever order, and any slice may run on any thread)."""
    threads = max(1, min(threads, nth))
    ptr = args.ctypes.data

    def work(t: int) -> None:
        for i in range(t, nth, threads):
            kernel.cfunc(ptr, i, nth)
    pool = [threading.Thread(target=work, args=(t,)) for t in range(1, threads)]
    for t in pool:
        t.start()
    work(0)
    for t in pool:
        t.join()


def _words(a: np.ndarray) -> np.ndarray:
    """The bytes of `a` as uint64 words where they divide evenly (8x fewer elements to scan),
    else as bytes."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return b.view(np.uint64) if b.size % 8 == 0 else b


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical arrays (NaN payloads included)."""
    return a.shape == b.shape and np.array_equal(_words(a), _words(b))


def _digest(a: np.ndarray) -> tuple[int, int]:
    """A 64-bit sum and xor of an input's words: any write that changes one word changes it
    (the inputs are not copied: a model head's weights are 136 MB)."""
    w = _words(a).astype(np.uint64, copy=False)
    return int(np.add.reduce(w, dtype=np.uint64)), int(np.bitwise_xor.reduce(w))


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
