"""bench/adaptive_headroom.py's kernel lever measures the candidate it claims to: a variant
made slower to order must come out slower, one made faster (the live one slowed) faster.
Catches a lever whose staging never reaches the slots (every ratio ~1), or that reads another
class's time."""

from __future__ import annotations

import pytest

from bench import adaptive_headroom as hr
from bench.synth import synth_model
from reame.adaptive.tuner import KernelTuner
from reame.jit.engine import JITEngine
from reame.model import load_model
from reame.batch import Batch
from conftest import TIME_SCALE
from test_adaptive import Wrapped


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    model = load_model(synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0"))
    e = JITEngine(model, n_ctx=64, max_seqs=4, threads=2)
    yield e
    e.close()


def only(tuner, cls, cands):
    for c in tuner.classes.values():
        c.candidates = []
    for k in cands:
        tuner.plan.kernels[k.spec] = k
    cls.candidates = [k.spec for k in cands]
    tuner.min_share = 0.0


def test_kernel_lever_sees_a_slower_and_a_faster_candidate(eng):
    batch = Batch.build([5, 6, 7, 8], [3, 3, 3, 3], [0, 1, 2, 3])
    tuner = KernelTuner(eng)
    program = str(eng.program_of(4))
    cls = next(c for c in tuner.classes.values() if c.program == program
               and c.op.startswith("matmul_q8a"))
    real = eng.table.slots[cls.slots[0]].kernel
    # 0.2 ms a call is a large share of this tiny model's kernel time; emulated kernels run
    # ~20x slower, so the delay does too
    slow = Wrapped(real, delay=2e-4 * TIME_SCALE, name="slow")
    only(tuner, cls, [slow.kernel])
    for c in tuner.classes.values():       # the lever takes the hottest class: make it this one
        if c is not cls:
            c.slots, c.seconds = [], 0.0
    r = hr.kernel_lever(eng, tuner, batch, classes=1, pairs=4)
    (row,) = r["classes"]
    assert row["class"] == cls.key and row["best"]["step_ratio"] > 1.1
    assert eng.table.slots[cls.slots[0]].kernel is real          # put back
    # the live variant slowed, the real kernel as the candidate: it must look faster
    for i in cls.slots:
        eng.table.stage(i, slow.kernel, verify=False, record=False)
    eng.forward(batch)
    only(tuner, cls, [real])
    r = hr.kernel_lever(eng, tuner, batch, classes=1, pairs=4)
    assert r["classes"][0]["best"]["step_ratio"] < 0.9


def test_op_seconds_sums_sites_over_layers():
    from bench.prefill_context import op_seconds
    stats = [{"slot": "blk.0.attn@512", "calls": 1, "seconds": 1.0},
             {"slot": "blk.1.attn@512", "calls": 1, "seconds": 2.0},
             {"slot": "blk.0.ffn_up.weight@512", "calls": 1, "seconds": 4.0},
             {"slot": "output_norm@512", "calls": 0, "seconds": 0.0}]
    assert op_seconds(stats) == {"ffn_up.weight": 4.0, "attn": 3.0}
