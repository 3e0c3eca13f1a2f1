"""What an op declares, and the numerical check every variant must pass before it is used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..isa import ISA
from ..kernels import Kernel, build, pack_args
from ..spec import KernelSpec


ANY_TOKENS = 1 << 30        # Variant.max_tokens: no bound


@dataclass(frozen=True)
class Variant:
    family: str                               # template: templates/{op}_{family}.ll.j2
    min_level: str = "generic"                # lowest ISA level it may be built for
    dtypes: tuple[str, ...] = ("F32",)        # tensor types it implements
    tiles: tuple[dict, ...] = ({},)           # tile configurations to choose between
    doc: str = ""
    min_tokens: int = 1                       # programs for fewer tokens never start on it
    max_tokens: int = ANY_TOKENS              # nor programs for more tokens
    below: str = ""                           # if set: only at levels without this one

    def usable(self, isa: ISA) -> bool:
        return isa.has(self.min_level) and not (self.below and isa.has(self.below))


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> float:
    """The worst error of `got` against `want` in units of the tolerance (<= 1 passes).
    NaN-safe: a non-finite value where the reference is finite (or a NaN where it is not NaN)
    is an infinite error, never a pass; equal values (including equal infinities) are 0."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    bad = ~same & ~(np.isfinite(got) & np.isfinite(want))
    if bad.any():
        return float("inf")
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(got - want))
        tol = atol + rtol * np.where(np.isfinite(want), np.abs(want), 0.0)
        err = np.where(diff == 0, 0.0, diff / np.where(tol > 0, tol, np.inf))
    return float(err.max()) if err.size else 0.0


@dataclass
class Case:
    """One numerical test case: named buffers, the argument block that points at them, and
    which buffers the kernel writes."""
    buffers: dict[str, np.ndarray]
    args: np.ndarray
    outputs: tuple[str, ...]
    meta: dict = field(default_factory=dict)


HEAVY_SLICES = 4      # slices per thread of the matrix products and attention (Op.slices)


@dataclass
class Op:
    name: str
    args: tuple[str, ...]                     # argument block layout, one 64-bit word each
    dims: tuple[str, ...]                     # compile-time dimensions (spec params)
    variants: tuple[Variant, ...]
    make_case: Callable[[KernelSpec, np.random.Generator, int], Case]
    reference: Callable[[KernelSpec, Case], dict[str, np.ndarray]]
    tolerance: Callable[[str], tuple[float, float]] = lambda dtype: (1e-5, 1e-5)  # (rtol, atol)
    example_dims: dict = field(default_factory=dict)   # dims for --dump/--list when none given
    doc: str = ""
    # whether a tile can serve these dims (e.g. an attention key tile must divide the KV block)
    fits: Callable[[dict, dict], bool] = lambda tile, dims: True
    # slices per thread of a step program's op: the heavy ops are cut finer and claimed
    # dynamically, which evens out threads running at different speeds; element-wise ops one
    slices: int = 1
    # which family a program for n_tokens tokens starts on when the most specific level has
    # several (prefers(family, n_tokens, dims) -> bool; None: the tile cost alone decides): a
    # measured policy, documented where it is declared (select.choose applies it)
    prefers: Callable[[str, int, dict], bool] | None = None

    def tiles(self, variant: Variant, dims: dict) -> list[dict]:
        """The tiles of `variant` that can serve `dims`."""
        return [t for t in variant.tiles if self.fits(t, dims)]

    def specs(self, dtype: str, isa: ISA, **dims: Any) -> list[KernelSpec]:
        """Every variant x tile configuration of this op for `dtype` that `isa` can run."""
        out = []
        for v in self.variants:
            if dtype in v.dtypes and v.usable(isa):
                for tile in self.tiles(v, dims):
                    out.append(KernelSpec.make(self.name, dtype, v.family, isa.level, **tile, **dims))
        return out

    def dtypes(self) -> list[str]:
        seen: list[str] = []
        for v in self.variants:
            seen += [d for d in v.dtypes if d not in seen]
        return seen

    def pack(self, buffers: dict[str, np.ndarray], **ints) -> np.ndarray:
        words = [buffers[a] if a in buffers else ints[a] for a in self.args]
        return pack_args(words)

    def check(self, kernel: Kernel, rng: np.random.Generator | None = None, n: int = 3,
              nth: int = 1) -> tuple[bool, float]:
        """Run `kernel` on a random case and compare with the reference: (ok, worst error
        relative to the tolerance; <= 1 passes)."""
        rng = rng or np.random.default_rng(0)
        case = self.make_case(kernel.spec, rng, n)
        expected = self.reference(kernel.spec, case)
        kernel.run_threads(case.args, nth)
        rtol, atol = self.tolerance(kernel.spec.dtype)
        worst = 0.0
        for name in case.outputs:
            got, want = case.buffers[name], expected[name]
            if not np.all(np.isfinite(got)):   # the random cases have finite results only
                return False, float("inf")
            worst = max(worst, compare(got, want, rtol, atol))
        return worst <= 1.0, worst


def build_checked(op: Op, spec: KernelSpec, isa: ISA | None = None) -> Kernel:
    k = build(spec, isa)
    ok, worst = op.check(k)
    if not ok:
        raise AssertionError(f"{spec.label()} disagrees with the reference ({worst:.3g}x tolerance)")
    return k


def row_panel_case(base: "Op"):
    """make_case and reference of an op with `base`'s contract except `w`: base's weights
    repacked into the row-panel layout (codegen/panel_layout.py; M a multiple of 16). The case
    keeps the GGUF rows in meta["w_gguf"], which the reference reads."""
    from .. import panel_layout

    def make_case(spec: KernelSpec, rng: np.random.Generator, n: int) -> Case:
        M = spec.p["M"]
        if M % panel_layout.PANEL_ROWS:
            raise ValueError(f"{spec.op} needs M a multiple of {panel_layout.PANEL_ROWS}, not {M}")
        case = base.make_case(spec, rng, n)
        w = case.buffers["w"]
        bufs = {**case.buffers, "w": panel_layout.repack(w.reshape(M, -1), spec.dtype)}
        return Case(bufs, base.pack(bufs, n=n), case.outputs, {**case.meta, "w_gguf": w})

    def reference(spec: KernelSpec, case: Case) -> dict:
        gguf = Case({**case.buffers, "w": case.meta["w_gguf"]}, case.args, case.outputs,
                    case.meta)
        return base.reference(spec, gguf)

    return make_case, reference
