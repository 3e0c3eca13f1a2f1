"""A token's matrix products do not depend on how many tokens share its step.

The planner gives each step size its own program, and a program's matmul sites the tile that
fits its token count (reame/jit/select.py): a decode step runs a family's one-token tile, a
verify or batched step of 2-16 tokens its wider tiles. Speculation is lossless (a greedy reply
the same with and without it) and batched decoding gives a request the tokens it gets alone
only if every tile of the family computes each token with the same arithmetic as the one-token
tile: the same block order, accumulators and final sums, bit for bit. Checked here for every
family and type at every level this CPU can run, on token counts below, at and past each tile,
1-3 threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.panel_layout import SEGMENTS
from reame.codegen.registry import get_op
from conftest import isa_at

OPS = ("matmul_q8a", "matmul_q8k", "matmul_q8k_rp", "matmul_q8a_rp")
NS = (1, 2, 3, 5, 8, 9, 17)
THREADS = (1, 2, 3)
DIMS = ((48, 512, 0), (80, 1024, 1))     # M a multiple of 16: matmul_q8k_rp's panels


def _families():
    """(op, family, type, level) of every family with one-token and wider tiles, at its own
    level where this CPU has it."""
    out = []
    levels = detect().levels
    for name in OPS:
        for v in get_op(name).variants:
            if v.min_level not in levels or v.min_tokens > 1:
                continue
            level = v.min_level
            if not v.usable(isa_at(level)) or len({t.get("nt", 1) for t in v.tiles}) < 2:
                continue
            for dtype in v.dtypes:
                if name.endswith("_rp") and dtype not in SEGMENTS:
                    continue                    # repacked layouts exist for the row-panel types
                out.append(pytest.param(name, v.family, dtype, level,
                                        id=f"{name}-{v.family}-{dtype}-{level}"))
    return out


@pytest.mark.parametrize("op_name,family,dtype,level", _families())
def test_every_tile_gives_a_token_the_one_token_tiles_bits(op_name, family, dtype, level):
    """Every tile of the family gives each token the bits of its narrowest tile. Catches a
    one-token tile that splits a row's blocks over several accumulators while the wider tiles
    chain them through one (the avx2 family's nt=1,u=2 until 2026-12-04: a SmolLM2
    token's logits 0.42 apart between a decode step and a verify step)."""
    op, isa = get_op(op_name), isa_at(level)
    checked = 0
    for M, K, acc in DIMS:
        specs = [s for s in op.specs(dtype, isa, M=M, K=K, acc=acc) if s.family == family]
        if not specs:
            continue                    # a family whose tiles do not fit these dims
        checked += 1
        # the family's narrowest tile (its first one-token tile is what a decode program takes,
        # select.choose); families without one serve steps of several tokens only
        nt0 = min(s.p.get("nt", 1) for s in specs)
        one = next(s for s in specs if s.p.get("nt", 1) == nt0)
        base = build(one, isa)
        wide = [(s, build(s, isa)) for s in specs if s != one]
        assert wide
        bad = []
        for n in NS:
            case = op.make_case(one, np.random.default_rng([M, K, acc, n]), n)
            y = case.buffers["y"]
            y0 = case.meta.get("y0", y.copy())
            for nth in THREADS:
                y[...] = y0
                base.run_threads(case.args, nth)
                want = y.copy()
                for spec, k in wide:
                    y[...] = y0
                    k.run_threads(case.args, nth)
                    if not np.array_equal(y.view(np.uint32), want.view(np.uint32)):
                        bad.append(f"{spec.label()} n={n} nth={nth}")
        kernels = sorted({b.split(" n=")[0] for b in bad})
        assert not bad, f"not {one.label()}'s bits: " + "; ".join(kernels)
    assert checked, f"no dims of {DIMS} fit a tile of {family}"
