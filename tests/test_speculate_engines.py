"""Speculative decoding on the real engines: the same events with and without it, on every path
of the serving core (batched, prefix hits, preemption, n > 1, seeded sampling, penalties, logit
bias, logprobs, stop strings, a grammar), driven step by step through `Scheduler.step()`.

The speculator here verifies every draft it finds (its step costs are fixed to a machine where
extra tokens are nearly free), so that every path actually verifies drafts, accepted and
rejected, which each test checks; the real controller is tested in test_speculate.py.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from reame.engines import create_engine
from reame.generate import Generation
from reame.sampling import SamplingParams
from reame.scheduler import DONE, Scheduler
from reame.speculate import Speculator
from reame.speculate.control import StepCost
from reame.tokenizer import Tokenizer

N_CTX = 256
BS = 16


class CheapSteps(StepCost):
    """A fixed cost curve: 10 ms a step and 0.1 ms a token."""

    def observe(self, n_tokens, seconds):
        pass

    def known(self):
        return True

    def __call__(self, n):
        return 0.010 + 0.0001 * n


def speculator(n_vocab):
    s = Speculator(n_vocab)
    s.cost = CheapSteps()
    return s


@pytest.fixture(scope="module")
def tok(stories_model):
    return Tokenizer.from_metadata(stories_model.metadata)


@pytest.fixture(scope="module", params=["reference", "jit"])
def engine_name(request):
    return request.param


def drive(sched, reqs, limit=20_000):
    """Step the scheduler until every request is done; each request's events by choice index:
    (token, text, finish reason, logprob, top logprobs)."""
    for _ in range(limit):
        if all(r.finished for r in reqs):
            break
        sched.step(time.monotonic())
    else:
        raise AssertionError("the scheduler did not finish")
    out = []
    for r in reqs:
        evs = {}
        while (ev := r.out.get_nowait()) is not DONE:
            assert ev.error is None, ev.error
            s = ev.step
            evs.setdefault(ev.index, []).append(
                (s.token, s.text, s.finish_reason,
                 s.sampled.logprob if s.sampled else None,
                 tuple(s.sampled.top_logprobs) if s.sampled else ()) if s else
                (None, ev.text, ev.finish_reason, None, ()))
        out.append(evs)
    return out


def run(model, name, spec, batches, kv_blocks=200, n_ctx=N_CTX):
    """Each batch of (prompt, [Generation...]) submitted together, after the previous batch
    finished (so later ones find its prefixes cached and its text indexed)."""
    eng = create_engine(model, name, n_ctx=n_ctx, max_seqs=4, block_size=BS,
                        kv_blocks=kv_blocks)
    s = Scheduler(eng, speculator=spec)
    try:
        out = []
        for batch in batches:
            reqs = [s.submit([p], [gens]) for p, gens in batch]
            out.append(drive(s, reqs))
        s.planner.check()
        assert not s.planner.running and s.planner.pool.used == 0
        return out, s
    finally:
        getattr(eng, "close", lambda: None)()


def both(model, tok, name, make_batches, **kw):
    """The events without speculation and with it (fresh Generations each time); asserts they
    are equal and that drafts were both accepted and rejected."""
    plain, _ = run(model, name, None, make_batches(), **kw)
    spec = speculator(tok.n_vocab)
    fast, sched = run(model, name, spec, make_batches(), **kw)
    assert exact(fast) == exact(plain)
    # log-probabilities: equal to float rounding (a row's logits round a little differently in
    # another batch composition, with or without drafts)
    for a, b in zip(logprobs(fast), logprobs(plain)):
        assert a == pytest.approx(b, abs=1e-4)
    r = spec.report()
    assert r["accepted_tokens"] > 0 and r["accepted_tokens"] < r["draft_tokens"], r
    return plain, sched


def exact(runs):
    """The events without their log-probabilities (the top tokens kept)."""
    return [[{i: [(t, x, f, tuple(k for k, _ in top)) for t, x, f, _, top in evs]
              for i, evs in r.items()} for r in batch] for batch in runs]


def logprobs(runs):
    return [lp if lp is not None else 0.0
            for batch in runs for r in batch for evs in r.values()
            for _, _, _, lp0, top in evs for lp in [lp0, *(v for _, v in top)]]


def gen(tok, ids, max_tokens=40, **kw):
    names = {f.name for f in dataclasses.fields(SamplingParams)}
    params = {k: kw.pop(k) for k in list(kw) if k in names}
    params.setdefault("temperature", 0)
    return Generation(tok, ids, SamplingParams(**params), max_tokens=max_tokens, n_ctx=N_CTX,
                      ignore_eos=kw.pop("ignore_eos", True), **kw)


def prompts(tok, stories_expected):
    """The five stories' prompts after a shared 45-token opening (cached blocks to hit)."""
    cases = stories_expected["cases"]
    opening = tok.encode(cases[0]["prompt"] + cases[0]["greedy_text"], add_special=True)[:45]
    return [opening + tok.encode(c["prompt"], add_special=False) for c in cases]


def test_greedy_batched_with_prefix_hits_and_repeats(stories_model, tok, stories_expected,
                                                     engine_name):
    """Five stories at once, then the same five again (their prompts cached, their text in the
    global index): the second round is drafted from the first. Catches drafts verified on the
    wrong rows of a mixed batch, or a cached block holding a rejected draft token."""
    ps = prompts(tok, stories_expected)

    def batches():
        return [[(p, [gen(tok, p)]) for p in ps], [(p, [gen(tok, p)]) for p in ps]]
    plain, sched = both(stories_model, tok, engine_name, batches)
    assert plain[0] == plain[1]
    assert sched.planner.pool.hits > 0
    assert sched.speculator.report()["index"]["documents"] >= 5


def test_sampling_paths(stories_model, tok, stories_expected, engine_name):
    """n = 3 seeded choices at temperature 0.8 with top-p; penalties (repetition, presence,
    frequency) with a logit bias; logprobs with top-5; stop strings; a max_tokens cut. Catches
    a transform skipped on a verified position (other tokens or logprobs), a stop string
    matched late (text past it), or random numbers drawn differently (seeded choices differ)."""
    ps = prompts(tok, stories_expected)
    bias = {tok.encode(" the", add_special=False)[0]: 2.0}

    def batches():
        return [[(ps[0], [gen(tok, ps[0], temperature=0.8, top_p=0.9, seed=7 + i)
                          for i in range(3)]),
                 (ps[1], [gen(tok, ps[1], repetition_penalty=1.3, presence_penalty=0.4,
                              frequency_penalty=0.3, logit_bias=bias)]),
                 (ps[2], [gen(tok, ps[2], logprobs=True, top_logprobs=5)])],
                [(ps[3], [gen(tok, ps[3], stop=[". ", "Lily"], max_tokens=60)]),
                 (ps[4], [gen(tok, ps[4], max_tokens=13)]),
                 (ps[2], [gen(tok, ps[2], logprobs=True, top_logprobs=5)])]]
    plain, _ = both(stories_model, tok, engine_name, batches)
    assert len(plain[0][0]) == 3 and plain[0][0][0] != plain[0][0][1]   # seeded choices differ
    stopped = plain[1][0][0]
    assert stopped[-1][2] == "stop" and len(stopped) < 60
    assert len(plain[1][1][0]) == 13


def test_preemption_with_speculation(stories_model, tok, stories_expected, engine_name):
    """A pool of 9 blocks for 4 sequences of up to 6: preempted sequences recompute and go on drafting;
    drafts take only blocks that are free (never preempting). Catches draft blocks taken
    from a pool that then has none for a decode token, or a draft surviving a preemption."""
    ps = prompts(tok, stories_expected)

    def batches():
        return [[(p, [gen(tok, p, max_tokens=24)]) for p in ps],
                [(p, [gen(tok, p, max_tokens=24)]) for p in ps]]
    _, sched = both(stories_model, tok, engine_name, batches, kv_blocks=9, n_ctx=96)
    assert sched.planner.preemptions > 0


def test_a_grammar_constrains_every_verified_position(stories_model, tok, stories_expected,
                                                      engine_name):
    """A regular expression constrains the output: each verified position samples under its
    own mask, computed after the previous token was accepted. Catches a mask reused across the
    positions of a draft (a token the grammar forbids there, or another choice)."""
    from reame import structured
    grammar = structured.compile_grammar(structured.regex(r"( [a-z]+){4,12}\. [A-Z][a-z]+"),
                                         tok, "regex")
    ps = prompts(tok, stories_expected)

    def batches():
        return [[(p, [gen(tok, p, max_tokens=40, ignore_eos=False,
                          constraint=structured.Constraint(grammar, tok))]) for p in ps[:3]],
                [(p, [gen(tok, p, max_tokens=40, ignore_eos=False,
                          constraint=structured.Constraint(grammar, tok))]) for p in ps[:3]]]
    plain, _ = both(stories_model, tok, engine_name, batches)
    import re
    for batch in plain:
        for r in batch:
            text = "".join(e[1] for e in r[0])
            assert re.fullmatch(r"( [a-z]+){4,12}\. [A-Z][a-z]+", text), text


def smollm2_jit(level: str | None = None, **kw):
    """SmolLM2-135M (Q4_1 weights, Q8_0 head: matmul_q8a products) on the JIT engine, for the
    tests of a token's bits across steps: at this CPU's level, or at a forced `level` (avx2:
    matmul_q8a_rp's panels on records, the head on them too). Every x86 family computes a token alike in all its tiles since
    2026-12-04 (tests/test_kernels_step_invariance.py), so no level is left out."""
    from conftest import isa_at, shared_path

    from reame.model import load_model
    model = load_model(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    if level is not None:
        from reame.jit.engine import JITEngine
        return model, JITEngine(model, n_ctx=256, threads=2, isa=isa_at(level), **kw)
    return model, create_engine(model, "jit", n_ctx=256, threads=2, **kw)


def alone_and_in_steps(eng, prompt):
    """The logits of token 7 after `prompt` decoded alone (slot 0), as the first row of a
    5-token and of a 12-token decode step (slots 1 and 2, the same cache written token by
    token): what a decode step and two verify steps give the same token."""
    from reame.batch import Batch
    for slot in range(3):
        for i, t in enumerate(prompt):
            eng.forward(Batch.decode([t], [i], [slot]))
    n = len(prompt)
    alone = eng.forward(Batch.decode([7], [n], [0]))[0]
    five = eng.forward(Batch.build([7, 8, 9, 10, 11], range(n, n + 5), 1, range(5),
                                   n_decode=5))[0]
    twelve = eng.forward(Batch.build([7, *range(20, 31)], range(n, n + 12), 2, range(12),
                                     n_decode=12))[0]
    return alone, five, twelve


@pytest.mark.parametrize("level", [None, "avx2"])
def test_a_tokens_logits_do_not_depend_on_the_step_size(level):
    """JIT engine, SmolLM2-135M (Q4_1 weights, Q8_0 head: matmul_q8a products) at this CPU's
    level and at the forced avx2 level: the logits of a token decoded alone equal, bit for bit,
    its row in a 5-token and a 12-token step over the same cache, past the 32 positions where
    8-bit roundings began to differ. This is what makes a verify step's greedy tokens plain
    decoding's. Catches a decode program on other arithmetic than the batched ones (the 1-row
    VNNI tiles: ~0.1-0.3 rms; the avx2 family's two-chain one-token tile: up to 0.42)."""
    model, eng = smollm2_jit(level, max_seqs=3)
    try:
        alone, five, twelve = alone_and_in_steps(eng, list(range(1000, 1060)))
        assert np.array_equal(alone, five) and np.array_equal(alone, twelve)
    finally:
        eng.close()


def prompt_programs_differ(mix: str, isa) -> bool:
    """Whether the mix's prompt-chunk programs (>= PROMPT_STEP tokens) run its weights on another
    arithmetic than its decode programs at this level: Q2_K, Q3_K and IQ4_XS take the AMX tiles
    on AMX CPUs, their row panels in every program elsewhere (docs/speculation.md): a decode
    row beside a prompt chunk gets other bits."""
    from reame.jit.select import matmul_site
    low = {"Q3_K_M": "Q3_K", "IQ4_XS": "IQ4_XS", "Q2_K": "Q2_K"}.get(mix)
    if low is None:
        return False
    one, chunk = (matmul_site(low, 256, 256, n, isa).spec for n in (1, 64))
    return (one.op, one.family) != (chunk.op, chunk.family)


@pytest.mark.parametrize("level", ["avx2", None])
@pytest.mark.parametrize("mix", ["Q8_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q3_K_M", "Q2_K",
                                 "IQ4_XS"])
def test_a_tokens_logits_are_one_arithmetic_for_every_weight_type(tmp_path_factory, mix, level):
    """Tiny synthetic Llama models (bench/synth.py: Q5_0 / Q5_1 through matmul_q8a's vnni and
    avx2 families, Q4_1 through its row panels (on ymm halves at avx2), Q4_K_M and Q3_K_M with their Q5_0 / Q5_1 / Q6_K fallbacks and K-quants, Q2_K and IQ4_XS on their row panels) on the
    JIT engine at this CPU's level and at the forced avx2 level: a token's logits alone equal its
    rows in a 5- and a 12-token step, and (but where prompt_programs_differ) its row beside
    another sequence's 47-token prompt chunk (a prompt-sized program; at the avx2 level every
    mix). Catches a family whose one-token tile sums a row in another order than its wider tiles
    (until 2026-12-04: every one of these at avx2, Q5_0, Q5_1 and Q3_K_M at the native level,
    ~1e-6 apart: enough to flip a near tie) and a prompt program whose products differ from the
    decode programs' (Q3_K_M's at avx2 on the float path: until 2026-12-04; Q3_K_M's, Q2_K's
    and IQ4_XS's on AVX-512 without AMX until 2026-12-06)."""
    from bench.synth import synth_model
    from conftest import isa_at

    from reame.batch import Batch
    from reame.jit.engine import JITEngine
    from reame.model import load_model
    model = load_model(str(synth_model(tmp_path_factory, "tiny-llama", mix)))
    eng = JITEngine(model, n_ctx=256, max_seqs=4, threads=2,
                    **({"isa": isa_at(level)} if level else {}))
    try:
        V = model.config.n_vocab
        prompt = [int(t) for t in np.random.default_rng(0).integers(10, V, 60)]
        alone, five, twelve = alone_and_in_steps(eng, prompt)
        n = len(prompt)
        assert np.array_equal(alone, five) and np.array_equal(alone, twelve)
        differ = prompt_programs_differ(mix, eng.isa)
        assert not (differ and level == "avx2")
        if not differ:
            chunk = [int(t) for t in np.random.default_rng(1).integers(10, V, 47)]
            mixed = eng.forward(Batch.build([7, *chunk], [n, *range(47)], [0] + [3] * 47, [0],
                                            n_decode=1))[0]
            assert np.array_equal(alone, mixed)
    finally:
        eng.close()


@pytest.mark.parametrize("attn_type", ["invariant", "f32"])
def test_invariant_attention_keeps_a_tokens_logits_in_a_prompt_sized_step(attn_type):
    """--attn-type invariant: a token decoded alone and the same token in a 40-token mixed step
    (another sequence's 39-token prompt chunk beside it: the prompt program, above the 16-token
    bucket) get bit-identical logits, so neither speculation's verify steps of several
    sequences nor a prompt arriving beside a decode changes a greedy token. With f32 prompt
    attention (attn_prefill's blocked kernel) they differ: the case this test builds is one
    where the attention kernel matters. Catches an invariant mode that still runs attn_prefill
    in prompt programs."""
    from reame.batch import Batch
    model, eng = smollm2_jit(max_seqs=2, attn_type=attn_type)
    try:
        prompt = list(range(1000, 1060))
        for slot in range(2):                   # the same cache in 2 slots, token by token
            for i, t in enumerate(prompt):
                eng.forward(Batch.decode([t], [i], [slot]))
        n = len(prompt)
        alone = eng.forward(Batch.decode([7], [n], [0]))[0]
        chunk = list(range(2000, 2039))         # slot 1's next 39 prompt tokens
        mixed = eng.forward(Batch.build([7, *chunk], [n, *range(n, n + 39)],
                                        [0] + [1] * 39, [0]))[0]
        assert np.array_equal(alone, mixed) == (attn_type == "invariant")
    finally:
        eng.close()


@pytest.mark.parametrize("kv", ["f32", "f16", "bf16", "bf16p"])
def test_a_tokens_attention_is_one_arithmetic_whatever_shares_its_step(kv):
    """The default attention (attn_type auto: bf16 prompt attention on an AMX-BF16 CPU) runs,
    in every program, a step's decode rows (Batch.n_decode, first) on attn_decode and its
    prompt rows on attn_prefill, each kernel computing a row on its own: a prompt computed in
    one chunk or in chunks of 7, 49, 1 and 3 tokens (programs of 8, 512, 4 and 4) leaves the
    same KV cache and last-token logits, and a token decoded alone gets the logits of its row
    in a 5-token verify step and in a 40-token mixed step beside another sequence's prompt
    chunk, bit for bit. This is what keeps greedy outputs identical with and without
    speculation at any concurrency. Catches decode programs that run prompt rows on the decode
    kernel (the chunked prompt's logits differ by ~0.5), a prompt program that runs decode
    rows on the prompt kernel (the mixed step's row differs), and a lone prompt row left in
    the one-token program, which has no prompt-row attention. With a bf16 cache (the AMX tile
    layout) every row runs the amx family: the same lines hold (catches programs choosing
    their own key tile, bk 32 in some and 64 in others); with the pair layout (bf16p, AVX512_BF16)
    every row runs attn_decode's bf16dp family: the same lines hold (catches prompt rows left on
    the f32 prompt kernel). The f16 cache (`--kv-type auto` on x86 CPUs without BF16) splits
    the rows as f32 does, each kernel widening the halves it reads."""
    from reame.batch import Batch
    if kv not in ("f32", "f16"):
        from conftest import amx_attention_missing, bf16dp_missing
        why = (amx_attention_missing if kv == "bf16" else bf16dp_missing)()
        if why:                 # AMX-BF16 / AVX512_BF16 hardware
            pytest.skip(why)
    model, eng = smollm2_jit(max_seqs=4, kv_type=kv)
    try:
        assert eng.split_attention == (kv in ("f32", "f16"))
        prompt = [int(t) for t in np.random.default_rng(3).integers(100, 20000, 60)]
        n = len(prompt)
        whole = eng.forward(Batch.prefill(prompt, 0, 0))[-1]
        pos = 0
        for c in (7, 49, 1, 3):     # a lone prompt row too (it runs the 4-token program)
            part = eng.forward(Batch.prefill(prompt[pos:pos + c], pos, 1))[-1]
            pos += c
        assert np.array_equal(whole, part)
        k, t0, t1 = eng.kv.k[model.config.n_layer - 1], eng.kv.tables[0, 0], eng.kv.tables[1, 0]
        assert np.array_equal(k[t0], k[t1])
        alone = eng.forward(Batch.decode([7], [n], [0]))[0]
        five = eng.forward(Batch.build([7, 8, 9, 10, 11], range(n, n + 5), 1, range(5),
                                       n_decode=5))[0]
        assert np.array_equal(alone, five)
        chunk = list(range(2000, 2039))         # slot 2's first 39 prompt tokens beside it
        mixed = eng.forward(Batch.build([7, *chunk], [n, *range(39)], [1] + [2] * 39, [0],
                                        n_decode=1))[0]
        assert np.array_equal(alone, mixed)
    finally:
        eng.close()
