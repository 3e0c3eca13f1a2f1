"""The step planner on its own, with a fake engine and no model.

The fake engine stores each token id as its "key" through the block tables (reame/kv_cache.py)
and answers, for each logits row, a next token that is a hash of every key the sequence's
attention would read through its table. So a sequence's output is right only if every block it
reads holds its own tokens: a wrong block table, a shared block overwritten, a lost copy of a
partial block or a prefix hit on the wrong blocks all change the text. `expected()` computes
the right output without any cache.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from reame.kv_cache import PagedKVCache
from reame.planner import DONE, RUNNING, WAITING, Planner, SchedulerParams, Seq


def next_token(tokens) -> int:
    h = 0
    for i, t in enumerate(tokens):
        h = (h * 1000003 + (int(t) + 1) * (i + 7)) % 2**61
    return 3 + h % 997


def expected(prompt, n) -> list[int]:
    toks, out = list(prompt), []
    for _ in range(n):
        out.append(next_token(toks))
        toks.append(out[-1])
    return out


class FakeEngine:
    """KV = the token ids, written and read through the block tables; a logits row is
    `row(every key the row's attention reads)` (default: [next_token(keys)]). A whole
    reame.engine_api.Engine (tests/test_engine_api.py checks)."""
    name, model, config, attn_type, kernel_plan, max_logits = "fake", None, None, "f32", None, None

    def __init__(self, slots=4, blocks=64, bs=4, n_ctx=256, row=None, dtype=np.int64):
        self.kv = PagedKVCache(1, slots, 1, n_ctx, 1, 1, "f32", bs, blocks)
        self.kv.tables[:] = 0                    # nothing works by accident of the static layout
        self.n_ctx = n_ctx
        self.max_tokens = 512
        self.batches = []
        self.row = row or (lambda keys: [next_token(keys)])
        self.dtype = dtype

    def close(self):
        pass

    def final_hidden(self, lo, hi):
        """Each token's "hidden state": (token id, position + 1)."""
        b = self.batches[-1]
        return np.stack([b.tokens[lo:hi], b.positions[lo:hi] + 1], 1).astype(np.float64)

    def forward(self, batch):
        self.batches.append(batch)
        t = batch.tokens.astype(np.float32).reshape(-1, 1, 1)
        self.kv.store(0, batch.seq_ids, batch.positions, t, t)
        rows = []
        for r in batch.logits_rows:
            keys, _ = self.kv.prefix(0, int(batch.seq_ids[r]), int(batch.positions[r]) + 1)
            rows.append(self.row(keys[0, :, 0].astype(np.int64).tolist()))
        return np.array(rows, self.dtype).reshape(len(rows), -1 if rows else 1)


class FakeGen:
    def __init__(self, max_tokens):
        self.max_tokens, self.output_ids, self.finished = max_tokens, [], False

    def step(self, row):
        tok = int(row[0])
        self.output_ids.append(tok)
        self.finished = len(self.output_ids) >= self.max_tokens
        return SimpleNamespace(token=tok, finish_reason="length" if self.finished else None)


def request(planner, prompt, max_tokens=5, n=1):
    seqs = [Seq(prompt, FakeGen(max_tokens), index=i) for i in range(n)]
    seqs[0].siblings = seqs[1:]
    planner.add(seqs[0])
    return seqs


def run_step(planner, engine):
    plan = planner.plan()
    if plan is None:
        return None
    planner.apply(plan, engine.forward(plan.batch))
    planner.check()
    return plan


def run_all(planner, engine, limit=10_000):
    for _ in range(limit):
        if run_step(planner, engine) is None:
            assert not planner.running and not planner.waiting
            return
    raise AssertionError("the planner did not finish")


def make(slots=4, blocks=64, bs=4, **params):
    engine = FakeEngine(slots, blocks, bs)
    params.setdefault("max_batch", slots)
    return Planner(engine.kv, SchedulerParams(**params)), engine


def prompt(rng, n):
    return [int(x) for x in rng.integers(3, 1000, n)]


# ---- batch composition ----

def test_decode_tokens_first_then_prefill_within_the_budget():
    """Three decoding sequences and a long prompt, 8 tokens a step: the three decode tokens are
    in every step (first), the prompt advances by the 5 left. A planner that never mixes
    prefill and decode, or that lets the prompt take the budget first, fails."""
    p, eng = make(token_budget=8, prefill_chunk=64)
    rng = np.random.default_rng(0)
    dec = [request(p, prompt(rng, 3), max_tokens=30)[0] for _ in range(3)]
    while any(s.remaining > 1 for s in dec):
        run_step(p, eng)
    long = request(p, prompt(rng, 40), max_tokens=2)[0]
    plan = run_step(p, eng)
    assert [w.seq for w in plan.work] == dec + [long]
    assert [w.n for w in plan.work] == [1, 1, 1, 5] and plan.n_decode == 3
    assert plan.batch.n_decode == 3              # the decode rows, for the engine's attention
    assert list(plan.batch.tokens[:3]) == [s.tokens[-2] for s in dec]
    assert len(plan.batch.logits_rows) == 3      # the prompt chunk needs no logits yet
    plan = run_step(p, eng)
    assert [w.n for w in plan.work] == [1, 1, 1, 5] and plan.work[3].start == 5
    run_all(p, eng)
    for s in dec + [long]:
        assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], s.gen.max_tokens)


def test_decode_tokens_are_not_starved_by_an_older_prompt():
    """An older sequence still computing a long prompt does not take the budget from newer
    ones that decode: they get their token first, it gets what is left."""
    p, eng = make(token_budget=8, prefill_chunk=4)
    rng = np.random.default_rng(12)
    a = request(p, prompt(rng, 60), max_tokens=2)[0]
    b, c = (request(p, prompt(rng, 2), max_tokens=9)[0] for _ in range(2))
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(a, 4), (b, 2), (c, 2)]
    p.params.prefill_chunk = 64
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(b, 1), (c, 1), (a, 6)]
    assert plan.n_decode == 2
    run_all(p, eng)
    for s in (a, b, c):
        assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], s.gen.max_tokens)


def test_prefill_chunk_bounds_one_prompt_per_step():
    p, eng = make(token_budget=64, prefill_chunk=6)
    rng = np.random.default_rng(1)
    a, b = request(p, prompt(rng, 20))[0], request(p, prompt(rng, 9))[0]
    plan = run_step(p, eng)
    assert [(w.seq, w.start, w.n) for w in plan.work] == [(a, 0, 6), (b, 0, 6)]
    plan = run_step(p, eng)
    assert [(w.seq, w.start, w.n) for w in plan.work] == [(a, 6, 6), (b, 6, 3)]
    assert plan.work[1].row == 0                # b's prompt is complete: it samples
    run_all(p, eng)
    assert a.gen.output_ids == expected(a.tokens[:20], 5)


def test_a_partial_chunk_does_not_delay_a_prompt_finishing_in_the_step():
    """Two 30-token prompts, a 48-token budget: the first prompt's step carries no partial
    chunk of the second (it would delay the first one's first token and gain the second
    nothing: it needs a second step either way), while a prompt short enough to finish in the
    budget left still joins. A planner that fills the budget with whatever comes next (a: 30,
    b: 18, then b: 12) fails."""
    p, eng = make(slots=4, token_budget=48, prefill_chunk=64)
    rng = np.random.default_rng(7)
    a, b = (request(p, prompt(rng, 30))[0] for _ in range(2))
    c = request(p, prompt(rng, 10))[0]
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(a, 30), (c, 10)]
    assert b.state == WAITING and b.bypassed == 1        # c overtook it, within max_bypass
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(a, 1), (c, 1), (b, 30)]
    run_all(p, eng)
    for s in (a, b, c):
        assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], s.gen.max_tokens)


def test_the_oldest_prompt_advances_every_step_beside_finishing_ones():
    """A long prompt chunked by the budget keeps its chunk in every step while short prompts
    keep arriving and finishing beside it: the rule above never starves it."""
    p, eng = make(slots=4, token_budget=16, prefill_chunk=64, max_batch=4)
    rng = np.random.default_rng(8)
    long = request(p, prompt(rng, 60), max_tokens=2)[0]
    starts = []
    for _ in range(5):
        request(p, prompt(rng, 3), max_tokens=1)
        plan = run_step(p, eng)
        starts += [w.start for w in plan.work if w.seq is long]
    assert starts == sorted(set(starts)) and len(starts) == 5      # one chunk in each step
    run_all(p, eng)
    assert long.gen.output_ids == expected(long.tokens[:60], 2)


# ---- the prefix cache ----

def test_prefix_hit_skips_the_cached_blocks():
    """A second prompt sharing 37 tokens (9 full blocks of 4) with a finished one computes only
    from position 36; its output is still that of its own prompt."""
    p, eng = make(blocks=40, bs=4)
    rng = np.random.default_rng(2)
    shared = prompt(rng, 37)
    a = request(p, shared + [5, 6, 7])[0]
    run_all(p, eng)
    b = request(p, shared + [9, 9])[0]
    plan = run_step(p, eng)
    (w,) = plan.work
    assert (w.seq, w.start, w.n) == (b, 36, 3)
    assert b.n_cached == 36 and p.pool.hits == 36 and p.pool.queries == 40 + 39
    assert b.blocks[:9] == a.blocks[:9] if a.blocks else True
    run_all(p, eng)
    assert b.gen.output_ids == expected(shared + [9, 9], 5)
    assert a.gen.output_ids == expected(shared + [5, 6, 7], 5)


def test_a_prompts_last_token_alone_is_a_prompt_row():
    """A prompt chunk cut by the token budget one token short of the prompt's end: that last
    token, computed next step beside a decoding sequence, is a prompt row (after the decode
    rows, outside Batch.n_decode), so the engine runs it on the prompt attention kernel as it
    would inside a longer chunk; a token's bits then do not depend on where a chunk ended.
    Catches a planner that takes every one-token remainder for a decode token."""
    p, eng = make(token_budget=8, prefill_chunk=64)
    rng = np.random.default_rng(5)
    dec = request(p, prompt(rng, 3), max_tokens=20)[0]
    while dec.remaining > 1:
        run_step(p, eng)
    b = request(p, prompt(rng, 8), max_tokens=3)[0]
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(dec, 1), (b, 7)]
    plan = run_step(p, eng)
    assert [(w.seq, w.start, w.n) for w in plan.work] == [(dec, dec.n_computed - 1, 1), (b, 7, 1)]
    assert plan.batch.n_decode == 1 and plan.n_decode == 1
    run_all(p, eng)
    assert b.gen.output_ids == expected(b.tokens[:8], 3)


def test_whole_prompt_cached_recomputes_its_last_block():
    """Every block cached: the last one is recomputed (its logits are needed), into a private
    block, never into the shared one."""
    p, eng = make(bs=4)
    toks = prompt(np.random.default_rng(3), 16)
    a = request(p, toks, max_tokens=1)[0]
    run_all(p, eng)
    b, c = request(p, toks, max_tokens=4)[0], request(p, toks, max_tokens=4)[0]
    plan = run_step(p, eng)
    assert [(w.start, w.n) for w in plan.work] == [(12, 4), (12, 4)]
    assert b.blocks[:3] == c.blocks[:3] and b.blocks[3] != c.blocks[3]
    assert all(p.pool.ref[x] == 2 for x in b.blocks[:3])
    run_all(p, eng)
    assert b.gen.output_ids == c.gen.output_ids == expected(toks, 4)
    assert a.gen.output_ids == expected(toks, 1)


def test_generated_tokens_are_cached_for_the_next_turn():
    """Multi-turn chat: the next turn resends prompt + reply + new text; the reply's full blocks
    were registered while decoding, so the hit reaches past the first prompt."""
    p, eng = make(bs=4)
    first = prompt(np.random.default_rng(4), 10)
    a = request(p, first, max_tokens=12)[0]
    run_all(p, eng)
    turn2 = first + a.gen.output_ids + [7, 8, 9]
    b = request(p, turn2, max_tokens=3)[0]
    run_step(p, eng)
    # 10 + 12 tokens: the last sampled token was never computed, so 21 have K/V: 5 full blocks
    assert b.n_cached == 20
    run_all(p, eng)
    assert b.gen.output_ids == expected(turn2, 3)


def test_eviction_is_lru_and_only_when_needed():
    p, eng = make(slots=2, blocks=6, bs=4)
    rng = np.random.default_rng(5)
    old, new = prompt(rng, 9), prompt(rng, 9)
    request(p, old, max_tokens=1)
    run_all(p, eng)
    request(p, new, max_tokens=1)
    run_all(p, eng)
    assert p.pool.evictions == 0 and p.pool.cached == 4     # 2 full blocks each, all kept
    x = request(p, prompt(rng, 17), max_tokens=1)[0]          # needs 5 blocks: 2 free + 3 cached
    run_all(p, eng)
    assert p.pool.evictions == 3 and x.gen.output_ids == expected(x.tokens[:17], 1)
    # least recently used first, and a chain's tail before its head: old's two blocks, then
    # the second block of new
    h_old, h_new = p.pool.hashes(old[:8]), p.pool.hashes(new[:8])
    assert not set(h_old) & set(p.pool.by_hash)
    assert h_new[0] in p.pool.by_hash and h_new[1] not in p.pool.by_hash
    y = request(p, new, max_tokens=1)[0]
    run_step(p, eng)
    assert y.n_cached == 4 and y.gen.output_ids == expected(new, 1)


# ---- preemption ----

def test_preemption_takes_the_newest_and_recomputes_exactly():
    """Four sequences outgrow a pool of 12 blocks: the most recently admitted is preempted (its
    blocks freed), waits at the head of the queue, is readmitted with its full blocks found in
    the cache, and every output equals the uncached reference."""
    p, eng = make(slots=4, blocks=12, bs=4, token_budget=64)
    rng = np.random.default_rng(6)
    seqs = [request(p, prompt(rng, 5), max_tokens=12)[0] for _ in range(4)]
    preempted = []
    while True:
        plan = run_step(p, eng)
        if plan is None:
            break
        preempted += plan.preempted
        if plan.preempted:
            victim = plan.preempted[0]
            others = [s for s in seqs if s is not victim and s.state == RUNNING]
            assert all(o.admitted < victim.admitted for o in others)   # the newest went
            assert p.waiting[0] is victim and victim.state == WAITING and not victim.blocks
    assert preempted and p.preemptions == len(preempted)
    for s in seqs:
        assert s.gen.output_ids == expected(s.tokens[:5], 12)
    assert p.pool.used == 0


def test_the_newest_sequence_shrinks_its_chunk_before_preempting_itself():
    p, eng = make(slots=2, blocks=8, bs=4, token_budget=64, prefill_chunk=4)
    rng = np.random.default_rng(7)
    a = request(p, prompt(rng, 3), max_tokens=5)[0]
    run_step(p, eng)                              # a: 1 block, its first token sampled
    b = request(p, prompt(rng, 20), max_tokens=2)[0]
    run_step(p, eng)                              # b admitted: its first 4 tokens in 1 block
    hogs = [p.pool.allocate() for _ in range(3)]  # someone else holds 3 of the 6 left
    p.params.prefill_chunk = 64
    plan = p.plan()
    # a decodes into a new block; b, the newest, takes the 2 blocks left: 8 of its 16 tokens
    assert [(w.seq, w.start, w.n) for w in plan.work] == [(a, 4, 1), (b, 4, 8)]
    assert not plan.preempted
    p.apply(plan, eng.forward(plan.batch))
    for h in hogs:
        p.pool.release(h)
    run_all(p, eng)
    assert b.gen.output_ids == expected(b.tokens[:20], 2)


# ---- admission ----

def test_admission_is_not_head_of_line_blocked_but_bounded():
    """A big prompt that does not fit yet is overtaken by small ones that do, at most
    max_bypass times; then it is served first."""
    p, eng = make(slots=4, blocks=10, bs=4, max_bypass=2, token_budget=64)
    rng = np.random.default_rng(8)
    hog = request(p, prompt(rng, 20), max_tokens=12)[0]     # 5 blocks, growing to 8
    run_step(p, eng)
    big = request(p, prompt(rng, 20), max_tokens=1)[0]      # 5 blocks: does not fit now
    small = [request(p, prompt(rng, 3), max_tokens=2)[0] for _ in range(4)]
    plan = run_step(p, eng)
    assert small[0] in plan.admitted and big not in plan.admitted
    assert big.bypassed >= 1
    while big.state == WAITING:
        plan = run_step(p, eng)
        assert plan is not None
        assert big.bypassed <= 2
    assert small[3].state == WAITING or small[3].admitted > big.admitted
    run_all(p, eng)
    for s in [hog, big] + small:
        assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], s.gen.max_tokens)


def test_max_batch_bounds_running_sequences():
    p, eng = make(slots=4, blocks=64, max_batch=2)
    rng = np.random.default_rng(9)
    seqs = [request(p, prompt(rng, 3), max_tokens=4)[0] for _ in range(5)]
    while run_step(p, eng) is not None:
        assert p.n_running <= 2
        assert len(eng.batches[-1].logits_rows) <= 2
    for s in seqs:
        assert s.gen.output_ids == expected(s.tokens[:3], 4)


# ---- n choices ----

def test_choices_fork_off_one_prefill_and_share_full_blocks():
    p, eng = make(slots=4, blocks=32, bs=4)
    toks = prompt(np.random.default_rng(10), 10)
    seqs = request(p, toks, max_tokens=6, n=3)
    plan = run_step(p, eng)
    assert [(w.seq, w.n) for w in plan.work] == [(seqs[0], 10)]   # the prompt once
    lead, s1, s2 = seqs
    assert lead.blocks[:2] == s1.blocks[:2] == s2.blocks[:2]      # full blocks shared
    assert all(p.pool.ref[b] == 3 for b in lead.blocks[:2])
    assert len({lead.blocks[2], s1.blocks[2], s2.blocks[2]}) == 3   # partial block copied
    run_all(p, eng)
    for s in seqs:
        assert s.gen.output_ids == expected(toks, 6)


# ---- stress ----

def test_stress_random_requests_under_a_tight_pool():
    """200 requests (shared prefixes, random lengths, n up to 3, cancellations) on a pool that
    forces eviction and preemption: every completed output is exact, the pool ends with every
    block free or cached and no reference left."""
    rng = random.Random(11)
    p, eng = make(slots=6, blocks=24, bs=4, token_budget=40, prefill_chunk=16, max_bypass=4)
    bases = [[rng.randrange(3, 1000) for _ in range(rng.randrange(4, 40))] for _ in range(6)]
    reqs, cancelled = [], 0
    for i in range(200):
        base = rng.choice(bases)
        toks = base[:rng.randrange(1, len(base) + 1)] + [rng.randrange(3, 1000)
                                                         for _ in range(rng.randrange(0, 12))]
        reqs.append(request(p, toks, max_tokens=rng.randrange(1, 24), n=rng.choice((1, 1, 2, 3))))
        for _ in range(rng.randrange(0, 4)):
            run_step(p, eng)
        if rng.random() < 0.1:                    # a client goes away mid-stream
            victim = rng.choice(reqs)
            for s in victim:
                p.finish(s)
            cancelled += 1
    run_all(p, eng)
    assert p.preemptions > 0 and p.pool.evictions > 0 and p.pool.hits > 0
    done = 0
    for seqs in reqs:
        for s in seqs:
            if s.gen.finished:
                assert s.gen.output_ids == expected(s.tokens[:s.n_prompt], s.gen.max_tokens)
                done += 1
    assert done > 300
    assert p.pool.used == 0 and all(r == 0 for r in p.pool.ref)
    assert len(p.slots) == eng.kv.max_seqs
    p.pool.check()


def test_params_are_checked_against_the_engine():
    eng = FakeEngine(slots=4)
    with pytest.raises(ValueError, match="max_batch"):
        SchedulerParams(max_batch=5).check(512, 4)
    with pytest.raises(ValueError, match="token_budget"):
        SchedulerParams(max_batch=4, token_budget=2).check(512, 4)
    SchedulerParams(max_batch=4).check(eng.max_tokens, eng.kv.max_seqs)
    assert DONE == "done"


def test_a_sequence_larger_than_the_pool_is_an_error_not_a_hang():
    p, eng = make(slots=2, blocks=3, bs=4)
    request(p, list(range(3, 20)))
    with pytest.raises(RuntimeError, match="cannot fit a KV pool of 3 blocks"):
        p.plan()


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_embedding_pools_every_chunk_and_restarts_after_preemption(pooling):
    """An embedding sequence (no sampling) computed in chunks of 4, preempted after two chunks
    and readmitted: the vector is the pooled (token, position) pairs of its whole prompt, as if
    computed in one go; mean pooling takes nothing from the prefix cache."""
    p, eng = make(bs=4, prefill_chunk=4)
    toks = prompt(np.random.default_rng(13), 14)
    request(p, toks, max_tokens=1)                         # the same prompt, cached
    run_all(p, eng)
    e = Seq(toks, None, index=0, pooling=pooling)
    p.add(e)

    def step():
        plan = p.plan()
        outs = p.apply(plan, eng.forward(plan.batch), eng.final_hidden)
        p.check()
        return plan, outs
    plan, outs = step()
    assert plan.work[0].row == -1                           # no logits wanted
    if pooling == "mean":
        assert plan.work[0].start == 0 and e.n_cached == 0
        step()
        p.preempt(e)
    else:
        assert plan.work[0].start == 12                     # the cached prefix is skipped
    while not outs:
        _, outs = step()
    (o,) = outs
    h = np.stack([toks, np.arange(1, 15)], 1).astype(np.float64)
    v = h.mean(0) if pooling == "mean" else h[-1]
    np.testing.assert_allclose(o.step, v / np.linalg.norm(v), rtol=1e-6)
    assert e.state == DONE and p.pool.used == 0
