"""Speculative decoding learned from traffic (reame/speculate, the planner's verify path).

The fake engine of test_planner stores each token id as its key through the block tables and
answers, for each logits row, a function of every key the row's attention reads. Here that
function mostly *copies* (the token PERIOD positions back, as a model echoing its prompt does), so drafts are accepted often, and hashes otherwise,
so they are also rejected. A rejected draft token whose K/V stayed visible, a block registered
with one in it, or a position not rolled back changes the text, which `expected` computes
without any cache or speculation.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from test_planner import FakeEngine, FakeGen

from reame.planner import Planner, SchedulerParams, Seq
from reame.speculate import Speculator
from reame.speculate import control
from reame.speculate.control import StepCost, allocate
from reame.speculate.index import TokenIndex


PERIOD = 20


def choose(*args):
    """The allocation alone (control.allocate also names the sequence that held it)."""
    return allocate(*args)[0]


def echo_next(ctx) -> int:
    n = len(ctx)
    h = 0
    for i, t in enumerate(ctx):
        h = (h * 1000003 + (int(t) + 1) * (i + 7)) % 2**61
    if n >= PERIOD and h % 6:                  # 5 in 6: copy the token PERIOD back
        return int(ctx[n - PERIOD])
    return 3 + h % 997


def expected(prompt, n) -> list[int]:
    toks, out = list(prompt), []
    for _ in range(n):
        out.append(echo_next(toks))
        toks.append(out[-1])
    return out


def echo_row(keys):
    return [echo_next(keys)]


def cheap_costs(spec, base=0.010, per_token=0.0003):
    """A machine where a step of n tokens costs base + n * per_token (multi-token steps cheap)."""
    for n in range(1, 80):
        spec.step_done(n, base + n * per_token)


def make(spec=None, slots=4, blocks=256, bs=4, row=echo_row, dtype=np.int64, **params):
    eng = FakeEngine(slots, blocks, bs, 512, row, dtype)
    params.setdefault("max_batch", slots)
    return Planner(eng.kv, SchedulerParams(**params), speculator=spec), eng


def run_all(planner, engine, limit=20_000):
    steps = 0
    for _ in range(limit):
        plan = planner.plan()
        if plan is None:
            assert not planner.running and not planner.waiting
            return steps
        planner.apply(plan, engine.forward(plan.batch))
        planner.check()
        steps += 1
    raise AssertionError("the planner did not finish")


def echo_prompt(rng, n=60):
    """A prompt that repeats itself: a PERIOD-token phrase three times, with a few changes."""
    phrase = [int(x) for x in rng.integers(3, 1000, PERIOD)]
    out = []
    while len(out) < n:
        out += [t if rng.random() > 0.1 else int(rng.integers(3, 1000)) for t in phrase]
    return out[:n]


def add(planner, prompt, max_tokens):
    s = Seq(prompt, FakeGen(max_tokens))
    planner.add(s)
    return s


def test_drafts_are_verified_and_the_text_is_unchanged():
    """Echoing prompts, 4 at a time: with speculation the outputs are exactly the plain ones,
    drafts were accepted and the run took fewer steps. Catches drafts that are never verified
    (as many steps), an accepted token appended twice or a correction lost (other text)."""
    rng = np.random.default_rng(0)
    prompts = [echo_prompt(rng) for _ in range(8)]
    plain, eng0 = make()
    for p in prompts:
        add(plain, p, 40)
    steps_off = run_all(plain, eng0)
    spec = Speculator(1000)
    cheap_costs(spec)
    p, eng = make(spec)
    seqs = [add(p, pr, 40) for pr in prompts]
    steps_on = run_all(p, eng)
    for s, pr in zip(seqs, prompts):
        assert s.gen.output_ids == expected(pr, 40)
    r = spec.report()
    assert r["accepted_tokens"] > 100 and r["draft_tokens"] >= r["accepted_tokens"]
    assert r["accepted_tokens"] < r["draft_tokens"], "some drafts must also be rejected"
    assert steps_on < 0.7 * steps_off
    assert any(len(b) > 4 and len(b.logits_rows) > 4 for b in eng.batches)


class WrongDrafts:
    """A speculator that drafts the right continuation with a wrong token in it (known, so the
    test can check where rejections happened), and records what was verified."""

    def __init__(self):
        self.verified_calls = []
        self.finished_seqs = []

    def propose(self, seqs, caps, base_tokens, max_total):
        out = []
        for s, cap in zip(seqs, caps):
            right = expected(s.tokens, 4)
            d = [right[0], 2, right[2]][:min(cap, 3)]     # 2 is never produced by echo_next
            out.append(d)
        return out

    def verified(self, seq, draft, accepted, emitted):
        self.verified_calls.append((list(draft), accepted, emitted))

    def step_done(self, n, seconds):
        pass

    def finished(self, seq):
        self.finished_seqs.append(seq)


def test_rejected_tokens_never_reach_a_later_step_or_the_prefix_cache():
    """Every draft carries a wrong token at its second place: the first draft token is
    accepted, the wrong one rejected and the position rolled back. The text stays right, no
    later batch reads token 2 at any position, and every block in the prefix cache holds the
    tokens its hash was made from (so a next turn hitting the cache is right too). Catches a
    rollback that keeps n_computed past the rejected token, a block registered before the
    rollback, or rejected blocks not released (planner.check's reference counts)."""
    spec = WrongDrafts()
    p, eng = make(spec, slots=2, blocks=64, bs=4)
    rng = np.random.default_rng(3)
    prompts = [echo_prompt(rng, 30) for _ in range(3)]
    seqs = [add(p, pr, 25) for pr in prompts]
    run_all(p, eng)
    for s, pr in zip(seqs, prompts):
        assert s.gen.output_ids == expected(pr, 25)
    assert spec.verified_calls and all(a <= 1 for _, a, _ in spec.verified_calls)
    assert any(a == 1 for _, a, _ in spec.verified_calls)
    # the prefix cache: each registered block holds the tokens of its place in some sequence
    cached = {h: b for h, b in p.pool.by_hash.items()}
    assert cached
    from reame.kv_blocks import chain_hashes
    for s, pr in zip(seqs, prompts):
        toks = s.tokens
        for j, h in enumerate(chain_hashes(toks, 4)):
            b = cached.get(h)
            if b is not None:
                assert eng.kv.k[0][b, 0, :, 0].astype(int).tolist() == toks[4 * j:4 * j + 4]
    # a next turn over the first conversation hits the cache and stays right
    nxt = seqs[0].tokens + [5, 6, 7]
    p.speculator = None
    s = add(p, nxt, 10)
    run_all(p, eng)
    assert s.n_cached >= 40
    assert s.gen.output_ids == expected(nxt, 10)


# ---- the controller ----

def curve(fn, sizes=range(1, 600)):
    c = StepCost()
    for n in sizes:
        for _ in range(3):
            c.observe(n, fn(n))
    return c


CHEAP = lambda n: 0.010 + 0.0003 * n          # noqa: E731  AVX-512/AMX: 8 tokens ~1.2x one
SATURATED = lambda n: 0.001 * n               # noqa: E731  every token costs the same
AVX2 = lambda n: 0.010 * (1 + 0.45 * (n - 1))  # noqa: E731  an 8-token step ~4x one


def test_the_controller_drafts_at_low_load_and_stops_at_saturation():
    """Simulated cost curves: one sequence offering 8 well-accepted tokens drafts them all on a
    machine where multi-token steps are cheap; 32 sequences at a saturated step (cost
    proportional to tokens) draft nothing; poorly accepted drafts are declined even when cheap;
    on an AVX2-like curve (8 tokens ~4x one) only a draft accepted almost surely pays. Catches a
    controller that drafts a fixed length, ignores the measured costs or the acceptance."""
    good = [[0.9] * 8]
    assert choose(good, 1, curve(CHEAP), 100) == [8]
    assert choose([[0.9] * 8] * 32, 32, curve(SATURATED), 400) == [0] * 32
    # beside a prompt chunk, the chunk's tokens are work too: beside a short one, 15 draft
    # tokens for the decoding sequence are worth their cost; beside a 512-token one (where a
    # token costs as much as on a saturated curve) they are not
    assert choose([[0.9] * 15], 21, curve(CHEAP), 100)[0] >= 8
    assert choose([[0.9] * 15], 513, curve(CHEAP), 100)[0] <= 1
    assert choose([[0.01] * 8], 1, curve(CHEAP), 100) == [0]   # break-even: ~3%
    assert choose([[0.3] * 8], 1, curve(AVX2), 100) == [0]
    assert sum(choose([[0.99] * 8], 1, curve(AVX2), 100)) > 0
    # at saturation with a fixed part: drafts go to the best-accepted sequences first
    mixed = [[0.95] * 4, [0.2] * 4]
    ks = choose(mixed, 2, curve(CHEAP), 100)
    assert ks[0] == 4 and ks[1] <= 1
    # the budget bounds the total
    assert sum(choose([[0.9] * 8] * 4, 4, curve(CHEAP), 5)) == 5


def test_a_depth_never_verified_reads_as_the_depth_before_it():
    """A class whose drafts were verified 2 deep 40 times, nearly all accepted: depths 3.. have
    no evidence and read as depth 2 (a copy that held for 2 tokens holds for a 3rd about as
    well), so on the curve measured for SmolLM2 on a 2-vCPU EPYC (a 16-token step 3.5x a
    1-token one) the sequence drafts past 2, and the deeper depths get verified; evidence at a
    depth still rules it (depth 3 rejected 40 times: the draft stops at 2). Catches the flat
    prior at every unverified depth (0.6 at depth 3: drafts stay at the 2 they started at,
    whatever depths 1-2 show)."""
    acc = control.Acceptance()
    for _ in range(40):
        acc.observe("c", 20, 2, 2)
    rates = acc.rates("c", 20, 15)
    assert rates[0] > 0.9 and rates[1] > 0.9 and min(rates[2:]) > 0.9
    measured = {1: 0.0080, 2: 0.0092, 3: 0.0115, 4: 0.0127, 8: 0.0149, 12: 0.0261, 16: 0.0281}
    c = curve(lambda n: measured[min(k for k in measured if k >= n)], sizes=range(1, 17))
    assert choose([rates], 1, c, 100)[0] >= 7
    for _ in range(40):
        acc.observe("c", 20, 3, 2)                  # the third token: rejected every time
    assert acc.rates("c", 20, 15)[2] < 0.2
    assert choose([acc.rates("c", 20, 15)], 1, c, 100)[0] == 2


def test_an_unseen_class_reads_the_mean_of_its_match_range():
    """A request class never verified (a new system prompt) reads, per depth, the mean of the
    stats of the classes with drafts of its match range, kept as classes are observed, evicted
    (the oldest first, max_keys) and loaded; other ranges do not count, and with none at all it
    reads the prior. Catches a sum not updated when a class is observed again (its old counts
    stay in), an evicted class still counted, and a mean over the wrong range."""
    def brute(acc, match):
        r = acc.key("", match)[1]
        sts = [st for (c, mr), st in acc.stats.items() if mr == r]
        return [[sum(st[j][0] for st in sts) / len(sts), sum(st[j][1] for st in sts) / len(sts)]
                for j in range(control.MAX_DRAFT)]

    def flat(rows):
        return [x for row in rows for x in row]

    acc = control.Acceptance(max_keys=3)
    assert acc.rates("new", 20, 2) == pytest.approx([0.6, 0.6])         # nothing yet: the prior
    for _ in range(30):
        acc.observe("a", 20, 4, 4)
        acc.observe("b", 17, 4, 0)
    acc.observe("c", 2, 3, 1)                                  # another match range
    for match in (20, 2):
        assert flat(acc._pooled(match)) == pytest.approx(flat(brute(acc, match)))
    assert acc.rates("new", 20, 1)[0] == pytest.approx((15.0 + 2 * 0.6) / (30.0 + 2), rel=0.02)
    acc.observe("d", 18, 2, 2)                                 # evicts "a", the oldest
    assert ("a", 4) not in acc.stats
    assert flat(acc._pooled(20)) == pytest.approx(flat(brute(acc, 20)))
    fresh = control.Acceptance()
    fresh.load(acc.state())
    assert flat(fresh._pooled(20)) == pytest.approx(flat(brute(acc, 20)), abs=2e-3)
    assert acc.rates("new", 20, 5) == pytest.approx(
        control.Acceptance.rates(SimpleNamespace(stats={}, _pooled=lambda m: brute(acc, m),
                                                 key=acc.key), "new", 20, 5))


def test_a_crowded_step_looks_up_a_sequence_that_finds_nothing_less_often():
    """In steps of many sequences (SKIP_FROM) a sequence whose lookups find nothing is looked up
    again after 1, 2, .. MISS_SKIP tokens, and at once again after a hit; a copy that starts
    meanwhile is drafted at most MISS_SKIP tokens late. With few sequences every step looks up.
    Catches the lookups of every sequence every step (2.8% of the engine thread at 16 unique
    chats) and a back-off that never ends (a copy never drafted)."""
    from reame.speculate import MISS_SKIP
    rng = np.random.default_rng(3)

    def run(crowded, steps=40, copy_from=None):
        spec = Speculator(1000)
        calls = []
        real = spec.global_.candidates
        spec.global_.candidates = lambda ctx, limit=4: calls.append(len(ctx)) or real(ctx, limit)
        prompt = [int(t) for t in rng.integers(10, 990, 48)]
        seq = Seq(list(prompt), FakeGen(200))
        drafted_at = None
        for i in range(steps):
            draft, _, _ = spec._draft(seq, 8, crowded)
            if draft and drafted_at is None:
                drafted_at = i
            nxt = prompt[i - copy_from] if copy_from is not None and i >= copy_from else \
                int(rng.integers(10, 990))
            seq.tokens.append(nxt)
        return len(calls), drafted_at

    n, _ = run(crowded=False)
    assert n == 40
    n, _ = run(crowded=True)
    assert n <= 40 // 3, n                          # 1 + 1 + 1 + 1 + 1 ... with 1, 2, 3, 4, 4 skipped
    for start in (10, 17, 25):                      # the output starts copying the prompt
        _, at = run(crowded=True, copy_from=start)
        assert at is not None and start + 3 <= at <= start + 3 + MISS_SKIP, (start, at)


def test_the_step_cost_curve_is_robust_to_outliers_and_monotone():
    """One step 50x slower (a page fault, the machine's other load) moves nothing; a size that
    measured slower than a larger one is read at the larger one's cost; an unmeasured larger
    size is guessed from the measured ones, not free. Catches a mean (the outlier sticks and
    bars the size for good) or an unmeasured size read as 0."""
    c = StepCost()
    for _ in range(8):
        c.observe(1, 0.010)
        c.observe(8, 0.012)
    c.observe(8, 0.6)
    assert c(8) == pytest.approx(0.012)
    for _ in range(5):
        c.observe(7, 0.020)                 # noisy: slower than 8 tokens
    assert c(7) <= c(8)
    assert c(4) == pytest.approx(0.010 + (0.012 - 0.010) * 3 / 6)   # between 1 and 7
    assert c(16) > c(8)


def test_drafts_beside_a_prompt_chunk_are_priced_inside_a_range_of_sizes():
    """Above 64 tokens the curve keeps one point per power-of-two range of sizes; a size past a
    range's point is interpolated toward the next one, not read at the point's cost. 16
    decoding sequences beside a 90-token prompt chunk (106 tokens, measured as on a 2-vCPU EPYC
    without AMX): 14 draft tokens add ~7 ms, so the guard holds them to the 3% margin. Catches
    the range read flat (the drafts look free up to 127 tokens: all 14 taken, every neighbour's
    step ~8% longer)."""
    c = StepCost()
    for _ in range(8):
        c.observe(16, 0.025)
        c.observe(106, 0.092)
        c.observe(222, 0.162)
    assert c(120) == pytest.approx(0.092 + 0.070 * 14 / 116)
    assert c(106) < c(110) < c(120) < c(222)
    k = choose([[0.9] * 14] + [[]] * 15, 106, c, 100)[0]
    assert k <= 4 and c(106 + k) <= 1.03 * c(106)


def test_drafts_that_fill_a_step_up_to_a_cheaply_measured_size_are_not_free():
    """Step costs by token count mix compositions: 15 decode rows beside a 43-token prompt
    chunk (58 tokens) measured slower than a 97-token step, so the envelope reads 58..97 flat.
    Drafts priced on the curve alone filled such steps for free (2-vCPU EPYC without AMX: ~40
    draft tokens a step, every neighbour's step 15-20% longer while the guard saw no cost);
    priced at least at the slope of the curve's top (~0.5 ms a token here) a guard of 3% holds
    them to its margin. On a straight curve the floor changes nothing. Catches drafts priced on
    the curve alone (all 15 taken)."""
    c = StepCost()
    for _ in range(8):
        c.observe(15, 0.021)
        c.observe(16, 0.020)
        c.observe(58, 0.085)
        c.observe(97, 0.080)
        c.observe(192, 0.126)
    assert c(58) == c(97) == pytest.approx(0.080)            # the envelope: flat
    assert c.slope() == pytest.approx(0.046 / 95)
    assert c.priced(58, 39) == pytest.approx(0.080 + 39 * 0.046 / 95)
    k = choose([[0.9] * 15] + [[]] * 14, 58, c, 100, None, 0.03)[0]     # a 3% guard
    assert k <= 5 and c.priced(58, k) <= 1.03 * c(58)
    lin = curve(CHEAP)
    assert all(lin.priced(b, k) == pytest.approx(lin(b + k), rel=1e-3)
               for b in (1, 16, 100) for k in (1, 8, 15))


def run_with_costs(cost_fn, seed=0):
    """The planner with a speculator whose step costs come from cost_fn (a simulated machine),
    4 echoing sequences of 60 tokens: (verify steps, steps)."""
    rng = np.random.default_rng(seed)
    spec = Speculator(1000)
    p, eng = make(spec)
    seqs = [add(p, echo_prompt(rng), 60) for _ in range(4)]
    steps = verify = 0
    while (plan := p.plan()) is not None:
        p.apply(plan, eng.forward(plan.batch))
        spec.step_done(len(plan.batch), cost_fn(len(plan.batch)))
        steps += 1
        verify += any(w.draft for w in plan.work)
        # a verified draft's rows are decode rows (the batch's first n_decode): the engine runs
        # them on the decode attention kernel whatever else shares the step
        assert all(w.offset + w.n <= plan.batch.n_decode for w in plan.work if w.draft)
    for s in seqs:
        assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], 60)
    return verify, steps


def test_speculation_regulates_itself_on_the_measured_costs():
    """The same echoing traffic through the planner on two simulated machines: where extra
    tokens are cheap most steps verify drafts; where a step costs in proportion to its tokens
    (saturation) drafting stops after the first measurements but for the exploration of one in
    32 steps. Catches a speculator that drafts regardless of what it measures."""
    v_cheap, n_cheap = run_with_costs(CHEAP)
    v_sat, n_sat = run_with_costs(lambda n: 0.001 * n)
    assert v_cheap > 0.5 * n_cheap
    assert v_sat <= 0.1 * n_sat
    assert n_sat > 1.5 * n_cheap


def test_the_guard_keeps_a_non_drafting_sequences_time_per_token():
    """16 decoding sequences on a curve where extra tokens are cheap, one offering 8
    well-accepted tokens: tokens per second alone would take all 8 (a 16% longer step for the
    15 others, which gain nothing); a guard of 3% allows that margin only, until the others are
    ahead of it (slack), and a sequence whose own drafts paid may be slowed by what it gained;
    a margin of 25% lets the 16% through and no more. Catches a controller maximising tokens
    per second alone, one ignoring the slack, or one ignoring its margin."""
    c = curve(CHEAP)
    M = 0.03
    offers = [[0.9] * 8] + [[]] * 15
    assert choose(offers, 16, c, 100, [float("inf")] * 16, M) == [8] + [0] * 15   # no guard
    k = choose(offers, 16, c, 100, None, M)[0]
    assert c(16 + k) <= (1 + M) * c(16) and k <= 1
    assert allocate(offers, 16, c, 100, None, M)[1] in range(1, 16)    # held by a non-drafter
    assert choose(offers, 16, c, 100, [0.0] + [0.004] * 15, M)[0] == 8   # the others are ahead
    # every one drafting well: each emits enough to pay for the longer step itself
    assert sum(choose([[0.9] * 8] * 16, 16, c, 400, None, M)) >= 64
    # one sequence behind its bound (its drafts were rejected): no draft of the others' slows it
    assert sum(choose([[0.9] * 8] * 15 + [[]], 16, c, 400, [0.0] * 15 + [-0.01], M)) == 0
    # a 25% margin (--speculate-guard 0.25): 8 drafts (16% longer) pass; 60 drafts of four
    # sequences would take the others past it and are cut to what keeps every bound; the
    # default margin is the module's
    assert c(24) <= 1.25 * c(16) and choose(offers, 16, c, 100, None, 0.25)[0] == 8
    many = [[0.9] * 15] * 4 + [[]] * 12
    ks = choose(many, 16, c, 100, None, 0.25)
    assert c(16 + sum(ks)) <= 1.25 * c(16) < c(16 + 60) and sum(ks) > 8
    assert choose(offers, 16, c, 100) == choose(offers, 16, c, 100, None, control.TPOT_MARGIN)


def test_a_sequence_owes_the_time_its_rejected_draft_cost():
    """A sequence whose draft (its own wrong prediction) is rejected emitted one token from a
    longer step: it is behind the guard's bound by the difference, so others' drafts may not
    slow it until it has caught up. Catches slack credited for the tokens drafted (offered)
    rather than the tokens emitted."""
    spec = Speculator(1000, margin=0.03)
    cheap_costs(spec)
    p, eng = make(spec)
    prompt = echo_prompt(np.random.default_rng(5))
    nxt = expected(prompt, 1)[0]
    s = Seq(prompt, FakeGen(6))
    s.gen.prediction = prompt[-3:] + [nxt, 1 + (nxt + 1) % 997] + [2] * 6   # wrong from the 2nd
    p.add(s)
    while spec.drafts == 0:
        p.apply(plan := p.plan(), eng.forward(plan.batch))
    assert spec.draft_tokens > spec.accepted_tokens     # rejected past its first token
    p.plan()                                            # the next step settles the last one
    c, k = spec.cost, spec.draft_tokens
    want = (1 + spec.margin) * (1 + spec.accepted_tokens) * c(1) - c(1 + k)
    assert spec.states[id(s)].slack == pytest.approx(want) and want < 0


def mixed_row(keys):
    """Sequences whose prompt starts with an even token repeat their last PERIOD tokens (drafts
    are accepted); the others emit hashed tokens (unique text: nothing to draft)."""
    if keys[0] % 2 == 0:
        return [int(keys[-PERIOD])]
    h = 0
    for i, t in enumerate(keys):
        h = (h * 1000003 + (int(t) + 1) * (i + 7)) % 2**61
    return [3 + h % 997]


def run_mixed(spec, cost_fn, n_echo=4, n_unique=12, tokens=80, echo_tokens=400):
    """16 sequences decoding side by side on a simulated machine (a step of n tokens costs
    cost_fn(n)): (each sequence's decode seconds per token, echoing first; the seconds of the
    whole run)."""
    rng = np.random.default_rng(3)
    p, eng = make(spec, slots=16, blocks=1024, row=mixed_row)
    seqs = []
    for j in range(n_echo + n_unique):
        prompt = echo_prompt(rng) if j < n_echo else [int(x) for x in rng.integers(3, 1000, 60)]
        prompt[0] = 2 * (prompt[0] // 2) + (j >= n_echo)
        seqs.append(add(p, prompt, echo_tokens if j < n_echo else tokens))
    busy = {id(s): 0.0 for s in seqs}
    wall = 0.0
    while (plan := p.plan()) is not None:
        before = {id(s): len(s.gen.output_ids) for s in seqs}
        p.apply(plan, eng.forward(plan.batch))
        dt = cost_fn(len(plan.batch))
        wall += dt
        if spec is not None:
            spec.step_done(len(plan.batch), dt)
        for w in plan.work:
            if before[id(w.seq)]:                 # decoding (its first token came before)
                busy[id(w.seq)] += dt
    return [busy[id(s)] / (len(s.gen.output_ids) - 1) for s in seqs], wall


def test_drafts_of_a_few_do_not_slow_the_many():
    """Four echoing sequences (long replies) beside 12 unique ones on a curve where drafting
    pays in tokens per second: unguarded, the unique sequences' time per token grows ~30% (the
    control run shows it); guarded, by the margin at most, while the echoing ones still emit
    their tokens in under 0.6x the time and the run is shorter. Catches the guard gone (the
    margin made huge), a guard applied to the drafting sequences only, or slack counted from
    what a sequence was offered instead of what it emitted."""
    M = 0.03                                           # a margin well below the harm
    off, wall_off = run_mixed(None, CHEAP)
    spec = Speculator(1000, margin=M)
    on, wall_on = run_mixed(spec, CHEAP)
    ratio = [b / a for a, b in zip(off, on)]
    held = spec.report()["held_by"]
    assert held["no_draft"] > 0 and spec.report()["steps_held_for_tpot"] == sum(held.values())
    assert max(ratio[4:]) <= 1 + M + 0.01, ratio
    assert max(ratio[:4]) < 0.6 and wall_on < 0.6 * wall_off, ratio
    free, _ = run_mixed(Speculator(1000, margin=1e9), CHEAP)   # the guard off
    assert min(b / a for a, b in zip(off[4:], free[4:])) > 1.2


def test_the_report_shows_each_sequences_time_per_token_against_steps_without_drafts():
    """GET /v1/adaptive's tpot_vs_no_drafts: each finished sequence's time per token on the
    measured step costs over what its tokens cost on steps without drafts (the guard's own
    accounting). In the mixed run the twelve unique sequences read what the simulation
    measured against speculation off (within 1%: slowed, by the margin at most) and the four
    echoing ones far below one. Catches a ratio per step rather than per emitted token (an
    echoing sequence would read ~1) or one priced on steps without drafts (every ratio 1)."""
    off, _ = run_mixed(None, CHEAP)
    spec = Speculator(1000, margin=0.03)
    on, _ = run_mixed(spec, CHEAP)
    rep = spec.report()["tpot_vs_no_drafts"]
    assert rep["sequences"] == 16 and rep["min"] < 0.6
    assert 1.01 <= rep["max"] <= 1.03 + 0.005
    measured = sorted(b / a for a, b in zip(off, on))[4:]
    assert np.allclose(sorted(spec.tpot_ratios)[4:], measured, atol=0.01)


class TrialEveryOther:
    """An adaptive runtime whose kernel tuner runs a trial's arm every other step."""
    pool = None

    def __init__(self):
        self.steps, self.trial_step = 0, False
        self.profile = SimpleNamespace(arrival=lambda n: None, finished=lambda *a: None)

    def before_step(self, plan):
        self.steps += 1
        self.trial_step = self.steps % 2 == 0

    def after_step(self, *args, **kwargs):
        pass


def test_steps_of_a_kernel_trial_are_not_priced_into_the_step_cost_curve():
    """A step that runs a kernel trial's arm (other kernels than the live ones, maybe slower)
    does not reach the speculation's step-cost curve, as it reaches neither the batch nor the
    budget tuner. Catches a scheduler feeding every step's time to the curve."""
    from reame.scheduler import Scheduler
    from test_adaptive_budget import FakeGen as SchedGen     # FakeGen as a scheduler drives it
    spec = Speculator(1000)
    eng = FakeEngine(4, 256, 4, 512, echo_row, np.int64)
    rt = TrialEveryOther()
    s = Scheduler(eng, SchedulerParams(max_batch=4), adaptive=rt, speculator=spec)
    rng = np.random.default_rng(7)
    reqs = [s.submit([echo_prompt(rng)], [[SchedGen(30)]]) for _ in range(2)]
    for _ in range(500):
        if all(r.finished for r in reqs):
            break
        s.step(0.0)
    assert all(r.finished for r in reqs) and rt.steps > 10
    assert spec.cost.steps == (rt.steps + 1) // 2          # the odd steps only


# ---- speculative sampling keeps the distribution ----

V = 4                                          # a vocabulary small enough to count outcomes


def toy_logits(ctx) -> np.ndarray:
    """The toy model: logits over V tokens from the whole context."""
    h = 0
    for i, t in enumerate(ctx):
        h = (h * 31 + (int(t) + 1) * (i + 3)) % 1009
    return np.array([((h * (k + 7)) % 17) / 5.0 for k in range(V)], np.float32)


PARAMS = dict(temperature=0.9, top_k=3, repetition_penalty=1.3, logit_bias={2: 0.7})


class SamplingGen:
    """A Generation's sampling part over the toy vocabulary: the real Sampler."""

    def __init__(self, prompt, max_tokens, seed):
        from reame.sampling import Sampler, SamplingParams
        self.params = SamplingParams(seed=seed, **PARAMS)
        self.sampler = Sampler(self.params, prompt)
        self.max_tokens, self.output_ids = max_tokens, []

    def step(self, row):
        tok = self.sampler.sample(row).token
        self.output_ids.append(tok)
        done = len(self.output_ids) >= self.max_tokens
        return SimpleNamespace(token=tok, finish_reason="length" if done else None)


class FixedDrafts(WrongDrafts):
    """Always the same draft: token 1, then 3, then 0 (whatever the model prefers)."""

    def propose(self, seqs, caps, base_tokens, max_total):
        return [[1, 3, 0][:cap] for cap in caps]


def exact_distribution(prompt, n):
    """P(every n-token output) under PARAMS, by enumeration."""
    from reame.sampling import Sampler, SamplingParams

    def probs(ctx, out):
        s = Sampler(SamplingParams(**PARAMS), ctx[:len(prompt)])
        for t in out:
            s.accept(t)
        x = toy_logits(ctx).astype(np.float64)
        for t, b in PARAMS["logit_bias"].items():
            x[t] += b
        ids = np.unique(np.asarray(s.history[-64:]))
        x[ids] = np.where(x[ids] > 0, x[ids] / 1.3, x[ids] * 1.3)
        keep = np.argsort(-x, kind="stable")[:PARAMS["top_k"]]
        p = np.zeros(V)
        p[keep] = np.exp((x[keep] - x[keep].max()) / PARAMS["temperature"])
        return p / p.sum()

    dist = {}

    def walk(ctx, out, pr):
        if len(out) == n:
            dist[tuple(out)] = pr
            return
        p = probs(ctx, out)
        for t in range(V):
            if p[t] > 0:
                walk(ctx + [t], out + [t], pr * p[t])
    walk(list(prompt), [], 1.0)
    return dist


def sample_outputs(spec, n_seqs, prompt, n, seed0=0):
    p, eng = make(spec, slots=8, blocks=256, row=toy_logits, dtype=np.float32)
    seqs = [Seq(prompt, SamplingGen(prompt, n, seed0 + i)) for i in range(n_seqs)]
    for s in seqs:
        p.add(s)
    run_all(p, eng)
    return [tuple(s.gen.output_ids) for s in seqs]


def test_speculative_sampling_keeps_the_distribution():
    """Temperature, top-k, a repetition penalty and a logit bias over a 4-token vocabulary;
    every step verifies the draft [1, 3, 0]. The 3-token outputs of 4000 sequences follow the
    exact distribution (chi-square over the 64 outcomes far below what a wrong rule gives), and
    with the same seeds the tokens are those of plain sampling. Catches accepting a drafted
    token whenever the model allows it, resampling a rejected position from the full
    distribution (the drafted token twice as likely), or transforms skipped on verified
    positions (the penalty sees the history)."""
    prompt = [0, 1, 2, 3, 1]
    n = 3
    spec = FixedDrafts()
    got = sample_outputs(spec, 4000, prompt, n)
    assert any(a > 0 for _, a, _ in spec.verified_calls)
    assert any(a < len(d) for d, a, _ in spec.verified_calls)
    dist = exact_distribution(prompt, n)
    counts = {k: 0 for k in dist}
    for g in got:
        assert g in counts, f"{g} has probability 0"
        counts[g] += 1
    chi2 = sum((counts[k] - len(got) * q) ** 2 / (len(got) * q) for k, q in dist.items())
    df = len(dist) - 1
    assert chi2 < df + 6 * math.sqrt(2 * df), (chi2, df)
    plain = sample_outputs(None, 200, prompt, n)
    assert plain == got[:200]
