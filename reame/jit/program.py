"""Building a step program: op sites, their argument blocks, and the words that change per step.

Every op site gets a dispatch-table slot (named like the GGUF tensor it reads, plus the program's
label: `blk.3.ffn_down.weight@1`)
and an argument block inside one int64 array. Words that depend on the step (token count `n`,
logits rows `m`, and multiples of them) are recorded so the engine can set them all with a few
numpy assignments before launching the step.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .. import progress
from ..codegen import registry
from ..codegen.kernels import Kernel, build
from ..codegen.runtime import Program, aligned_zeros
from ..codegen.spec import KernelSpec
from ..dispatch import DispatchTable
from ..pace import checkpoint


class Dyn:
    """A per-step integer: `n` tokens, `m` logits rows, `d` decode rows (the batch's first rows:
    generated tokens and drafts) or `p` prompt rows (the rest), times a constant factor; with
    `at`, an array, the address of its element factor * value (bytes): a pointer that moves
    past the decode rows."""

    def __init__(self, name: str, factor: int = 1, at: np.ndarray | None = None):
        self.name, self.factor, self.at = name, factor, at

    def __mul__(self, k: int) -> "Dyn":
        return Dyn(self.name, self.factor * k, self.at)

    def base(self) -> int:
        return 0 if self.at is None else self.at.ctypes.data


N, M, D, P = Dyn("n"), Dyn("m"), Dyn("d"), Dyn("p")


class ProgramBuilder:
    def __init__(self, table: DispatchTable, kernels: dict, label: str, isa,
                 ranges: dict | None = None):
        """`ranges`: the values each per-step word takes in this program ({"n": (lo, hi), "m":
        (lo, hi)}), so that every slot's candidate variants are checked at those counts."""
        self.table, self.kernels, self.label, self.isa = table, kernels, label, isa
        self.ranges = ranges or {}
        self.ops: list[tuple[int, list, bool, int]] = []   # (slot, words, wait after, slices)

    def kernel(self, spec: KernelSpec) -> Kernel:
        if spec not in self.kernels:
            checkpoint()
            progress.note(f"compiling {spec.label()}")
            self.kernels[spec] = build(spec, self.isa)
        return self.kernels[spec]

    def op(self, site: str, spec: KernelSpec, barrier: bool = True, **args) -> int:
        """Add an op: `args` maps the op's argument names to arrays, ints or Dyn words.
        `barrier=False`: the next op does not read this one's output, no need to wait."""
        checkpoint()                    # a model loading beside others: let them step
        words = [args[a] for a in registry.get_op(spec.op).args]
        count = args.get("n")
        lo, hi = self.ranges.get(count.name, (3, 3)) if isinstance(count, Dyn) else (3, 3)
        f = count.factor if isinstance(count, Dyn) else 1
        slices = registry.get_op(spec.op).slices      # the op file's declaration
        slot = self.table.add(f"{site}@{self.label}", self.kernel(spec), (lo, hi), step=f,
                              slices=slices)
        self.ops.append((slot, words, barrier, slices))
        return len(self.ops) - 1

    def no_barrier_before_next(self) -> None:
        """The last op and the next one are independent (they read the same inputs and write
        different outputs): threads may go on without waiting."""
        slot, words, _, slices = self.ops[-1]
        self.ops[-1] = (slot, words, False, slices)

    def barrier_after_last(self) -> None:
        slot, words, _, slices = self.ops[-1]
        self.ops[-1] = (slot, words, True, slices)

    def finish(self) -> "StepProgram":
        sizes = [len(w) for _, w, _, _ in self.ops]
        block = aligned_zeros(max(1, sum(sizes)))
        dyn = defaultdict(lambda: ([], [], []))       # name -> (indices, factors, bases)
        keep = []                                     # arrays referenced by the blocks
        offsets, pos = [], 0
        for (_, words, _, _), size in zip(self.ops, sizes):
            offsets.append(pos)
            for j, w in enumerate(words):
                if isinstance(w, Dyn):
                    dyn[w.name][0].append(pos + j)
                    dyn[w.name][1].append(w.factor)
                    dyn[w.name][2].append(w.base())
                    if w.at is not None:
                        keep.append(w.at)
                elif isinstance(w, np.ndarray):
                    block[pos + j] = w.ctypes.data
                    keep.append(w)
                else:
                    block[pos + j] = int(w)
            pos += size
        base = block.ctypes.data
        prog = Program(self.table.table_ptr, self.table.active_ptr, self.table.capacity,
                       [(slot, base + 8 * off, bar, slices)
                        for (slot, _, bar, slices), off in zip(self.ops, offsets)])
        self.table.attach(prog)
        dyn_arrays = {k: (np.asarray(i, np.int64), np.asarray(f, np.int64),
                          np.asarray(b, np.int64)) for k, (i, f, b) in dyn.items()}
        return StepProgram(prog, block, dyn_arrays, keep, [s for s, _, _, _ in self.ops],
                           [base + 8 * off for off in offsets])


class StepProgram:
    def __init__(self, program: Program, block: np.ndarray, dyn: dict, keep: list, slots: list,
                 arg_addrs: list | None = None):
        self.program, self.block, self.dyn, self._keep, self.slots = program, block, dyn, keep, slots
        self.arg_addrs = arg_addrs or []      # address of each op's argument block
        self._last = None

    def set(self, n: int, m: int, d: int = 0) -> None:
        """Write this step's n tokens, m logits rows and d decode rows (p = n - d prompt rows)
        into every argument word that depends on them (skipped when they did not change since
        the last step)."""
        if (n, m, d) == self._last:
            return
        self._last = (n, m, d)
        for name, v in (("n", n), ("m", m), ("d", d), ("p", n - d)):
            if name in self.dyn:
                idx, factor, base = self.dyn[name]
                self.block[idx] = base + factor * v

    def __len__(self) -> int:
        return len(self.program)
