"""The native step runtime (codegen/runtime.py, templates/runtime_generic.ll.j2) and the dispatch
table (reame/dispatch.py), with rms_norm / add kernels from the registry as the ops.

Runtime: programs of several ops with and without waits (an op without a wait must still be
complete before an op after the next wait reads it), 1-4 threads (more than this machine's
cores), 1 or 4 slices per thread, fewer slices than threads, thousands of steps in a row with
every result checked, per-op statistics (calls once per step per op, cycles positive), an empty
program, close() joining the workers and run() after close() raising.

Dispatch table: stage/commit (a staged kernel is not live until commit, one swap for all),
commit without staged changes is a no-op, verify() rejects a kernel of another op or shape,
rollback with and without history; the guard checks the counts a slot's program serves and is
NaN-safe (a variant wrong only above 4 rows, or giving NaN there, is refused; more of the guard in
tests/test_dispatch_guard.py); rollback is atomic with respect to a commit from the engine
thread.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import Kernel, build
from reame.codegen.registry import get_op
from reame.codegen.runtime import NativePool, Program, default_threads
from reame.dispatch import DispatchTable, VariantRejected

NATIVE = detect()
K = 320                     # not a multiple of 64 floats (add's block) nor of 16 lanes x unroll
N = 7                       # rows: fewer than 4 threads x 4 slices, so some slices are empty
HEAVY_K, HEAVY_N = 4096, 64


def kernel(op_name: str, level: str | None = None, family: str | None = None, **dims) -> Kernel:
    """The most specific variant of an op at a level (default: this machine's), built."""
    isa = detect(level) if level else NATIVE
    op = get_op(op_name)
    specs = [s for s in op.specs("F32", isa, **{**op.example_dims, **dims})
             if family is None or s.family == family]
    return build(specs[-1], isa)


def kernel_set(k: int) -> dict[str, Kernel]:
    return {"rms": kernel("rms_norm", K=k),
            "rms_generic": kernel("rms_norm", "generic", K=k),
            "add": kernel("add", K=k, bcast=0),
            "add_generic": kernel("add", "generic", K=k, bcast=0)}


@pytest.fixture(scope="module")
def kernels():
    return kernel_set(K)


@pytest.fixture(scope="module")
def heavy():
    """Ops big enough (64 x 4096 floats) that threads overlap inside them."""
    return kernel_set(HEAVY_K)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def rms_ref(x, w, eps=1e-6):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w


class Net:
    """Buffers, argument blocks and a program over a dispatch table.

    ops: (kernel key, input names, output name, wait). rms_norm reads (x, w), add reads (a, b).
    """

    def __init__(self, kernels, ops, slices=1, n=N, seed=0):
        rng = np.random.default_rng(seed)
        k_dim = kernels["rms"].spec.p["K"]
        self.n = n
        self.table = DispatchTable(capacity=16)
        self.buf = {name: np.full((n, k_dim), np.nan, np.float32)
                    for _, _, name, _ in ops}
        for _, ins, _, _ in ops:
            for i in ins:
                if i not in self.buf:
                    self.buf[i] = f32(rng, k_dim) if i.startswith("w") else f32(rng, n, k_dim)
        self.blocks, entries = [], []
        for j, (key, ins, out, wait) in enumerate(ops):
            k = kernels[key]
            slot = self.table.add(f"op{j}.{key}", k)
            args = get_op(k.spec.op).pack({**{a: self.buf[i] for a, i in
                                              zip(get_op(k.spec.op).args, ins)},
                                           get_op(k.spec.op).args[2]: self.buf[out]}, n=n)
            self.blocks.append(args)
            entries.append((slot, args.ctypes.data, wait, slices))
        self.ops = ops
        self.program = Program(self.table.table_ptr, self.table.active_ptr, self.table.capacity,
                               entries)
        self.inputs = [i for i in self.buf if i not in {o for _, _, o, _ in ops}]
        self.outputs = [o for _, _, o, _ in ops]

    def reference(self) -> dict[str, np.ndarray]:
        """float64 results of the ops, in order (each reads earlier float64 results)."""
        val = {k: v.astype(np.float64) for k, v in self.buf.items() if k in self.inputs}
        for key, ins, out, _ in self.ops:
            a, b = val[ins[0]], val[ins[1]]
            val[out] = rms_ref(a, b) if key.startswith("rms") else a + b
        return {o: val[o] for o in self.outputs}

    def reset_outputs(self):
        for o in self.outputs:
            self.buf[o].fill(np.nan)


def check_close(net, got: dict[str, np.ndarray], want: dict[str, np.ndarray]):
    for name in net.outputs:
        assert np.all(np.isfinite(got[name])), f"{name}: not every element written"
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


# ops: h = rms(x, w); y = h + r; z = rms(y, w2): each needs the previous one complete
CHAIN = [("rms", ("x", "w"), "h", True),
         ("add", ("h", "r"), "y", True),
         ("rms_generic", ("y", "w2"), "z", True)]
# ops 0-2 do not wait (0 and 1 are independent of each other and of 2); op 3 reads ops 0 and 1,
# so the wait after op 2 must cover all of ops 0-2; op 4 reads op 3
FANOUT = [("rms", ("x1", "w"), "h1", False),
          ("rms_generic", ("x2", "w"), "h2", False),
          ("add_generic", ("x1", "x2"), "s", True),
          ("add", ("h1", "h2"), "y", True),
          ("rms", ("y", "w2"), "z", True)]


def run_steps(pool, net, steps, nth=None, n_sets=3, seed=1):
    """`steps` steps, the inputs changing every step, every output checked each time: against
    the float64 reference for the first step of each input set, then bit for bit."""
    rng = np.random.default_rng(seed)
    sets = [{i: (f32(rng, *net.buf[i].shape)) for i in net.inputs} for _ in range(n_sets)]
    expected: list[dict | None] = [None] * n_sets
    for step in range(steps):
        s = step % n_sets
        for name, v in sets[s].items():
            np.copyto(net.buf[name], v)
        net.reset_outputs()
        pool.run(net.program.words, nth)
        got = {o: net.buf[o] for o in net.outputs}
        if expected[s] is None:
            check_close(net, got, net.reference())
            expected[s] = {o: v.copy() for o, v in got.items()}
        else:
            for o in net.outputs:
                if not np.array_equal(got[o], expected[s][o]):
                    bad = np.argwhere(~(got[o] == expected[s][o]))[:3].tolist()
                    pytest.fail(f"step {step}: {o} differs from the first run at {bad}")
    return expected


# ---- programs ----

@pytest.mark.parametrize("slices", [1, 4])
@pytest.mark.parametrize("nth", [1, 2, 3, 4])
@pytest.mark.parametrize("ops", [CHAIN, FANOUT], ids=["waits", "no-waits"])
def test_program_steps(kernels, ops, nth, slices):
    net = Net(kernels, ops, slices=slices)
    pool = NativePool(nth)
    try:
        run_steps(pool, net, steps=150)
    finally:
        pool.close()


def test_thousands_of_steps_more_threads_than_cores(kernels):
    nth = max(4, default_threads() + 2)
    net = Net(kernels, FANOUT, slices=4)
    pool = NativePool(nth)
    try:
        run_steps(pool, net, steps=3000, n_sets=5)
    finally:
        pool.close()


@pytest.mark.parametrize("nth,slices", [(2, 1), (3, 4), (4, 1)])
@pytest.mark.parametrize("ops", [CHAIN, FANOUT], ids=["waits", "no-waits"])
def test_heavy_ops_overlap_across_threads(heavy, ops, nth, slices):
    """Ops long enough that a thread is still inside one while others reach the next wait."""
    net = Net(heavy, ops, slices=slices, n=HEAVY_N)
    pool = NativePool(nth)
    try:
        run_steps(pool, net, steps=60)
    finally:
        pool.close()


def test_results_do_not_depend_on_threads_or_slices(kernels):
    nets = {}
    for nth, slices in ((1, 1), (3, 1), (2, 4), (4, 4)):
        net = Net(kernels, CHAIN, slices=slices, seed=3)
        pool = NativePool(nth)
        try:
            pool.run(net.program.words)
        finally:
            pool.close()
        nets[(nth, slices)] = {o: net.buf[o].copy() for o in net.outputs}
    first = nets[(1, 1)]
    for key, outs in nets.items():
        for o in outs:
            assert np.array_equal(outs[o], first[o]), (key, o)


def test_fewer_slices_than_pool_threads(kernels):
    """run(nth=k) on a bigger pool cuts each op into k x slices pieces; every thread may help."""
    net = Net(kernels, FANOUT, slices=1)
    pool = NativePool(4)
    try:
        for nth in (1, 2, 3, 4, 1):
            run_steps(pool, net, steps=20, nth=nth)
    finally:
        pool.close()


def test_empty_program():
    table = DispatchTable(capacity=4)
    prog = Program(table.table_ptr, table.active_ptr, table.capacity, [])
    assert len(prog) == 0
    pool = NativePool(3)
    try:
        for _ in range(10):
            pool.run(prog.words)
    finally:
        pool.close()


def test_last_op_always_waits():
    table = DispatchTable(capacity=4)
    prog = Program(table.table_ptr, table.active_ptr, table.capacity,
                   [(0, 0, False, 1), (0, 0, False, 300)])
    flags = [int(prog.words[8 + 8 * i + 2]) for i in range(2)]
    assert flags[0] & 1 == 0 and flags[1] & 1 == 1
    assert flags[0] >> 8 == 1 and flags[1] >> 8 == 255          # slices clamped to 1..255


def test_ops_without_a_slice_count_get_one_slice_per_thread(kernels):
    """(slot, args, wait) entries, as written before slices existed (bench/kernels.py)."""
    net = Net(kernels, CHAIN)
    words = Program(net.table.table_ptr, net.table.active_ptr, net.table.capacity,
                    [(i, b.ctypes.data, True) for i, b in enumerate(net.blocks)]).words
    assert np.array_equal(words, net.program.words)


# ---- statistics ----

def test_stats_count_calls_once_per_step_per_op(kernels):
    net = Net(kernels, FANOUT, slices=4)
    pool = NativePool(3)
    try:
        run_steps(pool, net, steps=5)                     # not sampled
        assert not net.table.stats.any()
        net.program.set_stats(net.table.stats)
        run_steps(pool, net, steps=40)
        calls = net.table.stats[:len(net.ops), 0].copy()
        assert calls.tolist() == [40] * len(net.ops)
        assert (net.table.stats[:len(net.ops), 1] > 0).all(), "cycles in every kernel"
        assert not net.table.stats[len(net.ops):].any(), "unused slots untouched"
        rows = net.table.slot_stats()
        assert [r["calls"] for r in rows] == [40] * len(net.ops)
        assert all(r["seconds"] > 0 and r["mean_us"] > 0 for r in rows)

        net.program.set_stats(None)                       # sampling off again
        run_steps(pool, net, steps=10)
        assert net.table.stats[:len(net.ops), 0].tolist() == calls.tolist()
        net.table.reset_stats()
        assert not net.table.stats.any()
    finally:
        pool.close()


# ---- the pool's life ----

def _close_in_time(pool, seconds=20.0):
    t = threading.Thread(target=pool.close)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "close() did not return"
    assert not any(w.is_alive() for w in pool._threads), "workers not joined"


@pytest.mark.parametrize("nth", [1, 2, 4])
def test_close_joins_workers_and_run_after_close_raises(kernels, nth):
    net = Net(kernels, CHAIN)
    pool = NativePool(nth)
    assert len(pool._threads) == nth - 1
    run_steps(pool, net, steps=3)
    _close_in_time(pool)
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(net.program.words)
    pool.close()                                          # a second close is a no-op


def test_close_right_after_start_and_after_idle_sleep(kernels):
    for _ in range(5):                                    # workers may not be in their loop yet
        _close_in_time(NativePool(4))
    pool = NativePool(3, spin=10)                         # workers go to sleep almost at once
    net = Net(kernels, CHAIN)
    run_steps(pool, net, steps=3)
    threading.Event().wait(0.05)
    run_steps(pool, net, steps=3)                         # woken from the futex
    _close_in_time(pool)


# ---- dispatch table ----

def test_dispatch_stage_commit_rollback(kernels):
    table = DispatchTable(capacity=8)
    live, other = kernels["rms"], kernels["rms_generic"]
    slot = table.add("blk.0.attn_norm", live)
    assert table.add("blk.0.attn_norm", other) == slot    # same name, same slot, unchanged
    assert table.live(slot) is live
    assert table.fns[slot] == table.fns[table.capacity + slot] == live.address

    # no staged change: commit is a no-op
    active = int(table.active[0])
    assert table.commit() is False
    assert int(table.active[0]) == active and table.swaps == 0

    table.stage(slot, other)                              # verified against the generic kernel
    assert other.symbol in table.slots[slot].verified
    assert table.live(slot) is live, "staged, not live"
    assert table.fns[active * table.capacity + slot] == live.address
    assert table.fns[(1 - active) * table.capacity + slot] == other.address

    assert table.commit() is True
    assert int(table.active[0]) == 1 - active and table.swaps == 1
    assert table.live(slot) is other and table.slots[slot].staged is None
    assert table.slots[slot].history == [live]
    assert table.fns[slot] == table.fns[table.capacity + slot] == other.address
    assert table.commit() is False and table.swaps == 1

    assert table.rollback(slot) is live
    assert table.live(slot) is other                      # until the next commit
    assert table.commit() is True
    assert table.live(slot) is live and table.slots[slot].history == []
    assert table.rollback(slot) is None                   # nothing left to roll back to


def test_dispatch_rollback_without_history(kernels):
    table = DispatchTable(capacity=4)
    slot = table.add("output_norm", kernels["rms"])
    assert table.rollback(slot) is None
    assert table.commit() is False


def test_dispatch_verify_rejects_another_op_or_shape(kernels):
    table = DispatchTable(capacity=4)
    slot = table.add("blk.0.ffn_norm", kernels["rms"])
    other_shape = kernel("rms_norm", "generic", K=K + 64)
    for wrong in (kernels["add"], other_shape):
        with pytest.raises(VariantRejected, match="does not fit slot blk.0.ffn_norm"):
            table.verify(slot, wrong)
        with pytest.raises(VariantRejected):
            table.stage(slot, wrong)
        assert table.slots[slot].staged is None and table.commit() is False
    assert table.verify(slot, kernels["rms_generic"]) <= 1.0


def test_program_runs_the_committed_kernel_only(kernels):
    """A step reads the live copy of the table: a staged kernel changes nothing until commit,
    and commit changes every later step (here a deliberately wrong kernel, staged unverified)."""
    net = Net(kernels, [("add", ("a", "b"), "y", True)])
    slot = 0
    bias_add = kernel("add", "generic", K=K, bcast=1)     # y = a + b[0]: another computation
    pool = NativePool(2)
    try:
        def step():
            net.reset_outputs()
            pool.run(net.program.words)
            return net.buf["y"].copy()
        a, b = net.buf["a"], net.buf["b"]
        assert np.array_equal(step(), a + b)
        net.table.stage(slot, bias_add, verify=False)
        assert np.array_equal(step(), a + b), "a staged kernel must not run before commit"
        assert net.table.commit()
        assert np.array_equal(step(), a + b[0]), "the committed kernel runs at the next step"
        assert net.table.rollback(slot) is kernels["add"]
        assert np.array_equal(step(), a + b[0])
        assert net.table.commit()
        assert np.array_equal(step(), a + b)
    finally:
        pool.close()


def test_dispatch_stage_over_a_pending_rollback_keeps_history(kernels):
    table = DispatchTable(capacity=4)
    k1, k2 = kernels["rms"], kernels["rms_generic"]
    # a third variant: another native one, or (where native has a single tile, as on
    # AArch64) the generic family with twice its lanes
    others = [s for s in get_op("rms_norm").specs("F32", NATIVE, K=K, eps=1e-6)
              if s not in (k1.spec, k2.spec)]
    k3 = build(others[0] if others else k2.spec.with_params(vl=2 * k2.spec.p["vl"]), NATIVE)
    slot = table.add("blk.1.attn_norm", k1)
    table.stage(slot, k2)
    table.commit()                                        # live k2, history [k1]
    assert table.rollback(slot) is k1                     # pending: back to k1 ...
    table.stage(slot, k3)                                 # ... replaced by k3 before the commit
    table.commit()
    assert table.live(slot) is k3
    assert table.slots[slot].history == [k1, k2]


# ---- the numeric guard: every count a slot serves, NaN-safe; rollback atomic with commit ----

def wrong_above(inner: Kernel, limit: int, nan: bool = False) -> Kernel:
    """A kernel that runs `inner` (op add: args a, b, y, n) and then spoils y[0, 0] when the
    step has more than `limit` rows: a variant wrong only for larger steps."""
    import ctypes
    from reame.codegen.compiler import KERNEL_CFUNC

    def run(args, ith, nth):
        inner.cfunc(args, ith, nth)
        words = ctypes.cast(args, ctypes.POINTER(ctypes.c_int64))
        if words[3] > limit and ith == 0:
            y = ctypes.cast(words[2], ctypes.POINTER(ctypes.c_float))
            y[0] = float("nan") if nan else y[0] + 1.0
    cb = KERNEL_CFUNC(run)
    k = Kernel(inner.spec, inner.symbol + "_wrong", ctypes.cast(cb, ctypes.c_void_p).value,
               inner.ir)
    k._keep = cb
    return k


@pytest.mark.parametrize("nan", [False, True])
def test_guard_checks_every_count_the_slot_serves(kernels, nan):
    """A variant correct at 3 rows but wrong above 4 passes a 3-row check (the old guard) and is
    refused by the check at the counts of the slot's program (5..16 here); a NaN where the
    generic kernel gives a number is refused, never compared as 'not greater than'."""
    bad = wrong_above(kernels["add"], 4, nan)
    old = DispatchTable(capacity=4)
    old.add("blk.0.attn_q.bias", kernels["add"])            # counts 3..3: the old guard
    assert old.verify(0, bad) <= 1.0
    table = DispatchTable(capacity=4)
    slot = table.add("blk.0.attn_q.bias@16", kernels["add"], (5, 16))
    assert table.slots[slot].counts() == (5, 6, 15, 16)
    with pytest.raises(VariantRejected, match="at n=5"):
        table.stage(slot, bad)
    assert table.slots[slot].staged is None and table.commit() is False
    assert table.verify(slot, kernels["add_generic"]) <= 1.0


def test_engine_slots_know_their_counts(kernels):
    """Each program's slots are checked at that program's step sizes (n for token ops, rows
    for the head), the q/k norms at tokens x heads (multiples of the heads only), cut as the
    runtime cuts them (a heavy op: 4 slices per thread of the table's threads)."""
    from reame.codegen.ops.base import HEAVY_SLICES
    from reame.jit.program import M, N, ProgramBuilder
    table = DispatchTable(capacity=8, threads=3)
    P = ProgramBuilder(table, {}, "16", NATIVE, ranges={"n": (5, 16), "m": (1, 4)})
    x = np.zeros((16 * 2, K), np.float32)
    w = np.ones(K, np.float32)
    P.op("tok", kernels["rms"].spec, x=x, w=w, y=x, n=N)
    P.op("head", kernels["rms"].spec, x=x, w=w, y=x, n=M)
    P.op("qnorm", kernels["rms"].spec, x=x, w=w, y=x, n=N * 2)
    mm = get_op("matmul").specs("F32", detect("generic"), M=8, K=K, acc=0)[-1]   # nt = 4
    P.op("ffn_up", mm, w=np.zeros((8, K), np.float32), x=x, y=x, n=N)
    assert [s.counts() for s in table.slots] == [(5, 6, 15, 16), (1, 2, 3, 4),
                                                 (10, 12, 30, 32),
                                                 (5, 6, 7, 8, 9, 15, 16)]
    assert [(s.slices, s.nth) for s in table.slots] == [(1, 3)] * 3 + [(HEAVY_SLICES,
                                                                        3 * HEAVY_SLICES)]


def test_compare_is_nan_safe():
    from reame.codegen.ops.base import compare
    inf, nan = float("inf"), float("nan")
    assert compare([1.0, 2.0], [1.0, 2.0], 0, 0) == 0.0
    assert compare([nan, inf], [nan, inf], 1e-5, 1e-5) == 0.0      # the same special values
    assert compare([nan], [1.0], 1e-5, 1e-5) == inf                 # NaN is not "close"
    assert compare([1.0], [nan], 1e-5, 1e-5) == inf
    assert compare([inf], [1e30], 1e-5, 1e-5) == inf
    assert compare([1.0 + 1e-6], [1.0], 1e-6, 0) == pytest.approx(1.0, rel=1e-3)
    assert compare([0.0, 0.0], [0.0], 1, 1) == inf                  # shapes differ


def test_rollback_is_atomic_with_commit(kernels):
    """A commit by the engine thread while rollback() runs (here forced into the moment right
    after the previous variant is staged, where the old rollback had not yet marked it as a
    rollback) must not record the rolled-back variant in the history."""
    k1, k2 = kernels["rms"], kernels["rms_generic"]
    table = DispatchTable(capacity=4)
    slot = table.add("blk.0.attn_norm", k1)
    table.stage(slot, k2, verify=False)
    table.commit()                                           # live k2, history [k1]
    real_stage = table.stage

    def stage_then_commit(*a, **kw):                         # the engine commits meanwhile
        real_stage(*a, **kw)
        t = threading.Thread(target=table.commit)
        t.start()
        t.join(1.0)
    table.stage = stage_then_commit
    assert table.rollback(slot) is k1
    table.commit()
    s = table.slots[slot]
    assert s.kernel is k1 and s.history == [] and not s.rolling_back, s.history


# ---- the cycle counter on every architecture ----

def _function_asm(asm: str, name: str) -> str:
    start = asm.index(f"\n{name}:")
    return asm[start:asm.index(".Lfunc_end", start)]


def test_aarch64_runtime_reads_the_generic_timer():
    """The runtime compiled for AArch64 (a recorded Neoverse N1, on any host): op times come
    from CNTVCT_EL0 (the counter read around every timed kernel call and exported for
    calibration) and the frequency from CNTFRQ_EL0. Catches llvm.readsteadycounter, which
    LLVM 22 lowers to `mov x0, xzr` there (a counter stuck at 0: slot_stats divided by 0)."""
    import llvmlite.binding as llvm

    from reame.codegen.compiler import LLVM_LOCK
    from reame.codegen.isa import host_isa
    from reame.codegen.runtime import runtime_ir
    isa = host_isa("aarch64", "neoverse-n1", "+neon",
                   os_inputs={"hwcap": 0x10119FFF, "hwcap2": 0})
    prefix, ir = runtime_ir(isa, "Linux")
    with LLVM_LOCK:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        tm = llvm.Target.from_triple("aarch64-unknown-linux-gnu").create_target_machine(
            cpu=isa.cpu_name, features=isa.features, opt=3)
        mod = llvm.parse_assembly(ir)
        mod.triple = tm.triple
        mod.verify()
        asm = tm.emit_assembly(mod)
    cycles = _function_asm(asm, "cycles")          # what the timed kernel calls and _cycles use
    assert re.search(r"mrs\s+x0, CNTVCT_EL0", cycles) and "xzr" not in cycles
    assert re.search(r"bl\s+cycles\b", _function_asm(asm, f"{prefix}_cycles"))
    assert re.search(r"mrs\s+x\d+, CNTFRQ_EL0", _function_asm(asm, f"{prefix}_hz"))


def test_cycle_hz_converts_the_counter_to_seconds():
    """cycle_hz() (the stated frequency on AArch64, measured on x86) turns counter ticks into
    seconds within 25% of perf_counter. Catches a counter that does not tick, or a frequency
    off by a factor (say CNTFRQ taken as kHz)."""
    import ctypes
    import time

    from reame.codegen.runtime import _runtime, cycle_hz
    read = ctypes.CFUNCTYPE(ctypes.c_int64)(_runtime(detect("generic"))["cycles"])
    hz = cycle_hz()
    assert hz > 0
    c0, t0 = read(), time.perf_counter()
    time.sleep(0.1)
    c1, t1 = read(), time.perf_counter()
    assert (c1 - c0) / hz == pytest.approx(t1 - t0, rel=0.25)


def test_slot_stats_with_a_counter_that_does_not_tick(kernels, monkeypatch):
    """A counter of frequency 0 gives zero times, not ZeroDivisionError (bench.engine crashed
    on AArch64). Catches slot_stats dividing by the frequency unguarded."""
    import reame.dispatch as dispatch
    net = Net(kernels, CHAIN)
    net.table.stats[:len(net.ops)] = (3, 1000)
    monkeypatch.setattr(dispatch, "cycle_hz", lambda: 0.0)
    rows = net.table.slot_stats()
    assert [(r["calls"], r["cycles"], r["seconds"], r["mean_us"]) for r in rows] == \
        [(3, 1000, 0.0, 0.0)] * len(net.ops)
