"""The dispatch table's guard (reame/dispatch.py, DispatchTable.verify) against candidates wrong
in ways the earlier guard missed, each a wrapper around a real kernel:

- wrong at one residue of the count modulo its token tile, which the earlier five counts
  (lo, lo + 1, the middle, hi - 1, hi) never produce: refused, because every count from lo to
  lo + the candidate's largest count tile is checked;
- wrong only in slices past the second: refused, because the candidate runs cut into the nth
  the step runtime uses for the slot (slices per thread x threads: 4 x 2 for a matmul here),
  which a real step on the native pool is shown to use, not two slices;
- a NaN or infinity in one output element where the generic kernel gives the same value (a
  comparison that treats equal non-finite values as equal passes it): refused;
- writing rows past the step's count (a token tile rounded up): refused.
Each test names the wrong implementation of the guard it catches (checked by mutation).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from reame import dispatch
from reame.codegen.compiler import KERNEL_CFUNC
from reame.codegen.isa import detect
from reame.codegen.kernels import Kernel, build
from reame.codegen.registry import get_op
from reame.codegen.runtime import NativePool
from reame.dispatch import DispatchTable, VariantRejected, check_counts

GENERIC = detect().at("generic")
M, K = 256, 256              # matmul_q8a rows and depth: small, 8 row ranges of 32 at nth = 8
TILE = 4                     # the generic matmul_q8a's token tile nt = 4


def matmul(nt: int, acc: int = 0) -> Kernel:
    """The portable matmul_q8a (Q8_0) with token tile nt, built."""
    spec = next(s for s in get_op("matmul_q8a").specs("Q8_0", GENERIC, M=M, K=K, acc=acc)
                if s.p["nt"] == nt)
    return build(spec, GENERIC)


class Wrapper:
    """A candidate variant: `run(words, ith, nth)` is called for each slice with the argument
    block as int64 words (matmul_q8a: w, xq, y, n); it may call the real kernel `inner`."""

    def __init__(self, inner: Kernel, run, name: str):
        self.inner, self.run = inner, run
        self.calls: list[tuple[int, int]] = []        # (ith, nth) of each call
        self.cb = KERNEL_CFUNC(self._call)
        self.kernel = Kernel(inner.spec, f"{inner.symbol}_{name}",
                             ctypes.cast(self.cb, ctypes.c_void_p).value, inner.ir)
        self.kernel._keep = self

    def _call(self, args, ith, nth):
        self.calls.append((ith, nth))
        self.run(ctypes.cast(args, ctypes.POINTER(ctypes.c_int64)), args, ith, nth)


def y_of(words) -> ctypes.POINTER:
    return ctypes.cast(words[2], ctypes.POINTER(ctypes.c_float))


def test_a_variant_wrong_at_one_residue_of_its_tile_is_refused():
    """A variant right at every count except those = 3 mod its token tile (4) passes a check
    at the earlier five counts of a program serving 17..50 (17, 18, 33, 49, 50: residues 1 and
    2 only) and is refused at n = 19 by the check of every count from lo to lo + the tile.
    Catches: the old check_counts (lo, lo + 1, middle, hi - 1, hi) for the candidate's counts."""
    inner = matmul(TILE)

    def run(words, args, ith, nth):
        if ith == 0:                                  # the whole op in slice 0, then spoiled
            inner.cfunc(args, 0, 1)
            if words[3] % TILE == 3:
                y_of(words)[0] += 1.0
    bad = Wrapper(inner, run, "r3")
    table = DispatchTable(capacity=4, threads=2)
    slot = table.add("blk.0.ffn_up.weight@50", matmul(1), (17, 50), slices=4)
    s = table.slots[slot]
    with pytest.raises(VariantRejected, match="at n=19"):
        table.stage(slot, bad.kernel)
    assert s.staged is None and bad.kernel.symbol not in s.verified
    old = (17, 18, 33, 49, 50)                        # the earlier guard's counts here
    assert {n % TILE for n in old} == {1, 2}
    assert s.counts(bad.kernel.spec) == (17, 18, 19, 20, 21, 49, 50)
    assert table.verify(slot, inner) <= 1.0           # the unspoiled tile passes


def test_a_variant_wrong_past_the_second_slice_is_refused():
    """A matmul slot of a step program runs cut into slices x threads = 4 x 2 pieces (the
    native runtime calls the kernel with nth = 8, shown on a real step); a variant that skips
    the work of slices 2..7 is right when run as 2 slices and is refused when run as 8.
    Catches: a guard that runs the candidate with run_threads(args, 2) (or any nth other than
    the slot's)."""
    from reame.codegen.ops.base import HEAVY_SLICES
    from reame.jit.program import N, ProgramBuilder
    inner = matmul(TILE, acc=1)
    case = get_op("matmul_q8a").make_case(inner.spec, np.random.default_rng(0), 4)
    table = DispatchTable(capacity=4, threads=2)
    P = ProgramBuilder(table, {inner.spec: inner}, "4", GENERIC, ranges={"n": (2, 4)})
    P.op("blk.0.ffn_down", inner.spec, w=case.buffers["w"], xq=case.buffers["xq"],
         y=case.buffers["y"], n=N)
    prog = P.finish()
    s = table.slots[0]
    assert (s.slices, s.threads, s.nth) == (HEAVY_SLICES, 2, 2 * HEAVY_SLICES)

    def first_two(words, args, ith, nth):
        if ith < 2:
            inner.cfunc(args, ith, nth)
    bad = Wrapper(inner, first_two, "two")
    # the nth a real step calls the slot's kernel with
    spy = Wrapper(inner, lambda words, args, ith, nth: inner.cfunc(args, ith, nth), "spy")
    table.stage(0, spy.kernel, verify=False)
    table.commit()
    pool = NativePool(table.threads, GENERIC)
    try:
        prog.set(n=4, m=1)
        pool.run(prog.program.words)
    finally:
        pool.close()
    assert {nth for _, nth in spy.calls} == {s.nth}
    # two slices: right (what a guard running two slices sees)
    args = case.args.copy()
    y0 = case.buffers["y"].copy()
    bad.kernel.run_threads(args, 2)
    two = case.buffers["y"].copy()
    case.buffers["y"][...] = y0
    inner.run_threads(args, 2)
    assert np.array_equal(two, case.buffers["y"])
    with pytest.raises(VariantRejected, match=r"\(8 slices\)"):
        table.verify(0, bad.kernel)
    assert {nth for _, nth in bad.calls} >= {8}


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_output_is_refused_even_where_the_generic_agrees(monkeypatch, value):
    """A variant that writes NaN (or +inf) into one output element is refused even when the
    generic kernel gives the same value there (a generic kernel wrong at that element): the
    comparison alone counts equal non-finite values as equal and would pass it.
    Catches: a guard without the explicit check that every output value is finite."""
    from reame.codegen.ops.base import compare
    op = get_op("matmul_q8a")
    inner = matmul(TILE)
    real_generic = dispatch._generic_kernel(op, inner.spec)

    def poisoned(k: Kernel):
        def run(words, args, ith, nth):
            if ith == 0:                              # the whole op, then one value spoiled
                k.cfunc(args, 0, 1)
                y_of(words)[M + 1] = value            # token 1, row 1
        return run
    bad = Wrapper(inner, poisoned(inner), "bad")
    generic = Wrapper(real_generic, poisoned(real_generic), "generic")
    # the comparison alone passes it: equal non-finite values count as equal
    case = op.make_case(inner.spec, np.random.default_rng(1), 6)
    bad.kernel.run_threads(case.args, 1)
    got = case.buffers["y"].copy()
    generic.kernel.run_threads(case.args, 1)
    assert not np.isfinite(got).all() and compare(got, case.buffers["y"], 2e-5, 4e-5) <= 1.0

    monkeypatch.setattr(dispatch, "_generic_kernel", lambda op, spec: generic.kernel)
    table = DispatchTable(capacity=4, threads=2)
    slot = table.add("blk.0.attn_output.weight@8", matmul(1), (5, 8), slices=4)
    with pytest.raises(VariantRejected, match="gives (nan|inf) in y"):
        table.stage(slot, bad.kernel)
    assert table.slots[slot].staged is None


def test_a_variant_writing_past_the_count_is_refused():
    """A variant that rounds the count up to its token tile (computes, and stores, whole tiles)
    is right on every row below the count but writes rows the step does not own: refused.
    Catches: a guard that compares only the first n rows (or makes cases exactly n rows long,
    where such a write lands outside the buffer unseen)."""
    inner = matmul(TILE)

    def rounded(words, args, ith, nth):
        n = words[3]
        words[3] = -(-n // TILE) * TILE
        try:
            inner.cfunc(args, ith, nth)
        finally:
            words[3] = n
    bad = Wrapper(inner, rounded, "up")
    table = DispatchTable(capacity=4, threads=1)
    slot = table.add("blk.0.ffn_gate.weight@16", matmul(1), (9, 16), slices=1)
    with pytest.raises(VariantRejected, match="writes past row 9"):
        table.verify(slot, bad.kernel)


def test_check_counts_cover_every_residue_and_the_edges():
    assert check_counts(17, 512) == (17, 18, 511, 512)
    assert check_counts(17, 512, tile=8) == (*range(17, 26), 511, 512)
    assert check_counts(2, 4, tile=8) == (2, 3, 4)               # fewer counts than the tile
    assert check_counts(5, 16, step=14) == (70, 84, 210, 224)    # q norm: tokens x heads
    for lo, hi, tile in ((17, 512, 8), (9, 16, 6), (17, 50, 12)):
        ns = check_counts(lo, hi, tile)
        assert {n % tile for n in ns} == set(range(tile)), (lo, hi, tile)
        assert ns[0] == lo and ns[-2:] == (hi - 1, hi)
    chunk = check_counts(257, 512, tile=16, chunk=256)           # amx: chunks of 256 tokens
    assert {256 + 1, 512} <= set(chunk) and 256 not in chunk
