"""The adaptive runtime: the decision rule on synthetic timings, the kernel tuner on a real JIT
engine with injected variants (a faster one promoted, a slowed one rejected, one that degrades
after promotion rolled back, one wrong only for larger steps refused; greedy output identical
with adaptive on and off throughout), freezing, the saved strategy and the report."""

from __future__ import annotations

import ctypes
import json
import math
import random
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import TIME_SCALE

from bench.synth import synth_model
from reame.adaptive import AdaptiveRuntime, store
from reame.adaptive.decide import Comparison
from reame.codegen.compiler import KERNEL_CFUNC
from reame.codegen.spec import KernelSpec
from reame.codegen.kernels import Kernel
from reame.engines import create_engine
from reame.generate import Generation
from reame.model import load_model
from reame.planner import SchedulerParams
from reame.sampling import SamplingParams
from reame.scheduler import DONE, Scheduler
from reame.tokenizer import Tokenizer


# ---- the decision rule ----

def simulate(ratio, noise=0.05, drift=0.0, outliers=0.0, seed=0, pairs=400):
    rng = random.Random(seed)
    c = Comparison()
    for i in range(pairs):
        base = 1.0 + drift * i / pairs                       # the machine slows down (or not)
        a = base * math.exp(rng.gauss(0, noise))
        b = base * ratio * math.exp(rng.gauss(0, noise))
        if rng.random() < outliers:                          # a descheduled thread
            a, b = (a * 10, b) if rng.random() < 0.5 else (a, b * 10)
        if c.add(a, b):
            return c.verdict, len(c.logs)
    return c.verdict, pairs


def test_decides_a_real_speedup_quickly_and_a_slowdown_never():
    for seed in range(20):
        assert simulate(0.90, seed=seed)[0] == "promote"
        assert simulate(1.10, seed=seed)[0] == "reject"
    assert max(simulate(0.90, seed=s)[1] for s in range(20)) <= 40
    assert max(simulate(1.10, seed=s)[1] for s in range(20)) <= 40    # exploration is short


def test_no_false_promotions_among_equals():
    """Equal variants under 5% noise: promoted in under 2% of 300 runs (the 2% margin and the
    conservative bound)."""
    wrong = sum(simulate(1.0, seed=s)[0] == "promote" for s in range(300))
    assert wrong <= 6, wrong


def test_drift_and_outliers_do_not_fool_it():
    """The machine gets 2x slower during the comparison (pairs cancel it) and 5% of the pairs
    carry a 10x spike (the trimmed mean drops them)."""
    for seed in range(10):
        assert simulate(0.92, drift=1.0, seed=seed)[0] == "promote"
        assert simulate(1.0, drift=1.0, seed=seed)[0] == "reject"
        assert simulate(0.90, outliers=0.05, seed=seed)[0] == "promote"
        assert simulate(1.05, outliers=0.05, seed=seed)[0] == "reject"


# ---- the tuner on a real engine ----

class Wrapped:
    """A variant that runs a real kernel then spins `delay` seconds per call (slower variants
    made to order), optionally spoiling its output above `wrong_above` rows."""

    def __init__(self, inner: Kernel, delay: float = 0.0, wrong_above: int | None = None,
                 name: str = "w"):
        self.inner, self.delay, self.wrong_above = inner, delay, wrong_above
        self.cb = KERNEL_CFUNC(self._run)
        self.kernel = Kernel(inner.spec.with_params(wrapped=name), inner.symbol + "_" + name,
                             ctypes.cast(self.cb, ctypes.c_void_p).value, inner.ir)
        self.kernel._keep = self          # the callback must live as long as the kernel

    def _run(self, args, ith, nth):
        self.inner.cfunc(args, ith, nth)
        if self.wrong_above is not None and ith == 0:
            words = ctypes.cast(args, ctypes.POINTER(ctypes.c_int64))
            if words[3] > self.wrong_above:                  # matmul_q8a args: w, xq, y, n
                y = ctypes.cast(words[2], ctypes.POINTER(ctypes.c_float))
                y[0] += 1.0
        if self.delay:
            end = time.perf_counter() + self.delay
            while time.perf_counter() < end:
                pass


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0"))


def engine(model):
    return create_engine(model, "jit", n_ctx=256, max_seqs=4, threads=2, block_size=16)


def greedy_run(model, sched, n_seqs=4, max_tokens=120):
    tok = Tokenizer.from_metadata(model.metadata)
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(10, model.config.n_vocab, 6)] for _ in range(n_seqs)]
    gens = [Generation(tok, p, SamplingParams(temperature=0), max_tokens=max_tokens,
                       ignore_eos=True, n_ctx=256) for p in prompts]
    reqs = [sched.submit([p], [[g]]) for p, g in zip(prompts, gens)]
    for r in reqs:
        while (ev := r.out.get(timeout=120 * TIME_SCALE)) is not DONE:
            assert ev.error is None, ev.error
    return [g.output_ids for g in gens]


def tune_one_class(rt, cands, live=None):
    """Make the tuner work on the decode program's first matmul_q8a(_rp) class only, with the given
    candidate kernels (and live kernel)."""
    t = rt.tuner
    cls = next(c for c in t.classes.values() if c.program == "4" and c.op.startswith("matmul_q8a"))
    for other in t.classes.values():
        other.candidates = []
    if live is not None:
        for i in cls.slots:
            t.table.stage(i, live, verify=False)
        t.table.commit()
        t.table.slots[cls.slots[0]].history.clear()
        for i in cls.slots:
            t.table.slots[i].history.clear()
        cls.spec = cls.origin = live.spec
    for k in cands:
        rt.engine.kernels[k.spec] = k
    cls.candidates = [k.spec for k in cands]
    t.min_share = 0.0
    return cls


@pytest.fixture(scope="module")
def reference_output(model):
    eng = engine(model)
    s = Scheduler(eng).start()
    try:
        return greedy_run(model, s)
    finally:
        s.stop()


def run_adaptive(model, tmp_path, setup, n_runs=3, **tuner):
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    # the builds at the server threads' priority: these tests are about the A/B, and at nice 19
    # the build waits behind the test's own busy engine threads (the priority is tested alone)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path, save_every=0,
                         tuner_options={"confirm_after": 60, "build_nice": 0, **tuner})
    ctx = setup(rt)
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        outs = [greedy_run(model, s) for _ in range(n_runs)]
    finally:
        s.stop()
    return rt, ctx, outs


def test_a_faster_variant_is_promoted_and_one_that_degrades_is_rolled_back(
        model, tmp_path, reference_output):
    holder = {}

    def setup(rt):
        live0 = rt.engine.table.slots[0].kernel                  # any: replaced below
        cls = next(c for c in rt.tuner.classes.values()
                   if c.program == "4" and c.op.startswith("matmul_q8a"))
        real = rt.engine.table.slots[cls.slots[0]].kernel
        slow_live = Wrapped(real, delay=4e-4 * TIME_SCALE, name="slowlive")
        fast = Wrapped(real, delay=0.0, name="fast")
        holder.update(slow=slow_live, fast=fast, real=real, live0=live0)
        return tune_one_class(rt, [fast.kernel], live=slow_live.kernel)

    rt, cls, outs = run_adaptive(model, tmp_path, setup, n_runs=1)
    assert rt.tuner.promoted == 1, rt.tuner.report()
    assert rt.engine.table.slots[cls.slots[0]].kernel is holder["fast"].kernel
    assert all(o == reference_output for o in outs)
    # the promoted variant degrades: the confirmation finds the previous one faster
    holder["fast"].delay = 1.2e-3 * TIME_SCALE
    s = Scheduler(rt.engine, rt.params, adaptive=rt).start()
    try:
        more = [greedy_run(model, s) for _ in range(2)]
    finally:
        s.stop()
    assert rt.tuner.rolled_back == 1, rt.tuner.report()
    assert rt.engine.table.slots[cls.slots[0]].kernel is holder["slow"].kernel
    assert all(o == reference_output for o in more)
    r = rt.report()["kernels"]
    assert (r["promoted"], r["rolled_back"], r["candidates_tried"]) == (1, 1, 1)
    assert any("rolled back" in e for e in r["events"])


def test_a_slowed_variant_is_rejected_and_a_wrong_one_refused(model, tmp_path,
                                                             reference_output):
    def setup(rt):
        cls = next(c for c in rt.tuner.classes.values()
                   if c.program == "4" and c.op.startswith("matmul_q8a"))
        real = rt.engine.table.slots[cls.slots[0]].kernel
        return tune_one_class(rt, [Wrapped(real, wrong_above=2, name="wrong").kernel,
                                   Wrapped(real, delay=5e-4 * TIME_SCALE, name="slow").kernel])

    rt, cls, outs = run_adaptive(model, tmp_path, setup)
    t = rt.tuner
    assert t.refused == 1 and t.promoted == 0
    assert any(v.startswith("refused") for k, v in cls.tried.items() if "wrong" in k)
    assert any(v.startswith("rejected") for k, v in cls.tried.items() if "slow" in k)
    assert rt.engine.table.slots[cls.slots[0]].kernel.spec == cls.origin
    assert all(o == reference_output for o in outs)
    assert 0 < rt.report()["kernels"]["exploration_share"] <= 0.3


def test_a_restart_does_not_try_again_what_was_refused(model, tmp_path):
    """What a run measured slower is remembered: its rejected kernel candidates and the batch
    levels it refused are saved, and a restarted runtime neither tries those candidates nor
    probes those levels before retry_steps (the first bench restart re-explored everything and
    its first minute ran at 0.50x; catches: a strategy that keeps only what was promoted)."""
    eng = engine(model)
    params = SchedulerParams(max_batch=2)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path, save_every=0)
    cls = next(c for c in rt.tuner.classes.values() if c.op.startswith("matmul_q8a") and c.candidates)
    slow = cls.candidates[0]
    cls.tried[slow.label()] = "rejected (0.800x)"          # as _end_trial records a verdict
    rt.batch.refused[4] = rt.batch.steps                   # as a reverted probe does
    assert rt.save()

    eng2 = engine(model)
    params2 = SchedulerParams(max_batch=2)
    rt2 = AdaptiveRuntime(eng2, params2, state_dir=tmp_path, save_every=0)
    cls2 = rt2.tuner.classes[cls.key]
    assert slow in cls2.candidates
    assert rt2.load() == 0
    assert slow not in cls2.candidates and "previous run" in cls2.tried[slow.label()]
    assert rt2.batch._next(2) is None                      # 4 (its only level up) refused
    rt2.batch.steps = rt2.batch.retry_steps                # ... until retry_steps have passed
    assert rt2.batch._next(2) == 4


def test_frozen_runtime_explores_nothing(model, tmp_path, reference_output):
    def setup(rt):
        cls = next(c for c in rt.tuner.classes.values()
                   if c.program == "4" and c.op.startswith("matmul_q8a"))
        real = rt.engine.table.slots[cls.slots[0]].kernel
        cls = tune_one_class(rt, [Wrapped(real, name="any").kernel])
        rt.freeze()
        return cls

    rt, cls, outs = run_adaptive(model, tmp_path, setup, n_runs=1)
    assert rt.tuner.explored == 0 and rt.tuner.tried == 0 and rt.frozen
    assert outs[0] == reference_output
    off = AdaptiveRuntime(engine(model), SchedulerParams(), enabled=False, state_dir=tmp_path)
    assert off.frozen
    off.unfreeze()
    assert off.frozen                                      # --adaptive off stays off


# ---- the saved strategy ----

def test_strategy_round_trip_and_bad_files(model, tmp_path, caplog):
    eng = engine(model)
    rt = AdaptiveRuntime(eng, SchedulerParams(max_batch=4, token_budget=256), state_dir=tmp_path)
    cls = next(c for c in rt.tuner.classes.values() if c.op.startswith("matmul_q8a") and c.candidates)
    other = cls.candidates[0]
    assert rt.tuner.apply_choices({cls.key: other}) == 1
    eng.table.commit()
    assert rt.save() and rt.path.exists()
    body = json.loads(rt.path.read_text())
    assert body["identity"] == store.identity(eng) and cls.key in body["choices"]
    assert body["scheduler"]["token_budget"] == 256

    eng2 = engine(model)
    params2 = SchedulerParams(max_batch=4)
    rt2 = AdaptiveRuntime(eng2, params2, state_dir=tmp_path)
    assert rt2.load() == 1
    eng2.table.commit()
    assert eng2.table.slots[cls.slots[0]].kernel.spec == other
    assert params2.token_budget == 256

    for bad in ("{not json", json.dumps({**body, "format": 99}),
                json.dumps({**body, "identity": {**body["identity"], "cpu": "other-cpu"}})):
        rt.path.write_text(bad)
        rt3 = AdaptiveRuntime(engine(model), SchedulerParams(max_batch=4), state_dir=tmp_path)
        with caplog.at_level("WARNING", logger="reame.adaptive"):
            assert rt3.load() is None
        assert "ignored" in caplog.text
        caplog.clear()


def test_a_strategy_with_renamed_tile_keys_is_ignored_with_a_warning(model, tmp_path, caplog):
    """A strategy saved before a tile key was renamed (issue 31: `pf` split into `pf_bytes` and
    `pf_loc`) names a spec no registry makes any more: the choice is ignored with a warning
    naming the file, the start-up kernel stays, and the rest of the file still loads."""
    rt = AdaptiveRuntime(engine(model), SchedulerParams(max_batch=4), state_dir=tmp_path)
    renamed = {"pf_bytes": "pf", "pf_loc": "pf"}
    cls, new = next((c, s) for c in rt.tuner.classes.values() for s in c.candidates
                    if any(k in renamed for k, _ in s.params))
    old = KernelSpec.make(new.op, new.dtype, new.family, new.level,
                          **{renamed.get(k, k): v for k, v in new.params})
    store.save(rt.path, rt.ident, {cls.key: old}, {"token_budget": 128})

    eng2 = engine(model)
    params2 = SchedulerParams(max_batch=4, token_budget=256)
    rt2 = AdaptiveRuntime(eng2, params2, state_dir=tmp_path)
    with caplog.at_level("WARNING", logger="reame.adaptive"):
        assert rt2.load() == 0
    assert "not one of its variants" in caplog.text and str(rt.path) in caplog.text
    eng2.table.commit()
    assert eng2.table.slots[cls.slots[0]].kernel.spec == cls.origin
    assert params2.token_budget == 128


def test_a_strategy_with_renamed_ops_is_ignored_with_a_warning(model, tmp_path, caplog):
    """A strategy saved before matmul_q8 became matmul_q8a (issue 31) names an op no registry
    has: ignored with a warning, never looked up (a KeyError would stop the server's start)."""
    rt = AdaptiveRuntime(engine(model), SchedulerParams(max_batch=4), state_dir=tmp_path)
    # a Q8_0 model: matmul_q8a sites at every level (its generic family included)
    cls = next(c for c in rt.tuner.classes.values() if c.origin.op.startswith("matmul_q8a"))
    o = cls.origin
    old = KernelSpec.make("matmul_q8", o.dtype, o.family, o.level, **dict(o.params))
    store.save(rt.path, rt.ident, {cls.key: old}, {})
    eng2 = engine(model)
    rt2 = AdaptiveRuntime(eng2, SchedulerParams(max_batch=4), state_dir=tmp_path)
    with caplog.at_level("WARNING", logger="reame.adaptive"):
        assert rt2.load() == 0
    assert "not one of its variants" in caplog.text
    eng2.table.commit()
    assert eng2.table.slots[cls.slots[0]].kernel.spec == cls.origin


def test_report_counts_match_what_happened(model, tmp_path):
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        outs = greedy_run(model, s, n_seqs=3, max_tokens=20)
    finally:
        s.stop()
    r = rt.report()
    assert r["profile"]["requests"] == 3
    assert r["profile"]["tokens_out"] == sum(len(o) for o in outs) == 60
    assert sum(r["profile"]["output_tokens"].values()) == 3
    k = r["kernels"]
    assert k["steps"] == s.steps and 0 <= k["exploration_share"] <= 1
    assert "kernels:" in rt.line() and "tok/s" in rt.line()


def shared_prefix_prompts(model, seed: int, n: int, tail: int, length: int = 40):
    """A random `length`-token prefix and n prompts made of it plus `tail` random tokens."""
    rng = np.random.default_rng(seed)
    prefix = [int(t) for t in rng.integers(10, model.config.n_vocab, length)]
    return prefix, [prefix + [int(t) for t in rng.integers(10, model.config.n_vocab, tail)]
                    for _ in range(n)]


def test_report_prefix_hit_rate_is_counted_truth(model, tmp_path):
    """The report's prefix-cache hit rate equals the prompt tokens the planner took from the
    cache over those it looked up (catches: a rate from the wrong counters, or a constant)."""
    prefix, prompts = shared_prefix_prompts(model, seed=5, n=3, tail=8)
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        cached = run_prompts(model, s, prompts)
    finally:
        s.stop()
    pc = rt.report()["prefix_cache"]
    truth = sum(cached) / sum(len(p) for p in prompts)          # 64 / 144
    assert cached == [0, 32, 32]
    assert pc["hit_rate_since_start"] == round(truth, 4)
    assert pc["hit_rate_last_minute"] == round(truth, 4)
    assert "prefix hits 44% over the last minute" in rt.line()


def test_boot_benchmark_is_time_boxed_and_keeps_the_output(model, tmp_path, reference_output):
    """The start-up micro-benchmark runs synthetic steps with every step exploring, stops at
    its time box with no trial left half-way, and whatever it chose gives the same greedy
    output."""
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    seen = []
    t0 = time.monotonic()
    out = rt.boot(3.0, progress=seen.append)
    assert 3.0 <= time.monotonic() - t0 < 6.0
    assert out["steps"] > 20 and out["tried"] >= 1 and seen[-1] == 1.0
    assert rt.tuner.trial is None
    assert all(s.staged is None and s.base is None for s in eng.table.slots)
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        assert greedy_run(model, s) == reference_output
    finally:
        s.stop()


def test_the_strategy_is_saved_when_the_server_stops(stories_path, tmp_path):
    """reame serve, stopped with SIGTERM: the worker saves its strategy on the way out."""
    from test_server_e2e import ReameServer
    d = tmp_path / "adaptive"
    s = ReameServer(stories_path, env={"REAME_ADAPTIVE_DIR": str(d)}, log_dir=tmp_path)
    try:
        assert s.client().completions.create(model="stories260K", prompt="Once",
                                             max_tokens=4).choices[0].text
    finally:
        s.stop()
    files = list(d.glob("strategy-*.json"))
    assert len(files) == 1, s.log()
    body = json.loads(files[0].read_text())
    assert body["identity"]["model"].startswith(str(stories_path))


def test_saved_parameters_never_exceed_this_servers_limits(model, tmp_path):
    """A strategy saved by a server with a larger batch (or nonsense values) never gives this
    one more sequences than its KV slots (that ran out of slots: 'pop from empty list')."""
    eng = engine(model)                                  # 4 KV slots
    rt = AdaptiveRuntime(eng, SchedulerParams(max_batch=4), state_dir=tmp_path)
    store.save(rt.path, rt.ident, {}, {"max_batch": 16, "token_budget": 128,
                                       "prefill_chunk": 64})
    params = SchedulerParams(max_batch=4)
    # a strategy with no kernel choice is still a strategy (0, not None: no start-up
    # benchmark again; catches a server that re-runs it whenever nothing was promoted)
    assert AdaptiveRuntime(eng, params, state_dir=tmp_path).load() == 0
    assert (params.max_batch, params.token_budget, params.prefill_chunk) == (4, 128, 64)
    store.save(rt.path, rt.ident, {}, {"token_budget": 10**6, "max_batch": True})
    params = SchedulerParams(max_batch=4)
    AdaptiveRuntime(eng, params, state_dir=tmp_path).load()
    assert (params.max_batch, params.token_budget) == (4, 512)


def test_hot_classes_with_a_counter_of_unknown_rate(monkeypatch):
    """cycle_hz() of 0 (a counter whose rate is unknown): the classes are still ranked by their
    share of the sampled cycles, no ZeroDivisionError. Catches KernelTuner.hot dividing unguarded."""
    import reame.adaptive.tuner as tuner_mod
    monkeypatch.setattr(tuner_mod, "cycle_hz", lambda: 0.0)
    stats = np.array([[1, 10], [1, 300], [1, 90]], np.int64)
    classes = {n: SimpleNamespace(slots=[i], seconds=0.0) for i, n in enumerate("abc")}
    fake = SimpleNamespace(classes=classes, table=SimpleNamespace(stats=stats), min_share=0.05)
    assert [c.slots for c in tuner_mod.KernelTuner.hot(fake)] == [[1], [2]]


def test_promoting_a_variant_live_as_a_trial_records_it():
    """The pair's last step ran the candidate (live as a trial) when it is promoted: the slot
    leaves the trial state and the replaced variant is in its history."""
    from reame.adaptive.tuner import KernelTuner, SlotClass
    from reame.dispatch import DispatchTable
    from test_runtime import kernels as _k  # noqa: F401
    from test_runtime import kernel_set
    ks = kernel_set(320)
    table = DispatchTable(capacity=4)
    slot = table.add("blk.0.attn_norm@1", ks["rms"])
    table.stage(slot, ks["rms_generic"], verify=False, record=False)     # the trial arm
    table.commit()
    assert table.slots[slot].base is ks["rms"]
    t = KernelTuner.__new__(KernelTuner)
    t.table = table
    t._stage_all(SlotClass("k", "1", [slot], ks["rms"].spec), ks["rms_generic"])
    table.commit()
    s = table.slots[slot]
    assert s.kernel is ks["rms_generic"] and s.base is None and s.history == [ks["rms"]]


def _drive_trial(sizes, slowdown=1.5, **options):
    """A KernelTuner with one class in trial, fed steps of the given token counts (a function
    of the arm: True for the candidate); the class costs W + c n cycles per step, the
    candidate `slowdown` times that. Returns the tuner after the trial ended (or 4000 steps)."""
    from reame.adaptive.decide import Comparison
    from reame.adaptive.tuner import KernelTuner, SlotClass, Trial
    stats = np.zeros((1, 2), np.int64)
    slots = []
    table = SimpleNamespace(stats=stats, slots=slots,
                            stage=lambda i, k, **kw: setattr(slots[i], "kernel", k))
    t = KernelTuner(SimpleNamespace(table=table), explore_share=1.0, **options)
    slots.append(SimpleNamespace(kernel=None))           # after _group: no class of its own
    live, cand = (SimpleNamespace(spec=SimpleNamespace(label=lambda n=n: n)) for n in "LC")
    cls = SlotClass("k@512", "512", [0], live.spec)
    t.trial = Trial(cls, live, cand, Comparison(min_gain=0.02))
    rng = np.random.default_rng(0)
    for _ in range(4000):
        if t.trial is None:
            break
        timed = t.before_step("512")
        b = slots[0].kernel is cand
        n = sizes(b, rng)
        before = float(stats[0, 1])
        stats[0, 1] += int((1e6 + 1e3 * n) * (slowdown if b else 1.0) * rng.uniform(0.97, 1.03))
        t.after_step("512", n, timed, before)
    return t, cls


def test_a_pair_of_unlike_step_sizes_decides_nothing():
    """The prompt program serves 17..512 tokens: a candidate 1.5x slower that happens to run on
    the long prompt steps while the live variant runs on short ones looks 10x faster per token.
    Pairs of unlike sizes are dropped (the trial ends undecided); with steps of like sizes the
    same candidate is rejected. Catches pairing any two steps of a program (the tuner that
    promoted the generic matmul for 512-token prompts in a multi-turn trace, 2026-12-02)."""
    t, cls = _drive_trial(lambda b, rng: 400 if b else 20, max_unlike=50)
    assert t.promoted == 0 and cls.tried == {"C": "undecided (steps of unlike sizes)"}
    t, cls = _drive_trial(lambda b, rng: int(rng.integers(290, 320)))
    assert t.promoted == 0 and cls.tried["C"].startswith("rejected")
    t, cls = _drive_trial(lambda b, rng: int(rng.integers(290, 320)), slowdown=0.8)
    assert t.promoted == 1


def test_scheduler_feeds_the_batch_tuner_and_the_batch_is_saved(model, tmp_path):
    """The scheduler tells the runtime how many sequences run and wait at every step (catches:
    a runtime never told that requests wait, whose batch can never grow); a saturated server
    probes a bigger batch; the batch it chose is saved and a restarted server starts from it
    (never below its own starting batch, never above its slots)."""
    eng = engine(model)                                  # 4 KV slots
    params = SchedulerParams(max_batch=2)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path,
                         batch_options=dict(window=2, settle=0, patience=50))
    seen = []
    observe = rt.batch.observe
    rt.batch.observe = lambda *a, **kw: (seen.append(a[3:]), observe(*a, **kw))[1]
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        greedy_run(model, s, n_seqs=6, max_tokens=30)
    finally:
        s.stop()
    assert (2, 4) in seen                               # 2 running, 4 waiting
    assert rt.batch.probes >= 1 and rt.report()["batch"]["probes"] == rt.batch.probes
    params.max_batch = 4                                 # as if the probe had been kept
    assert rt.save()
    p2 = SchedulerParams(max_batch=2)
    rt2 = AdaptiveRuntime(engine(model), p2, state_dir=tmp_path)
    rt2.load()
    assert p2.max_batch == 4 and rt2.batch.start == 2


def run_prompts(model, sched, prompts, max_tokens=4):
    """Each prompt in turn (one finished before the next); the cached prompt tokens of each."""
    tok = Tokenizer.from_metadata(model.metadata)
    cached = []
    for p in prompts:
        g = Generation(tok, p, SamplingParams(temperature=0), max_tokens=max_tokens,
                       ignore_eos=True, n_ctx=256)
        r = sched.submit([p], [[g]])
        while (ev := r.out.get(timeout=120 * TIME_SCALE)) is not DONE:
            assert ev.error is None, ev.error
        cached.append(r.leads[0].n_cached)
    return cached


def test_hot_prefixes_are_saved_and_computed_again_at_start(model, tmp_path):
    """Prompts sharing a 40-token prefix (2 blocks of 16) find it cached; the runtime saves it
    as a hot prefix, and a restarted server computes it before the first request, which then
    finds it cached (catches: a strategy without prefixes, or prefixes never computed)."""
    from reame.server.warmup import PrefixWarmer
    prefix, prompts = shared_prefix_prompts(model, seed=3, n=5, tail=5)
    eng = engine(model)
    params = SchedulerParams(max_batch=4)
    rt = AdaptiveRuntime(eng, params, state_dir=tmp_path)
    s = Scheduler(eng, params, adaptive=rt).start()
    try:
        assert run_prompts(model, s, prompts) == [0, 32, 32, 32, 32]
    finally:
        s.stop()
    assert rt.hot_prefixes() == [prefix[:32]]
    assert rt.report()["hot_prefixes"][0] == {"tokens": 32, "found": 4}
    assert rt.save()

    eng2 = engine(model)
    params2 = SchedulerParams(max_batch=4)
    rt2 = AdaptiveRuntime(eng2, params2, state_dir=tmp_path)
    rt2.load()
    assert rt2.saved_prefixes == [prefix[:32]]
    s2 = Scheduler(eng2, params2, adaptive=rt2).start()
    try:
        warm = PrefixWarmer(s2, rt2.saved_prefixes, block_size=16)      # as the server does
        while warm.tick():
            if warm.current is not None:
                while warm.current.out.get(timeout=120 * TIME_SCALE) is not DONE:
                    pass
        assert run_prompts(model, s2, prompts[:1]) == [32]    # the first request hits
    finally:
        s2.stop()
    body = json.loads(rt.path.read_text())
    rt.path.write_text(json.dumps({**body, "prefixes": [[-1]]}))   # nonsense: ignored
    assert AdaptiveRuntime(engine(model), SchedulerParams(max_batch=4),
                           state_dir=tmp_path).load() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_candidate_builds_run_at_the_lowest_priority_without_renicing_the_server():
    """The tuner's build-and-check thread runs at nice 19, the server's other threads keep
    theirs. Catches a build thread competing with the step's threads at equal priority, and
    a nice that lands on the whole process (PRIO_PROCESS with the pid)."""
    import os
    import threading

    from reame.pace import background_priority
    seen = {}

    def work():
        background_priority()
        seen["build"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["build"] == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before < 19
    assert os.getpriority(os.PRIO_PROCESS, 0) == before

    # and the tuner's own build thread calls it before building
    from types import SimpleNamespace

    import reame.adaptive.tuner as tuner_mod
    done = threading.Event()

    def build(spec, isa):
        seen["tuner"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        done.set()
        raise RuntimeError("not built: the test only looks at the thread")

    tuner = tuner_mod.KernelTuner.__new__(tuner_mod.KernelTuner)
    tuner.build_nice = 19                               # the default
    tuner.exact = False
    tuner.table = SimpleNamespace(slots=[SimpleNamespace(kernel=None)])
    tuner.plan = SimpleNamespace(kernel=lambda spec: build(spec, None))   # the KernelPlan

    class Spec:                                         # hashable, as KernelSpecs are
        def label(self):
            return "fake"
    cls = SimpleNamespace(slots=[0], tried={})
    tuner._build_async(cls, Spec())
    assert done.wait(30)
    assert seen["tuner"] == 19


def test_a_candidate_is_checked_at_each_slot_shape_of_its_class():
    """A class's slots share a spec, not always their counts or slicing (q-norm over 14 heads
    beside k-norm over 2): the candidate is checked on one slot of each shape before any of
    them may run it. Catches a check of the class's first slot only."""
    import threading
    from types import SimpleNamespace

    import reame.adaptive.tuner as tuner_mod
    checked, done = [], threading.Event()

    def slot(lo, hi, step):
        return SimpleNamespace(kernel=None, lo=lo, hi=hi, step=step, slices=4, threads=2,
                               verified=set())

    slots = [slot(14, 56, 14), slot(14, 56, 14), slot(2, 8, 2)]

    def verify(i, k):
        checked.append(i)
        if i == 2:
            done.set()
            raise tuner_mod.VariantRejected("wrong at the k-norm's counts")

    tuner = tuner_mod.KernelTuner.__new__(tuner_mod.KernelTuner)
    tuner.build_nice, tuner.exact = 0, False
    tuner.table = SimpleNamespace(slots=slots, verify=verify)
    kern = SimpleNamespace(symbol="cand")
    tuner.plan = SimpleNamespace(kernel=lambda spec: kern)          # the KernelPlan
    tuner.refused, tuner._lock, tuner._ready = 0, threading.Lock(), []
    tuner._event = lambda msg, level=None: None
    cls = SimpleNamespace(slots=[0, 1, 2], tried={}, key="rms_norm@4")

    class Spec:
        def label(self):
            return "cand"

    spec = Spec()
    tuner._build_async(cls, spec)
    assert done.wait(30)
    for _ in range(100):
        if not tuner._building:
            break
        time.sleep(0.01)
    assert checked == [0, 2]                            # one per shape
    assert tuner.refused == 1 and not tuner._ready
    assert cls.tried["cand"].startswith("refused")
