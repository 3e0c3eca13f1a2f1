"""`KernelPlan`: what the adaptive runtime may read and change of an engine's kernels, and nothing
else of the engine.

The JIT engine runs each step's ops through a dispatch table (reame/dispatch.py) whose slots a
tuner can restage with other variants; the runtime times a step's ops to compare them. Before
this interface the runtime and the server reached into the engine (`engine._bucket_of`,
`engine.time_next = True`, `engine.table.stats[...]`, `hasattr(engine, "table")`). An engine
now says `kernel_plan`: a KernelPlan when its kernels can be tuned (the JIT engine), None when
they cannot (the reference engine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from .codegen.isa import ISA
    from .codegen.kernels import Kernel
    from .codegen.spec import KernelSpec
    from .dispatch import DispatchTable


class KernelPlan(Protocol):
    isa: "ISA"                        # the level the kernels are built for
    # the live slots, one per op site of every program (named `<site>@<bucket>`, as the plans
    # of reame/jit/plan.py list them): the one way the plan changes is table.stage(slot,
    # kernel) (a variant swapped in at the next step boundary, checked first) and rollback
    table: "DispatchTable"
    buckets: Sequence[int]            # the step programs, by the most tokens each runs

    def program_of(self, n_tokens: int) -> int:
        """The step program (its token bucket) a decode step of `n_tokens` tokens runs."""

    def program_for(self, batch) -> tuple[int, int]:
        """(the program a reame.batch.Batch runs, its decode rows): a lone prompt row runs
        the next program."""

    def time_next_step(self) -> None:
        """Time every op of the next forward pass (into the table's stats)."""

    def slot_cycles(self, slots: Sequence[int]) -> float:
        """CPU cycles timed so far in these slots (summed)."""

    def kernel(self, spec: "KernelSpec") -> "Kernel":
        """The kernel of a codegen.spec.KernelSpec, built once and kept."""
