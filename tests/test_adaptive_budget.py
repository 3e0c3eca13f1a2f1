"""The latency-targeted token budget (issue 27 item 3: reame/adaptive/budget.py), on simulated
step streams and through Scheduler.step() with a fake engine whose forward pass costs time on
an injected clock (no wall clock, no threads)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

import reame.adaptive.runtime as runtime_mod
import reame.scheduler as scheduler_mod
from reame.adaptive import AdaptiveRuntime
from reame.adaptive.budget import BudgetController, StepFit
from reame.planner import SchedulerParams
from reame.scheduler import Scheduler
from tests.test_planner import FakeEngine
from tests.test_planner import FakeGen as _FakeGen

LIMIT = 0.25


def law(decode, prompt):
    """A step's seconds: prompt tokens make it slow (16 decoding + 496 prompt: 1.08 s)."""
    return 0.02 + 0.004 * decode + 0.002 * prompt


def params(max_batch=16):
    return SchedulerParams(max_batch=max_batch, token_budget=512, prefill_chunk=512)


def saturated(ctl, steps, decode=16, cost=law, noise=0.0, seed=0, ratio=None):
    """Steps with `decode` decoding sequences (a quarter fewer at times: sequences finish and
    are replaced) and prompts always waiting: each takes what the planner would give the
    prompts (the chunk, within the budget less the decode tokens), or on a quarter of the
    steps part of it (a prompt ends in the step). `ratio`: the traffic's
    prompt tokens per generated token (None: one token per decoding sequence). Returns
    [(decode, prompt tokens, seconds, the chunk it ran with)] per step; every choice passes
    SchedulerParams.check."""
    rng = random.Random(seed)
    p, out = ctl.params, []
    d = decode
    for _ in range(steps):
        prompt = min(p.prefill_chunk, p.token_budget - d)
        if rng.random() < 0.25:
            prompt = rng.randint(1, prompt)
        seconds = cost(d, prompt) * (1 + noise * (2 * rng.random() - 1))
        ctl.observe(d, prompt, seconds, p.prefill_chunk,
                    sampled=None if ratio is None else prompt / ratio)
        out.append((d, prompt, seconds, p.prefill_chunk))
        d = decode - rng.randint(0, decode // 4)
        ctl.choose(d, running=decode + 2)
        p.check(512, 64)
    return out


def best(d, cost_per_prompt=0.002):
    """The most prompt tokens a step of `law` with d decoding fits under the limit."""
    return (LIMIT - law(d, 0)) / cost_per_prompt


def p95(xs):
    xs = sorted(xs)
    return xs[int(0.95 * len(xs) + 0.5) - 1]


# ---- (1) the budget shrinks until the step is under the limit, and no further ----

@pytest.mark.parametrize("noise", [0.0, 0.1])
def test_the_budget_shrinks_until_decode_steps_are_under_the_limit(noise):
    """16 sequences decode while prompts always wait; the fixed 512-token budget makes every
    step 1.08 s. The controller brings the p95 step under the 0.25 s limit, at the largest
    prompt budget that fits (with noise: the margin of its p95 residual). Catches the fixed
    512 budget (nothing moves: 1.08 s), one that shrinks to the floor whatever the cost
    (prompts crawl at 64 a step where 83 fit) and, with noise, a budget for the mean step
    without the margin (a third of the steps over the limit)."""
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    steps = saturated(ctl, 400, noise=noise)
    tail = steps[-200:]
    assert p95([s for _, _, s, _ in tail]) <= LIMIT
    for d, _, _, chunk in tail:                  # 83 prompt tokens fit beside 16 exactly
        assert (0.8 if noise else 0.97) * best(d) <= chunk <= best(d) + 1
    ctl.choose(16)
    chunk = ctl.params.prefill_chunk             # the fit is right where it budgets
    assert ctl.predict(16, chunk) == pytest.approx(law(16, chunk), rel=0.05 if noise else 1e-3)
    assert ctl.margin * ctl.predict(16, chunk) <= LIMIT


def test_it_follows_a_change_of_cost():
    """Prompt tokens cost twice as much for a while (longer contexts, another load on the
    machine), then as before: the steps are back under the limit within 100 (its predictions
    miss by a third: the fit forgets the old cost at once) and the budget grows back within
    300. Catches a fit that does not see the change (the old and new costs mixed for a
    half-life: the throughput floor, trusting its inflated fixed cost, holds the steps over
    the limit), a budget that only ever shrinks and one that leaves out the margin."""
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512, floor=16)
    saturated(ctl, 300)
    before = ctl.params.prefill_chunk
    slow = lambda d, p: 0.02 + 0.004 * d + 0.004 * p          # noqa: E731
    steps = saturated(ctl, 300, cost=slow)
    assert p95([s for _, _, s, _ in steps[100:]]) <= LIMIT
    assert ctl.params.prefill_chunk < 0.6 * before
    saturated(ctl, 300)
    assert ctl.params.prefill_chunk >= 0.9 * before


def test_the_fit_forgets_an_old_cost():
    """3,000 steps at one cost, then 800 (4 half-lives) at twice the prompt cost: the fit's prompt cost is
    the new one within 10%. Catches a fit without forgetting (still mostly the old cost)."""
    f = StepFit()
    rng = random.Random(1)
    for cost in (0.002, 0.004):
        for _ in range(3000 if cost == 0.002 else 800):
            d, p = rng.randint(4, 16), rng.randint(32, 512)
            f.observe(d, p, 0.02 + 0.004 * d + cost * p)
    assert f.coef()[2] == pytest.approx(0.004, rel=0.1)


# ---- (2) prompts still progress ----

def test_never_below_the_floor_and_the_full_budget_when_nothing_decodes():
    """Decode alone is over the limit (0.3 s + 10 ms a sequence): prompts still get the floor
    (64 tokens) every step, never less; when no sequence decodes the step is all prompt and
    takes the full 512 (there is no token to protect), and back to the floor once one decodes.
    Catches a budget without a floor (prompts starve behind a heavy decode) and one that
    keeps the shrunken budget with nothing decoding (prompts crawl for no one's benefit)."""
    heavy = lambda d, p: 0.3 + 0.01 * d + 0.002 * p           # noqa: E731
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    steps = saturated(ctl, 100, cost=heavy)
    assert min(chunk for *_, chunk in steps) >= 64
    ctl.choose(0, running=3)
    assert (ctl.params.token_budget, ctl.params.prefill_chunk) == (512, 512)
    ctl.choose(16, running=16)
    assert ctl.params.prefill_chunk >= 64 and ctl.params.token_budget - 16 >= 64
    ctl.max_loss = 1.0                                    # (the throughput floor aside)
    ctl.choose(16, running=16)
    assert ctl.params.prefill_chunk == 64


def throughput(cost, ratio, prompt, decode, max_batch=16):
    """Generated tokens a second at saturation with `prompt` tokens a step (the model the
    floor is built on, with the true cost): R / prompt steps per token when prompts set the
    pace, 1 / max_batch when decoding does."""
    steps = max(1 / max_batch, ratio / prompt)
    per_step = cost(decode, prompt)
    return 1 / (steps * (per_step - 2.4e-3 * prompt) + ratio * 2.4e-3)


def test_where_prompts_set_the_pace_the_budget_costs_at_most_5_percent():
    """Long documents with short answers (60 prompt tokens per generated one) on this VM's
    live cost (95 ms a step + 2.4 ms a prompt token: bench/adaptive.py's documents phase,
    2026-12-02): the budget stops where the modelled throughput is 95% of the configured
    budget's, its steps still shorter than the configured ones; with chats (3 prompt tokens
    per generated one) the batch stays fed at the latency target and nothing binds. Catches a
    budget without the throughput floor (64-token steps: the documents at 0.62x the
    throughput in that run)."""
    live = lambda d, p: 0.095 + 2.4e-3 * p                    # noqa: E731
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    steps = saturated(ctl, 300, decode=4, cost=live, ratio=60)
    d, _, _, prompt = steps[-1]
    seconds = live(d, prompt)
    full = throughput(live, 60, 512 - d, d)
    assert throughput(live, 60, prompt, d) >= 0.94 * full
    assert seconds <= 0.7 * live(d, 512 - d)
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    saturated(ctl, 300, decode=16, cost=live, ratio=3)
    assert ctl.throughput_floor(16) <= 64
    ctl.choose(16, running=16)
    assert ctl.params.prefill_chunk == 64                     # (0.25 - 0.095) / 2.4 ms < 64


def test_the_traffic_mix_follows_a_change_of_phase():
    """1,000 steps of chats (6 prompt tokens per generated one), then 600 of long documents
    (60): R is the documents' within 15% (a half-life of 100 steps). Catches an R kept over a
    long window (a half-life of 1,000 steps, 4 minutes of 0.25 s steps: bench/adaptive.py's
    documents phase after a mixed one, 2026-12-02, read 15.6 for ~60, and the throughput floor
    let the budget cost 11%)."""
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    for _ in range(1000):
        ctl.observe(16, 96, 0.2, 128, sampled=16)
    for _ in range(600):
        ctl.observe(4, 240, 0.4, 256, sampled=4)
    assert ctl.prompt_per_output == pytest.approx(60, rel=0.15)


def test_every_decoding_sequence_keeps_its_token():
    """A tiny prompt budget beside a batch limit of 16 and 20 running sequences (a lowered
    limit drains as sequences finish): the token budget stays >= the batch limit and the
    sequences running, so the planner's budget less the decode tokens never goes negative
    (SchedulerParams.check passes). Catches token_budget = decode + chunk alone."""
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512, floor=4)
    ctl.load({"model": [0.0, 0.12, 0.02], "margin": 1.0})     # 2 decoding: 0.24 s already
    ctl.choose(2, running=4)
    assert ctl.params.prefill_chunk == 4
    assert ctl.params.token_budget >= 16
    ctl.choose(3, running=20)
    assert ctl.params.token_budget >= 20
    ctl.params.check(512, 64)


def test_the_fit_survives_collinear_steps():
    """Every step at saturation has decode + prompt = 512 (collinear with the constant): the
    fit still predicts those steps. Catches a plain solve of the normal equations (singular)."""
    f = StepFit()
    for d in range(17):
        for _ in range(3):
            f.observe(d, 512 - d, law(d, 512 - d))
    assert all(v >= 0 for v in f.coef())
    assert f.predict(16, 496) == pytest.approx(law(16, 496), rel=1e-3)


def test_no_negative_cost():
    """Decode tokens that measure a hair cheaper than none (noise, where they cost nothing
    beside the prompt): the fit says they cost 0, so more decoding sequences never earn a step
    more prompt tokens. Catches an unconstrained fit (b < 0: the budget grows with the
    batch)."""
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    for _ in range(5):
        for d, p, s in ((0, 100, 0.22), (16, 100, 0.21), (0, 200, 0.42), (16, 200, 0.41)):
            ctl.observe(d, p, s)
    assert min(ctl.coef()) >= 0
    assert ctl.prompt_budget(16) <= ctl.prompt_budget(1)


def test_the_next_step_is_budgeted_for_the_sequences_that_will_decode():
    """A step that only finished 5 prompts (no decode token in it): the next step has 5
    decoding sequences, so it gets the shrunken budget, not the full one. Catches a budget
    chosen for the decode tokens of the step just run (stale: 0 here, so 512 prompt tokens
    beside 5 decoding sequences)."""
    from reame.planner import RUNNING, StepPlan, Seq, Work
    ctl = BudgetController(params(), tpot_limit=LIMIT, engine_tokens=512)
    ctl.load({"model": [0.02, 0.004, 0.002], "margin": 1.0})
    work = []
    for i in range(5):
        seq = Seq(list(range(3, 24)))
        seq.state, seq.n_computed = RUNNING, 20         # its prompt done, a token sampled
        work.append(Work(seq, 0, 20))
    ctl.after_step(StepPlan([0] * 100, work, 0), 0.22, running=5)
    assert ctl.params.prefill_chunk == int((LIMIT - law(5, 0)) / 0.002)
    assert ctl.params.token_budget == 5 + ctl.params.prefill_chunk


# ---- (3) only under --adaptive on; saved and loaded with the strategy ----

class Clock:
    """time.monotonic / perf_counter for the scheduler and runtime modules: advanced only by
    the fake engine's forward pass."""

    def __init__(self):
        self.t = 1000.0

    def monotonic(self):
        return self.t

    perf_counter = monotonic


class TimedEngine(FakeEngine):
    """FakeEngine whose forward pass costs 20 ms + 4 ms per logits row + 2 ms per other
    token on the injected clock."""

    def __init__(self, clock, **kw):
        super().__init__(**kw)
        self.clock = clock

    def forward(self, batch):
        rows = len(batch.logits_rows)
        self.clock.t += 0.02 + 0.004 * rows + 0.002 * (len(batch) - rows)
        return super().forward(batch)


class FakeGen(_FakeGen):
    constraint = None

    def finish(self, reason):
        self.finished = True
        return ""


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(runtime_mod, "time", c)
    monkeypatch.setattr(scheduler_mod, "time", c)
    return c


def serve(clock, enabled, state=None):
    """6 chats decode (400 tokens each) while two 1,500-token documents arrive one after the
    other. Returns (runtime, scheduler, the intervals between the chats' tokens while the
    second document's prompt was computed, the steps that took, the params seen per step)."""
    eng = TimedEngine(clock, slots=8, blocks=1024, bs=16, n_ctx=4096)
    p = SchedulerParams(max_batch=8, token_budget=512, prefill_chunk=512)
    rt = AdaptiveRuntime(eng, p, enabled=enabled, tpot_limit=LIMIT, report_every=0, save_every=0)
    if state is not None:
        rt._load_params(state)
    s = Scheduler(eng, p, adaptive=rt)
    rng = random.Random(0)
    chats = [s.submit([[rng.randrange(3, 900) for _ in range(20)]], [[FakeGen(400)]])
             for _ in range(6)]
    seen = []

    def step():
        s.step(clock.t)
        seen.append((p.token_budget, p.prefill_chunk))

    for _ in range(3):
        step()
    docs = []
    for _ in range(2):
        d = s.submit([[rng.randrange(3, 900) for _ in range(1500)]], [[FakeGen(2)]])
        docs.append(d)
        t0, n0 = clock.t, s.steps
        while d.out.empty():
            step()
            assert s.steps - n0 < 100
    times = {}
    for r in chats:
        while not r.out.empty():
            ev = r.out.get()
            if ev is not None and ev.step is not None:
                times.setdefault(id(r), []).append(ev.t)
    gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:]) if a >= t0]
    return rt, s, gaps, s.steps - n0, seen


def test_off_keeps_the_built_in_budget(clock):
    """--adaptive off (enabled=False) over the same slow prompt steps: token_budget and
    prefill_chunk stay 512 on every step, and the decoding chats wait ~1.06 s a token beside
    the document. Catches a controller that runs under off (or frozen)."""
    rt, s, gaps, _, seen = serve(clock, enabled=False)
    assert set(seen) == {(512, 512)}
    assert p95(gaps) > 0.9
    assert rt.report()["budget"]["moving"] is False


def test_through_the_scheduler_decode_stays_under_the_limit_while_a_document_computes(clock):
    """The same traffic under --adaptive on: while the second document's 1,500-token prompt
    is computed, the p95 time between the decoding chats' tokens is under the 0.25 s limit
    (1.06 s with the fixed budget), and the prompt still progresses (done within 1,500 / 64
    steps: the floor). Catches the fixed 512 budget, a runtime that does not count the
    sequences decoding next (the full budget: no one to protect), a budget chosen without the
    decode tokens' cost, one with no estimate before the fit has MIN_STEPS steps (the first
    document at 512) and one without the margin."""
    rt, s, gaps, steps, seen = serve(clock, enabled=True)
    assert p95(gaps) <= LIMIT
    assert steps <= -(-1500 // 64)
    r = rt.report()["budget"]
    assert r["moving"] and r["model"]["per_prompt_token_ms"] == pytest.approx(2.0, rel=0.2)
    assert r["mixed_step_p95_s"] <= LIMIT * 1.5


def test_saved_with_the_strategy_frozen_runs_it_and_on_budgets_from_the_first_step(clock):
    """The on run's scheduler state holds the budget it chose (medians) and its fit: a frozen
    runtime loads those values and does not move them; an on runtime starts from the saved
    fit, so the first document's steps are already under the limit. Catches saving the
    instantaneous budget (the full 512 of a step with nothing decoding) or dropping the
    fit."""
    rt, *_ = serve(clock, enabled=True)
    rt.budget.choose(0)                 # the traffic ends: nothing decodes, the full budget
    assert rt.params.token_budget == 512
    state = rt._scheduler_state()
    assert state["prefill_chunk"] < 512 and state["token_budget"] < 512
    assert len(state["budget"]["model"]) == 3
    frozen, _, _, _, seen = serve(clock, enabled=False, state=state)
    assert set(seen) == {(state["token_budget"], state["prefill_chunk"])}
    on = AdaptiveRuntime(FakeEngine(slots=8), params(8), enabled=True)
    on._load_params(state)
    assert on.budget.ready and on.budget.prompt_budget(6) < 512


# ---- bench/adaptive.py's mixed phase ----

def test_the_bench_table_says_what_the_budget_did(clock):
    """bench/adaptive.py's line for an adaptive run, from its GET /v1/adaptive report."""
    from bench.adaptive import budget_line
    rt, *_ = serve(clock, enabled=True)
    line = budget_line({"label": "adaptive on", "report": {"budget": rt.report()["budget"]}})
    assert line.startswith("adaptive on: token budget for a 0.25 s step: step ")
    assert "(configured 512)" in line
    line = budget_line({"label": "adaptive on"}, rt.report(), "adaptive on, end of mixed")
    assert line.startswith("adaptive on, end of mixed: token budget")
    assert budget_line({"label": "adaptive off", "report": {"budget": {"moving": False}}}) is None


def test_the_mixed_phase_interleaves_documents_and_chats():
    """The long-document + chat mix: both kinds arrive in one phase, documents a share of the
    arrivals. Catches a mixed phase that is one kind only."""
    from bench.adaptive import PHASES, make_trace
    tr = make_trace(["mixed"], [PHASES["mixed"][0]], 300.0, seed=1)
    docs = [r for r in tr if r["prompt"].startswith("Document:")]
    assert 0.15 < len(docs) / len(tr) < 0.45
    assert {r["max_tokens"] for r in docs} == {24}
    assert {r["max_tokens"] for r in tr if r not in docs} == {64}
