"""Exact kernel tuning (`--kernel-tuning exact`, the default): the adaptive runtime puts live only
variants whose outputs are bit-identical to the live kernel's, so tuning changes speed and never
a computed bit (greedy outputs then do not depend on what a run learned, on which trial arm a
step ran, or on whether speculation reshaped the steps).

The "other arithmetic" here is the live kernel itself with one output value moved by one ulp at
chosen counts: within every op tolerance (verify() passes it), so only a bit-level check can
refuse it, on any ISA.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from codegen import registry
from codegen.compiler import KERNEL_CFUNC
from codegen.kernels import Kernel
from reame.adaptive import AdaptiveRuntime
from reame.adaptive.tuner import KernelTuner
from reame.dispatch import VariantRejected
from reame.engines import create_engine
from reame.planner import SchedulerParams
from reame.server import ServerConfig, create_app

_KEEP = []          # the ctypes callbacks must outlive the kernels that point at them


def nudged(live: Kernel, when=lambda n: True, tag: str = "nudged") -> Kernel:
    """`live`'s arithmetic, except that the first output value moves by one ulp at the counts
    `when` accepts (slice 0 writes it after computing its rows)."""
    op = registry.get_op(live.spec.op)
    nword = op.args.index("n")
    outs = [op.args.index(k) for k in _outputs(op)]

    def run(ptr, ith, nth):
        live.cfunc(ptr, ith, nth)
        if ith != 0:
            return
        args = (ctypes.c_int64 * len(op.args)).from_address(ptr)
        if not when(int(args[nword])):
            return
        v = ctypes.c_float.from_address(args[outs[0]])
        v.value = float(np.nextafter(np.float32(v.value), np.float32(np.inf)))

    cb = KERNEL_CFUNC(run)
    _KEEP.append(cb)
    spec = live.spec.with_params(test=tag)       # another spec of the same op, type and dims
    return Kernel(spec, f"{live.symbol}_{tag}", ctypes.cast(cb, ctypes.c_void_p).value, "")


def _outputs(op) -> list[str]:
    return list(op.make_case(_SPEC_FOR_OUTPUTS[op.name], np.random.default_rng(0), 1).outputs)


_SPEC_FOR_OUTPUTS: dict = {}


@pytest.fixture(scope="module")
def engine(stories_model):
    eng = create_engine(stories_model, "jit", n_ctx=256, max_seqs=4)
    yield eng
    eng.close()


def matmul_slot(eng):
    i = next(s.index for s in eng.table.slots if s is not None and s.kernel.spec.op == "matmul"
             and s.hi > s.lo + 2)                 # a program with several counts
    _SPEC_FOR_OUTPUTS["matmul"] = eng.table.slots[i].kernel.spec
    return i


def test_same_bits_refuses_another_arithmetic_at_any_count(engine):
    """A variant one ulp off passes the tolerance check but not the bit check, whichever of the
    slot's counts it differs at. Catches a same_bits that compares within a tolerance, that
    checks one count (the first or the largest) only, or that runs the live kernel twice."""
    i = matmul_slot(engine)
    s = engine.table.slots[i]
    live = s.kernel
    counts = s.counts()
    assert len(counts) >= 3
    engine.table.same_bits(i, live, live)                       # itself: identical
    for name, when in [("every", lambda n: True), ("first", lambda n: n == counts[0]),
                       ("middle", lambda n: n == counts[len(counts) // 2]),
                       ("last", lambda n: n == counts[-1])]:
        k = nudged(live, when, name)
        assert engine.table.verify(i, k) <= 1.0                 # within the op's tolerance
        with pytest.raises(VariantRejected, match="not bit-identical"):
            engine.table.same_bits(i, k, live)


def test_same_bits_accepts_a_variant_of_the_same_arithmetic(engine):
    """Another tile of the same family computes every output the same way here (each output
    row's sum in one order): found by the check, so exact tuning keeps real candidates. Catches
    a check that refuses everything but the live kernel itself (a tuner with nothing to try)."""
    from codegen.kernels import build
    accepted = 0
    for c in KernelTuner(engine, exact=True).classes.values():
        live = engine.table.slots[c.slots[0]].kernel
        for sp in c.candidates:
            if sp.family != live.spec.family:
                continue
            k = engine.kernels.get(sp) or build(sp, engine.isa)
            try:
                engine.table.same_bits(c.slots[0], k, live)
                accepted += 1
            except VariantRejected:
                pass
        if accepted:
            break
    assert accepted


def _build(tuner, cls, spec, timeout=60.0):
    tuner._build_async(cls, spec)
    t = time.monotonic() + timeout
    while tuner._building and time.monotonic() < t:
        time.sleep(0.01)
    assert not tuner._building


@pytest.mark.parametrize("exact", [True, False])
def test_the_tuner_tries_only_bit_identical_variants_when_exact(engine, exact):
    """Under exact tuning a candidate of another arithmetic is refused before any step runs it
    (not even as a trial arm); with exact=False (--kernel-tuning any) it is a candidate like
    any within tolerance. Catches an exact flag that never reaches the candidate check."""
    i = matmul_slot(engine)
    tuner = KernelTuner(engine, exact=exact, build_nice=0)
    cls = tuner._by_slot[i]
    k = nudged(engine.table.slots[i].kernel, tag=f"tuner{exact}")
    engine.kernels[k.spec] = k
    _build(tuner, cls, k.spec)
    if exact:
        assert not tuner._ready and tuner.refused == 1
        assert "not bit-identical" in cls.tried[k.spec.label()]
    else:
        assert [r[2] for r in tuner._ready] == [k] and tuner.refused == 0


@pytest.mark.parametrize("exact", [True, False])
def test_a_saved_choice_of_another_arithmetic_is_not_applied_when_exact(engine, exact):
    """A strategy saved under --kernel-tuning any, loaded under exact: its choice of another
    arithmetic is not made live. Catches apply_choices skipping the bit check."""
    i = matmul_slot(engine)
    tuner = KernelTuner(engine, exact=exact)
    cls = tuner._by_slot[i]
    live = engine.table.slots[i].kernel
    k = nudged(live, tag=f"saved{exact}")
    engine.kernels[k.spec] = k
    try:
        assert tuner.apply_choices({cls.key: k.spec}) == (0 if exact else 1)
    finally:
        for j in cls.slots:
            engine.table.stage(j, live, verify=False)
        engine.table.commit()


def test_the_setting_reaches_the_tuner_and_the_report(stories_model, tmp_path):
    """--kernel-tuning (REAME_KERNEL_TUNING): exact by default, `any` reaches the tuner, a bad
    value is refused; /v1/adaptive says which. Catches a flag parsed but never passed on."""
    from reame.errors import ReameError
    with pytest.raises(ReameError, match="kernel_tuning"):
        ServerConfig.from_env({"REAME_KERNEL_TUNING": "fast"})
    assert ServerConfig.from_env({"REAME_KERNEL_TUNING": "any"}).kernel_tuning == "any"
    for mode, exact in [("exact", True), ("any", False)]:
        eng = create_engine(stories_model, "jit", n_ctx=256, max_seqs=4)
        a = create_app(eng, ServerConfig(model=stories_model.path, max_seqs=4,
                                         adaptive_dir=str(tmp_path), adaptive_boot=0,
                                         kernel_tuning=mode))
        svc = a.reame.service
        try:
            assert svc.adaptive.tuner.exact is exact
            assert svc.adaptive.report()["kernels"]["exact"] is exact
        finally:
            svc.stop()


def test_default_runtime_is_exact(stories_model):
    eng = create_engine(stories_model, "jit", n_ctx=256, max_seqs=4)
    try:
        assert AdaptiveRuntime(eng, SchedulerParams(max_batch=4)).tuner.exact
    finally:
        eng.close()
