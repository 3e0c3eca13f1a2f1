"""matmul_q8k_rp (K-quant weights in the row-panel layout x Q8K activations) and the layout
itself (codegen/panel_layout.py): the repack against its definition, every variant x tile at
the levels where it runs against dequant(W) @ dequant(xq)^T in float64 (several panels per
thread, more slices than panels, partial token tiles, acc 0/1, 1/2/3 threads), and bit-for-bit
agreement of the panel family with matmul_q8k's panels on the GGUF rows."""

from __future__ import annotations

import numpy as np
import pytest

from reame.codegen import panel_layout
from reame.codegen.kernels import build
from reame.codegen.ops.matmul_q8a_kquants import random_weights
from reame.codegen.registry import get_op
from reame.codegen.spec import KernelSpec
from conftest import guarded_bytes
from conftest import isa_at as _isa
from conftest import type_variant_params

OP = get_op("matmul_q8k_rp")
TYPES = ("Q4_K", "Q5_K", "Q6_K")
DIMS = ((32, 768, 0), (16, 256, 1), (80, 1280, 1))   # panels: 2, 1, 5; superblocks: 3, 1, 5


@pytest.mark.parametrize("dtype", TYPES)
def test_repack_matches_the_definition(dtype):
    """Record (p, s), segment (off, n), vector k, lane r = bytes [off + 4k, off + 4k + 4) of row
    16p + r's superblock s."""
    M, nsb = 48, 3
    bb = panel_layout.BLOCK_BYTES[dtype]
    raw = random_weights(dtype, np.random.default_rng(0), M, 256 * nsb).reshape(M, nsb * bb)
    out = panel_layout.repack(raw, dtype)
    recb = panel_layout.record_bytes(dtype)
    assert out.nbytes == M // 16 * nsb * recb
    offs = panel_layout.record_offsets(dtype)
    for p in range(M // 16):
        for s in range(nsb):
            rec = out[(p * nsb + s) * recb:(p * nsb + s + 1) * recb]
            for off, n in panel_layout.SEGMENTS[dtype]:
                for k in range(n):
                    for r in range(16):
                        got = rec[offs[off] + 64 * k + 4 * r:][:4]
                        want = raw[16 * p + r, s * bb + off + 4 * k:][:4]
                        assert got.tobytes() == want.tobytes(), (p, s, off, k, r)
    # every byte of every superblock is in its record (Q6_K: bytes 206-207 twice)
    assert sorted({o + i for o, n in panel_layout.SEGMENTS[dtype] for i in range(4 * n)}) \
        == list(range(bb))
    with pytest.raises(ValueError, match="multiple of 16"):
        panel_layout.repack(raw[:40], dtype)


def _params():
    return type_variant_params(OP, TYPES)


@pytest.mark.parametrize("dtype,family,level,tile", _params())
def test_matches_reference(dtype, family, level, tile):
    rtol, atol = OP.tolerance(dtype)
    for M, K, acc in DIMS:
        spec = KernelSpec.make(OP.name, dtype, family, _isa(level).level, M=M, K=K, acc=acc,
                               **tile)
        k = build(spec, _isa(level))
        for n in (1, 5, 10):
            for nth in (1, 2, 3, 7):                 # 7 slices: more than some row counts' panels
                case = OP.make_case(spec, np.random.default_rng([M, K, n, nth]), n)
                want = OP.reference(spec, case)["y"]
                k.run_threads(case.args, nth)
                got = case.buffers["y"].astype(np.float64)
                err = np.abs(got - want) / (atol + rtol * np.abs(want))
                assert err.max() <= 1.0, (M, K, acc, n, nth, float(err.max()))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("nt", [1, 4, 8])
def test_panel_equals_matmul_q8k_panel_bit_for_bit(dtype, nt):
    """The same panel kernel reading records instead of transposing rows: identical floats."""
    isa = _isa("native")
    if not isa.has("avx512_vnni"):
        pytest.skip("no AVX-512 VNNI here")
    M, K, n = 64, 1280, 11
    tile = {"nt": nt, "pf_loc": 3}
    rp = KernelSpec.make(OP.name, dtype, "panel", isa.level, M=M, K=K, acc=0, pf_bytes=8192, **tile)
    base = KernelSpec.make("matmul_q8k", dtype, "panel", isa.level, M=M, K=K, acc=0, **tile)
    case = OP.make_case(rp, np.random.default_rng(5), n)
    q8k_op = get_op("matmul_q8k")
    bufs = {**case.buffers, "w": case.meta["w_gguf"], "y": case.buffers["y"].copy()}
    build(base, isa).run_threads(q8k_op.pack(bufs, n=n), 2)
    build(rp, isa).run_threads(case.args, 2)
    assert np.array_equal(case.buffers["y"], bufs["y"])


def test_rows_must_fill_panels():
    spec = KernelSpec.make(OP.name, "Q4_K", "generic", "generic", M=24, K=256, acc=0, nt=1, u=1)
    with pytest.raises(ValueError, match="multiple of 16"):
        OP.make_case(spec, np.random.default_rng(0), 1)


@pytest.mark.parametrize("at_end", (True, False), ids=("guard-after", "guard-before"))
@pytest.mark.parametrize("dtype", TYPES)
def test_reads_stay_inside_the_records(dtype, at_end):
    """Records between PROT_NONE pages: no variant x tile loads a byte outside them (prefetches
    may run ahead: they do not fault)."""
    isa = _isa("native")
    rtol, atol = OP.tolerance(dtype)
    for M, K in ((16, 256), (48, 512)):
        for spec in OP.specs(dtype, isa, M=M, K=K, acc=0):
            case = OP.make_case(spec, np.random.default_rng(0), 5)
            want = OP.reference(spec, case)["y"]
            w = case.buffers["w"]
            keep, g = guarded_bytes(w.nbytes, at_end)
            g[:] = w
            args = case.args.copy()
            args[0] = g.ctypes.data
            case.buffers["y"][...] = np.nan
            build(spec, isa).run_threads(args, 2)
            np.testing.assert_allclose(case.buffers["y"], want, rtol=rtol, atol=atol,
                                       err_msg=spec.label())
            del g, keep
