"""Which kernel variant an op site starts with (before the adaptive runtime measures others).

Policy: the most specific family this ISA level can run (the variant with the highest minimum
level), and within it the tile that fits the step's phase: the smallest token tile for single-
token decode (one weight-row stream per thread reaches the bandwidth ceiling), the largest for
prefill (reuse each weight block across many tokens), the middle for batched decode. Quantised
weights go through the integer path (activations quantised to Q8A, `matmul_q8`) when the level
has a kernel for that type; float weights through `matmul`, with the GEMM family for prefill.
"""

from __future__ import annotations

from ..codegen import registry
from ..codegen.isa import ISA
from ..codegen.spec import KernelSpec

PHASES = ("single", "batch", "prefill")
TILE_KEYS = ("nt", "toks", "nr", "kb", "unroll", "u")   # keys that scale with tokens per pass


def _rank(isa: ISA, level: str) -> int:
    return isa.levels.index(level) if level in isa.levels else -1


def _tile_size(tile: dict) -> tuple:
    return tuple(tile.get(k, 0) for k in TILE_KEYS)


def choose(op_name: str, dtype: str, isa: ISA, phase: str, exclude_families=(),
           **dims) -> KernelSpec:
    """The starting spec for an op site."""
    op = registry.get_op(op_name)
    best = None
    for v in op.variants:
        if dtype not in v.dtypes or not v.usable(isa) or v.family in exclude_families:
            continue
        key = _rank(isa, v.min_level)
        if best is None or key > best[0]:
            best = (key, [v])
        elif key == best[0]:
            best[1].append(v)
    if best is None:
        raise ValueError(f"no {op_name} kernel for {dtype} at level {isa.level}")
    cands = [(v, t) for v in best[1] for t in v.tiles]
    if op_name == "matmul" and len(best[1]) > 1:
        # GEMM family for prefill, the streaming family otherwise
        want_gemm = phase == "prefill"
        pref = [(v, t) for v, t in cands if (v.family == "gemm") == want_gemm]
        cands = pref or cands
    cands.sort(key=lambda vt: _tile_size(vt[1]))
    v, tile = {"single": cands[0], "prefill": cands[-1]}.get(phase, cands[len(cands) // 2])
    return KernelSpec.make(op_name, dtype, v.family, isa.level, **tile, **dims)


def int_path(dtype: str, isa: ISA) -> bool:
    """True when quantised weights of `dtype` have an integer-dot kernel at this level."""
    try:
        op = registry.get_op("matmul_q8")
    except ValueError:
        return False
    return any(dtype in v.dtypes and v.usable(isa) for v in op.variants)
