"""Property tests of the float-path matmul: every variant x tile, every tensor type, at the native,
forced avx2|neon and generic levels, on ragged shapes, 1/2/3 threads, y = and y +=, against
gguf.quants.dequantize + float64 numpy.

Shapes: M = 37 (not a multiple of any row tile, so the last thread gets a partial tile and with
3 threads and 48-row panels some threads get nothing); K ragged for float types (300: not a
multiple of 4/8/16 lanes nor of the 64-element groups; two gemm k-chunks) and a whole number of
blocks for quantised ones (320 = 10 blocks of 32, 512 = 2 super-blocks: two gemm k-chunks);
n in {1, 7, 30}: the decode path, remainders of every token tile, several whole tiles.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build
from reame.codegen.registry import get_op
from reame.tensor_types import TENSOR_TYPES
from conftest import host_levels

OP = get_op("matmul")
ISA = detect()
LEVELS = [ISA.level if lv == "native" else lv for lv in host_levels()]
M = 37
NS = (1, 7, 30)
THREADS = (1, 2, 3)
GUARD = np.float32(7.25)


def k_for(dtype: str) -> int:
    return {"F32": 300, "F16": 300, "BF16": 300}.get(dtype, 512 if TENSOR_TYPES[dtype].block_size == 256 else 320)


def _grid():
    out = []
    for level in LEVELS:
        isa = ISA.at(level)
        for dtype in OP.dtypes():
            seen_family = set()
            for acc in (0, 1):
                for spec in OP.specs(dtype, isa, M=M, K=k_for(dtype), acc=acc):
                    # y += is a store-path difference: one tile per family at the native level
                    if acc and (level != ISA.level or (spec.family, spec.p.get("vl")) in seen_family):
                        continue
                    if acc:
                        seen_family.add((spec.family, spec.p.get("vl")))
                    out.append(pytest.param(spec, isa, id=spec.label().replace(" ", "")))
    return out


def run_guarded(op, kernel, rng, n, nth):
    """Run a random case with y inside a larger buffer whose first and last rows are guards.
    Returns (worst error relative to the tolerance, guards intact)."""
    spec = kernel.spec
    case = op.make_case(spec, rng, n)
    y = case.buffers["y"]
    big = np.full((y.shape[0] + 2,) + y.shape[1:], GUARD, np.float32)
    big[1:-1] = y
    case.buffers["y"] = big[1:-1]
    case.args = op.pack(case.buffers, n=n)
    want = op.reference(spec, case)["y"]
    kernel.run_threads(case.args, nth)
    got = case.buffers["y"].astype(np.float64)
    rtol, atol = op.tolerance(spec.dtype)
    if not np.all(np.isfinite(got)):
        return float("inf"), True
    worst = float((np.abs(got - want) / (atol + rtol * np.abs(want))).max())
    return worst, bool(np.all(big[0] == GUARD) and np.all(big[-1] == GUARD))


@pytest.mark.parametrize("spec,isa", _grid())
def test_matmul_matches_reference(spec, isa):
    kernel = build(spec, isa)
    rng = np.random.default_rng(zlib.crc32(spec.label().encode()))
    for n in NS:
        for nth in THREADS:
            worst, guards = run_guarded(OP, kernel, rng, n, nth)
            assert guards, f"{spec.label()} n={n} nth={nth} wrote outside y"
            assert worst <= 1.0, f"{spec.label()} n={n} nth={nth}: {worst:.3g}x tolerance"


@pytest.mark.parametrize("dtype", ["F32", "Q4_K"])
def test_token_panels(dtype):
    """K = 4096 and n = 600: the dot-product families walk tokens in several L2 panels (16-24
    tokens), gemm in several token blocks (~500 tokens) - every loop level runs more than once."""
    K = 4096
    for spec in OP.specs(dtype, ISA, M=5, K=K, acc=1):
        kernel = build(spec)
        worst, guards = run_guarded(OP, kernel, np.random.default_rng(3), 600, 2)
        assert guards and worst <= 1.0, (spec.label(), worst)


def test_every_type_has_generic_and_native_variants():
    for dtype in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"):
        generic = OP.specs(dtype, ISA.at("generic"), M=64, K=256, acc=0)
        assert generic and all(s.family == "generic" for s in generic)
        native = {s.family for s in OP.specs(dtype, ISA, M=64, K=256, acc=0)}
        if ISA.has("avx512"):
            assert {"avx512", "gemm"} <= native
        for v in OP.variants:
            if dtype in v.dtypes:
                assert len(v.tiles) >= 2, v


def test_symbols_are_unique_per_variant():
    from reame.codegen.spec import render
    symbols = set()
    for spec in OP.specs("Q8_0", ISA, M=64, K=256, acc=0) + OP.specs("Q8_0", ISA, M=64, K=256, acc=1):
        symbols.add(render(spec, ISA)[0])
    assert len(symbols) == len(OP.specs("Q8_0", ISA, M=64, K=256, acc=0)) * 2


@pytest.mark.parametrize("level", LEVELS)
def test_read_bw_probe(level):
    """The bandwidth probe of bench/kernels.py sums every word once, whatever the split."""
    op = get_op("read_bw")
    for spec in op.specs("F32", ISA.at(level)):
        kernel = build(spec, ISA.at(level))
        for n in (1, 4):
            for nth in THREADS:
                ok, worst = op.check(kernel, np.random.default_rng(n), n=n, nth=nth)
                assert ok, (spec.label(), n, nth, worst)
