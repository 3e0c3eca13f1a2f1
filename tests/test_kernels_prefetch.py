"""Every tile of the 1-row integer matmul families prefetches its weight stream.

A multi-token step (a batch, a verify step) runs a tile of several tokens per weight pass; with
the weights coming from DRAM such a tile without a software prefetch waited on memory at a
fraction of the bandwidth (one thread, weights cycled through many copies: matmul_q8a avx2 Q8_0
nt=4 21 against 50 GOP/s with it; a 4-token verify step of a Qwen2.5-0.5B-shaped Q8_0 model at
the avx2 level 3.49x a one-token step without, 1.97x with: docs/kernels-int8.md). Speed is
measured in bench/, not here: this pins what makes it, the tile's `pf_bytes` and the prefetches
its rendered kernel issues in the loop that serves its tokens.
"""

from __future__ import annotations

import pytest

from reame.codegen.registry import get_op
from reame.codegen.spec import render
from conftest import isa_at

# (op, family, type, level): the families whose tiles stream weight rows one at a time
FAMILIES = (("matmul_q8a", "avx2", "Q8_0", "avx2"), ("matmul_q8a", "avx2", "IQ4_NL", "avx2"),
            ("matmul_q8a", "vnni", "Q5_0", "avx512_vnni"),
            ("matmul_q8a", "kavx2", "Q4_K", "avx2"), ("matmul_q8a", "kvnni", "Q6_K", "avx512_vnni"),
            ("matmul_q8k", "avx2", "Q3_K", "avx2"), ("matmul_q8k", "vnni", "IQ4_XS", "avx512_vnni"))


@pytest.mark.parametrize("op_name,family,dtype,level", FAMILIES,
                         ids=[f"{o}-{f}-{d}" for o, f, d, _ in FAMILIES])
def test_every_tile_prefetches_its_weights(op_name, family, dtype, level):
    """Catches a tile list whose multi-token tiles lost `pf_bytes` (as they were until
    2026-12-04) and a template that prefetches only in its one-token loop (the K-quant
    skeleton's tile loop is `%tt`, its one-token loop `%t1`)."""
    op, isa = get_op(op_name), isa_at(level)
    specs = [s for s in op.specs(dtype, isa, M=64, K=1024, acc=0) if s.family == family]
    assert len({s.p.get("nt", 1) for s in specs}) >= 3, [s.label() for s in specs]
    for spec in specs:
        assert spec.p.get("pf_bytes"), spec.label()
        ir = render(spec, isa)[1]
        pf = [line for line in ir.splitlines() if "call void @llvm.prefetch" in line]
        assert pf, spec.label()
        kquant = op_name == "matmul_q8k" or family.startswith("k")
        if kquant and spec.p.get("nt", 1) > 1:
            assert any("%tt." in line for line in pf), spec.label()
