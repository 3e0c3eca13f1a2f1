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

from reame.kv_cache import PagedKVCache
from reame.planner import Planner, SchedulerParams, Seq
from reame.speculate import Speculator
from reame.speculate.control import StepCost, choose
from reame.speculate.index import TokenIndex


PERIOD = 20


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


class FakeEngine:
    """KV = the token ids, written and read through the block tables; logits row = one
    value, the next token of everything the row's attention reads."""

    def __init__(self, slots=4, blocks=256, bs=4, n_ctx=512):
        self.kv = PagedKVCache(1, slots, 1, n_ctx, 1, 1, "f32", bs, blocks)
        self.kv.tables[:] = 0
        self.max_tokens = 512
        self.n_ctx = n_ctx
        self.batches = []

    def forward(self, batch):
        self.batches.append(batch)
        t = batch.tokens.astype(np.float32).reshape(-1, 1, 1)
        self.kv.store(0, batch.seq_ids, batch.positions, t, t)
        rows = []
        for r in batch.logits_rows:
            keys, _ = self.kv.prefix(0, int(batch.seq_ids[r]), int(batch.positions[r]) + 1)
            rows.append([echo_next(keys[0, :, 0].astype(np.int64).tolist())])
        return np.array(rows, np.int64).reshape(len(rows), 1)


class FakeGen:
    def __init__(self, max_tokens):
        self.max_tokens, self.output_ids, self.finished = max_tokens, [], False

    def step(self, row):
        tok = int(row[0])
        self.output_ids.append(tok)
        self.finished = len(self.output_ids) >= self.max_tokens
        return SimpleNamespace(token=tok, finish_reason="length" if self.finished else None)


def cheap_costs(spec, base=0.010, per_token=0.0003):
    """A machine where a step of n tokens costs base + n * per_token (multi-token steps cheap)."""
    for n in range(1, 80):
        spec.step_done(n, base + n * per_token)


def make(spec=None, slots=4, blocks=256, bs=4, **params):
    eng = FakeEngine(slots, blocks, bs)
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

    def propose(self, seqs, caps, base_tokens, base_value, max_total):
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
