"""Property tests of get_rows (embedding lookup): every type, every variant, at the native, forced
avx2|neon and generic levels, ragged K for float types, n in {1, 7, 30}, 1/2/3 threads. The
dequantisation macros repeat gguf's float32 operations, so the result must be bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen.isa import detect
from reame.codegen.kernels import build, pack_args
from reame.codegen.registry import get_op
from reame.tensor_types import TENSOR_TYPES
from reame.codegen.spec import KernelSpec
from conftest import host_levels

OP = get_op("get_rows")
ISA = detect()
LEVELS = [ISA.level if lv == "native" else lv for lv in host_levels()]


def k_for(dtype: str) -> int:
    return {"F32": 77, "F16": 77, "BF16": 77}.get(dtype, 512 if TENSOR_TYPES[dtype].block_size == 256 else 96)


def _grid():
    """Every type at every level, and with Gemma's embedding scale (a float32 product after
    dequantisation: catches the scale skipped, applied in float64, or only to the tail)."""
    return [pytest.param(spec, ISA.at(level), id=spec.label())
            for level in LEVELS for dtype in OP.dtypes() for scale in (1.0, 45.254833995939045)
            for spec in OP.specs(dtype, ISA.at(level), K=k_for(dtype),
                                 **({"scale": scale} if scale != 1.0 else {}))]


@pytest.mark.parametrize("spec,isa", _grid())
def test_get_rows_bit_exact(spec, isa):
    kernel = build(spec, isa)
    rng = np.random.default_rng(7)
    for n in (1, 7, 30):
        for nth in (1, 2, 3):
            case = OP.make_case(spec, rng, n)
            want = OP.reference(spec, case)["y"].astype(np.float32)
            kernel.run_threads(case.args, nth)
            got = case.buffers["y"]
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
                f"{spec.label()} n={n} nth={nth}: max diff {np.nanmax(np.abs(got - want))}"


@pytest.mark.parametrize("level", LEVELS)
def test_f16_special_values(level):
    """inf, nan, signed zeros, subnormals and extremes convert exactly (the generic level widens
    f16 with integer ops instead of F16C)."""
    vals = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, -65504, 6e-8, -6e-8, 6.1e-5,
                     3e-5, 1.0, -2.5, 0.333, 1e-7, 4.0], dtype=np.float16)
    K = len(vals)
    isa = ISA.at(level)
    lanes = isa.f32_lanes
    spec = KernelSpec.make("get_rows", "F16", "generic", level, vl=lanes, K=K)
    kernel = build(spec, isa)
    w = vals.reshape(1, K).view(np.uint8).copy()
    ids = np.zeros(2, np.int32)
    y = np.zeros((2, K), np.float32)
    kernel(pack_args([w, ids, y, 2]))
    want = vals.astype(np.float32)
    for row in y:
        assert np.array_equal(np.isnan(row), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.array_equal(row[ok].view(np.uint32), want[ok].view(np.uint32))
