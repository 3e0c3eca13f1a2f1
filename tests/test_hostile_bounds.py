"""Token and memory bounds before work (issue 29, item 3): a text costs the tokenizer what the
context can hold, not what the client sent; the pre-tokenizer and the merges stay near-linear on
one giant word; one request's many sequences do not hold off another request's first token.

The server paths run in-process (falcon.testing) on SmolLM2's vocabulary (byte-level BPE, its
longest token spells 81 characters) with the reference engine, n_ctx 4096: every hostile
request here is refused before anything is generated. The work is counted, not timed: the
characters the pre-tokenizer split and the merge loop saw, and the ids tokenizing produced.
The scheduler runs through step() on the planner tests' fake engine."""

from __future__ import annotations

import random
import time
import tracemalloc

import numpy as np
import pytest
import regex
from conftest import shared_path
from falcon import testing

from reame.engines import create_engine
from reame.model import load_model
from reame.planner import SchedulerParams
from reame.scheduler import Scheduler
from reame.server import ServerConfig, create_app
from reame.tokenizer import TokenLimit, Tokenizer
from reame.tokenizer import bpe as bpe_mod
from reame.tokenizer import merge as merge_mod
from reame.tokenizer import pretokenize as P
from test_planner import FakeEngine, expected
from test_planner import FakeGen as _FakeGen

N_CTX = 4096
BIG = "a" * 2_000_000                  # 2 MB without a space: one pre-token


@pytest.fixture(scope="module")
def smol():
    model = load_model(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    eng = create_engine(model, "reference", n_ctx=N_CTX, max_seqs=2)
    app = create_app(eng, ServerConfig(model=model.path, max_seqs=2, adaptive_boot=0))
    client = testing.TestClient(app)
    client.simulate_get("/v1/models")                   # loads the service
    yield client, app.reame.service
    app.reame.service.stop()


class Work:
    """What the service's tokenizer did: characters pre-tokenized and merged, and the most ids
    one text had when tokenizing ended (by its end or by the limit)."""

    def __init__(self, monkeypatch, tok):
        self.split = self.merged = self.ids = 0
        model = tok._model
        split, word = model.pre.split, model.encode_word
        encode_words = bpe_mod.encode_words

        def count_split(text):
            self.split += len(text)
            return split(text)

        def count_word(w):
            self.merged += len(w)
            return word(w)

        def count_ids(words, cache, enc, out, *a):
            try:
                encode_words(words, cache, enc, out, *a)
            finally:
                self.ids = max(self.ids, len(out))
        # a frozen dataclass: its split is replaced on a copy
        monkeypatch.setattr(model, "pre", _Pre(model.pre, count_split))
        monkeypatch.setattr(model, "encode_word", count_word)
        monkeypatch.setattr(bpe_mod, "encode_words", count_ids)
        model.cache.clear()


class _Pre:
    def __init__(self, pre, split):
        self._pre, self.split = pre, split

    def __getattr__(self, name):
        return getattr(self._pre, name)


def refused(r, param, code="context_length_exceeded"):
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert len(r.content) < 600, len(r.content)             # a short body: no echo of the text
    err = r.json["error"]
    if "code" in err:                                   # OpenAI's shape
        assert err["code"] == code and err["param"] == param, err
    else:                                               # Anthropic's (/v1/messages)
        assert err["type"] == "invalid_request_error" and "context length" in err["message"]
    return err


# ---- (b) every path: refused before tokenizing ----

PATHS = {
    "chat": ("/v1/chat/completions",
             {"messages": [{"role": "user", "content": BIG}], "max_tokens": 4}, "messages"),
    "completion": ("/v1/completions", {"prompt": BIG, "max_tokens": 4}, "prompt"),
    "prompt list": ("/v1/completions", {"prompt": ["Hello", BIG], "max_tokens": 4}, "prompt"),
    "responses": ("/v1/responses", {"input": BIG, "max_output_tokens": 4}, "input"),
    "messages": ("/v1/messages", {"max_tokens": 4,
                                  "messages": [{"role": "user", "content": BIG}]}, "messages"),
    "count_tokens": ("/v1/messages/count_tokens",
                     {"messages": [{"role": "user", "content": BIG}]}, "messages"),
    "embeddings": ("/v1/embeddings", {"input": ["Hello", BIG]}, "input"),
    "tokenize": ("/tokenize", {"content": BIG}, "content"),
    "prediction": ("/v1/chat/completions",          # drafts for the speculator (on by default)
                   {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                    "prediction": {"type": "content", "content": BIG}}, "prediction"),
}


@pytest.mark.parametrize("name", list(PATHS))
def test_a_2mb_text_is_refused_before_it_is_tokenized(smol, monkeypatch, name):
    """2 MB of "a" (one pre-token) on every path that tokenizes client text: a 400
    context_length_exceeded naming the field, and the tokenizer never split or merged it (a
    text of more characters than n_ctx x 81 cannot fit). Catches tokenizing first and counting
    after (the old path: 6-26 s and a 400 saying the prompt has 500,030 tokens), a bound applied
    on some paths only, and a limit checked per word alone (the giant word would still be
    split and merged whole)."""
    client, service = smol
    work = Work(monkeypatch, service.tok)
    path, body, param = PATHS[name]
    if path.startswith("/v1/messages"):
        body = {**body, "model": service.id}
    err = refused(client.simulate_post(path, json=body), param)
    assert "4096" in err["message"] or "4095" in err["message"]
    assert work.split < 1000 and work.merged < 1000, (work.split, work.merged)


TEXT = "Once upon a time, there was a little robot who liked to count words. " * 800


@pytest.mark.parametrize("name", ["chat", "completion", "tokenize"])
def test_a_long_prompt_under_the_character_bound_stops_at_the_context(smol, monkeypatch, name):
    """56,000 characters of ordinary words (~13,600 tokens): under the character bound, so it
    is tokenized, but tokenizing stops within a word of the limit (4,095 prompt tokens, 4,096
    for /tokenize). Catches a limit checked after tokenizing the whole text (13,600 ids)."""
    client, service = smol
    work = Work(monkeypatch, service.tok)
    path, body, param = PATHS[name]
    key = {"chat": "messages", "completion": "prompt", "tokenize": "content"}[name]
    body = {**body, key: [{"role": "user", "content": TEXT}] if name == "chat" else TEXT}
    refused(client.simulate_post(path, json=body), param)
    assert N_CTX - 1 < work.ids <= N_CTX + 16, work.ids


def test_the_character_bound_never_refuses_a_text_that_fits(smol, tok):
    """256,000 '#' are 4,000 tokens of 64 (64 characters a token): /tokenize counts them
    instead of refusing, and Tokenizer.encode with the limit at their exact count returns them.
    Catches a bound from a guessed ratio (one token per 4 or 16 bytes would refuse it): a text
    is refused unseen only when even the longest token (81 characters) could not make it fit."""
    client, service = smol
    assert service.tok.width == 81
    r = client.simulate_post("/tokenize", json={"content": "#" * 256_000})
    assert r.status_code == 200, r.text[:300]
    assert r.json["count"] == 4000
    ids = tok.encode("#" * 320_000)
    assert tok.encode("#" * 320_000, limit=len(ids)) == ids


def test_token_ids_past_the_context_are_refused(smol):
    """Token-id prompts and embedding inputs are checked by length (nothing to tokenize)."""
    client, _ = smol
    refused(client.simulate_post("/v1/completions", json={"prompt": [[1] * 5000]}), "prompt")
    refused(client.simulate_post("/v1/embeddings", json={"input": [[1] * 5000]}), "input")


def test_a_giant_stop_string_is_refused(smol):
    """A stop string is bounded (MAX_STOP_CHARS): the text stream compares the text it holds
    back with every stop string's prefixes at each token, so a 100,000-character one costs
    each token of a long output ~100,000 comparisons. Catches counting stop strings but not
    their length."""
    client, _ = smol
    r = client.simulate_post("/v1/completions", json={"prompt": "Hello", "max_tokens": 1,
                                                       "stop": ["x" * 100_000]})
    refused(r, "stop", None)


# ---- (a) the tokenizer itself ----

@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_gguf(shared_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))


def test_encode_limit_stops_before_merging_a_word_that_cannot_fit(tok, monkeypatch):
    """Tokenizer.encode(limit=): a text longer than limit x width characters raises at once;
    a giant word after some text raises before its merge; under the limit the ids are the
    unlimited ones. Catches a limit checked only after each word is merged."""
    merged = []
    word = tok._model.encode_word
    monkeypatch.setattr(tok._model, "encode_word", lambda w: merged.append(len(w)) or word(w))
    with pytest.raises(TokenLimit) as e:
        tok.encode("a" * 101 * tok.width, limit=100)
    assert e.value.limit == 100 and e.value.at_least > 100 and merged == []
    with pytest.raises(TokenLimit):
        tok.encode("Hello there " + "a" * 99 * tok.width, limit=100)
    assert max(merged) < 100
    text = "The quick brown fox jumps over the lazy dog. " * 5
    assert tok.encode(text, limit=len(tok.encode(text))) == tok.encode(text)
    with pytest.raises(TokenLimit):
        tok.encode(text, limit=len(tok.encode(text)) - 1)


def test_giant_words_are_not_cached(tok):
    """The word cache keeps short words only: a client's distinct giant words (each up to the
    context's worth of characters) would otherwise stay in it, 200,000 of them. Catches
    caching every word."""
    tok.clear_cache()
    tok.encode("x" * 5000 + " " + "y" * 70 + " hello")
    assert max(map(len, tok._model.cache)) <= merge_mod.CACHE_WORD
    assert " hello" in tok._model.cache


def test_a_giant_word_merges_in_little_memory(tok):
    """200,000 symbols of one word through merge_heap: the same symbols as before, at most
    ~100 bytes a symbol at peak (tracemalloc; it is 80). Catches a heap of (key, left, joined
    text) tuples (~240 bytes a symbol: 46 MB here)."""
    syms = list("a" * 200_000)
    tracemalloc.start()
    try:
        out = merge_mod.merge_heap(syms, tok._model._priority)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200_000 * 100, peak
    assert "".join(out) == "a" * 200_000 and len(out) < 60_000


def test_merge_heap_equals_the_scan_on_repetitive_words(tok):
    """Repetitive words (runs of one or two characters) are where the heap holds many entries
    of one key for a place that merged since: they must merge as the direct scan does. Catches
    trusting an entry because its place is alive (without its key)."""
    from reame.tokenizer.pretokenize import byte_encode
    rng = random.Random(3)
    for _ in range(300):
        alpha = rng.choice(["a", "ab", "aab", " a", "-=", "01", "#", "e\u0301"])
        w = byte_encode("".join(rng.choice(alpha) for _ in range(rng.randint(49, 160))))
        assert tok._model._merge_heap(w) == tok._model._merge_naive(w), w


@pytest.mark.parametrize("name,text", [("superbpe", "1" * 20_000),
                                       ("deepseek-llm", " " * 200_000 + "1")])
def test_pre_tokenizer_steps_are_linear(name, text):
    """Two pre-tokenizers had a step whose regex rescans a run at every position: superbpe's
    `(?=(?:[0-9]{3})+(?![0-9]))` (20,000 digits: 43 s) and deepseek-llm's `\\s+\\Z` (200,000
    spaces before a digit: 102 s), both on a loaded 2-core machine. Now 0.02-0.1 s: the 2 s
    bound is far from both."""
    pre = P.pre_tokenizer(name)
    t = time.perf_counter()
    words = pre.split(text)
    assert time.perf_counter() - t < 2.0
    assert "".join(words) == text


def test_the_linear_steps_split_as_their_regexes(tok):
    """trailing_space and thousands split every string as the regex steps they replace
    (random strings over digits, spaces of several kinds, letters, marks). Catches cutting
    digit groups from the left, or the trailing run at its last character only."""
    steps = [(regex.compile(r"\s+\Z"), P.trailing_space),
             (regex.compile(r"(?=(?:[0-9]{3})+(?![0-9]))"), P.thousands)]
    rng = random.Random(4)
    alpha = "aZ 19\t\n\r\u00a0\u3000x.\u0661\u0663\x1c\x85\u0301"
    for old, new in steps:
        a, b = P.PreTokenizer("old", (old,)), P.PreTokenizer("new", (new,))
        for _ in range(20_000):
            s = "".join(rng.choice(alpha) for _ in range(rng.randint(1, 24)))
            assert a.split(s) == b.split(s), repr(s)


# ---- (c) fair admission ----

class FakeGen(_FakeGen):
    constraint = None

    def finish(self, reason):
        self.finished = True
        return ""


def first_token_step(n_a: int) -> tuple[int, Scheduler, list]:
    """Request A: n_a prompts of 400 tokens, 8 tokens each; then request B: one prompt. The
    scheduler (4 slots, 512 tokens a step) is stepped until B has its first token; returns the
    step count, the scheduler and A's generations."""
    eng = FakeEngine(slots=4, blocks=4096, bs=16, n_ctx=1024)
    s = Scheduler(eng, SchedulerParams(max_batch=4, token_budget=512, prefill_chunk=512,
                                       max_waiting=1024))
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 900, 400)] for _ in range(n_a)]
    gens = [[FakeGen(8)] for _ in prompts]
    s.submit(prompts, gens)
    b = s.submit([[5, 6, 7, 8] * 100], [[FakeGen(8)]])
    for n in range(1, 10_000):
        s.step(0.0)
        if not b.out.empty():
            return n, s, list(zip(prompts, gens))
    raise AssertionError("B never got a token")


def test_a_big_request_does_not_hold_off_a_small_one():
    """A's 128 prompts were queued before B's one: B's first token comes in the second step
    (its prompt needs the budget A's first prompt used in the first), for A of 32 prompts as
    for 128; A's outputs are still right. Catches first-come-first-served admission by
    sequence (B waited behind all of A: its first token came in step 65 behind 32 prompts, 257
    behind 128; the 286 s of issue 29) and any order that grows with A's size."""
    steps_128, s, a = first_token_step(128)
    steps_32, _, _ = first_token_step(32)
    assert steps_128 == steps_32 <= 3, (steps_128, steps_32)
    while s.step(0.0):
        pass
    for p, (g,) in a:
        assert g.output_ids == expected(p, 8)


def test_round_robin_keeps_first_come_first_served_among_equals():
    """Requests of one prompt each are admitted in arrival order (the fair order only moves a
    request's second and later sequences behind others' first)."""
    from test_planner import make, prompt, request, run_step
    p, eng = make(slots=2, blocks=64, bs=4, token_budget=64)
    rng = np.random.default_rng(5)
    owner_a, owner_b = object(), object()
    a = [request(p, prompt(rng, 3), max_tokens=3)[0] for _ in range(3)]
    for s in a:
        s.owner = owner_a
    b = request(p, prompt(rng, 3), max_tokens=3)[0]
    b.owner = owner_b
    plan = run_step(p, eng)
    assert plan.admitted == [a[0], b]            # A's second waits behind B's first
    assert [s.owner for s in p._fair_order()] == [owner_a, owner_a]


# ---- Responses truncation ----

def test_truncation_auto_renders_a_long_history_a_few_times():
    """/v1/responses with truncation 'auto' drops the oldest messages until the prompt fits.
    3,001 messages (a system one, then user/assistant turns and a tool result) of which the
    last 40 fit: the same messages are kept as dropping them one by one keeps, the system
    message stays, a call's result goes with it, and the prompt is rendered 14 times. Catches
    rendering once per dropped message (~2,960 renders; 3,000 messages took 85 s on SmolLM2)."""
    from reame.server.responses_api import Responses
    from reame.server.schemas import APIError, invalid

    msgs = [{"role": "system", "content": "sys"}]
    for i in range(3000):
        msgs.append({"role": ("user", "assistant", "tool")[i % 3 if i % 7 == 3 else i % 2],
                     "content": str(i)})

    class Service:
        calls = 0

        def chat_prompt(self, g):
            self.calls += 1
            if len(g.messages) > 40:
                raise invalid("messages", "too long", "context_length_exceeded")
            return [1] * len(g.messages)

    def one_by_one(messages):                   # the rule, dropping one message at a time
        messages = list(messages)
        while len(messages) > 40:
            first = next(k for k, m in enumerate(messages) if m["role"] != "system")
            end = first + 1
            while end < len(messages) and messages[end]["role"] == "tool":
                end += 1
            del messages[first:end]
        return messages

    service, g = Service(), type("G", (), {})()
    g.messages = list(msgs)
    origins = [f"input[{i}]" for i in range(len(msgs))]
    ids = Responses._prompt(service, g, origins, True)
    assert g.messages == one_by_one(msgs) and len(ids) == len(g.messages)
    assert g.messages[0]["role"] == "system" and g.messages[-1] is msgs[-1]
    assert origins == [f"input[{msgs.index(m)}]" for m in g.messages]
    assert service.calls <= 14, service.calls
    g.messages = list(msgs)
    with pytest.raises(APIError):
        Responses._prompt(service, g, list(origins), False)
