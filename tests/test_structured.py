"""Constrained decoding (reame/structured.py) through Generation and the scheduler, on a
random-weight model with Qwen2's real 152k-token vocabulary: its free output is noise, so only
the grammar makes it valid.

Schemas cover nested objects, arrays (empty too), enums, required fields, numbers, booleans,
strings with unicode and escapes; regexes, choices, Lark and llama.cpp's GBNF; a grammar cut by
max_tokens ends with "length"; masks are computed beside the forward pass.
"""

from __future__ import annotations

import json
import re
import threading

import jsonschema
import numpy as np
import pytest
from conftest import TIME_SCALE

from bench.synth import synth_model
from reame import structured as S
from reame.engines import create_engine
from reame.generate import Generation
from reame.model import load_model
from reame.planner import SchedulerParams
from reame.sampling import SamplingParams
from reame.scheduler import DONE, Scheduler
from reame.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(synth_model(tmp_path_factory, "tiny-qwen2", "Q8_0", vocab="qwen2"))


@pytest.fixture(scope="module")
def tok(model):
    return Tokenizer.from_metadata(model.metadata)


@pytest.fixture(scope="module")
def sched(model):
    eng = create_engine(model, "jit", n_ctx=512, max_seqs=16, block_size=16)
    s = Scheduler(eng, SchedulerParams(max_batch=16, max_waiting=512)).start()
    yield s
    s.stop()


SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
        "address": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 8},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"], "additionalProperties": False}},
     "required": ["name", "age", "role", "tags", "address"], "additionalProperties": False},
    {"type": "object", "properties": {
        "ok": {"type": "boolean"},
        "score": {"type": "number"},
        "items": {"type": "array", "maxItems": 4, "items": {
            "type": "object", "properties": {"id": {"type": "integer"},
                                             "kind": {"enum": ["a", "b", "c"]}},
            "required": ["id", "kind"], "additionalProperties": False}}},
     "required": ["ok", "score", "items"], "additionalProperties": False},
    {"type": "array", "items": {"enum": [1, 2, "three", None, True]}, "maxItems": 5},
]


def gen(tok, grammar, max_tokens=200, seed=0, temperature=1.0, **kw):
    ids = tok.encode("Answer in JSON:", add_special=True)
    c = S.Constraint(grammar, tok) if grammar is not None else None
    return Generation(tok, ids, SamplingParams(temperature=temperature, seed=seed),
                      max_tokens=max_tokens, n_ctx=512, constraint=c, **kw)


def run(sched, gens):
    reqs = [sched.submit([g.prompt_ids], [[g]]) for g in gens]
    out = []
    for r, g in zip(reqs, gens):
        while (ev := r.out.get(timeout=120 * TIME_SCALE)) is not DONE:
            assert ev.error is None, ev.error
        out.append((g.text, g.finish_reason))
    return out


def test_100_schema_requests_on_a_noise_model_all_validate(sched, tok):
    """100 requests (3 schemas, sampled at temperature 1 with different seeds, batched 16 at a
    time): every output parses and validates; without the grammar the same model writes noise."""
    grammars = [S.compile_grammar(S.json_schema(s), tok, "json_schema") for s in SCHEMAS]
    gens = [gen(tok, grammars[i % 3], seed=i) for i in range(100)]
    for i, (text, reason) in enumerate(run(sched, gens)):
        assert reason == "stop", (i, text)
        jsonschema.validate(json.loads(text), SCHEMAS[i % 3])
    (free, _), = run(sched, [gen(tok, None, max_tokens=40)])
    with pytest.raises(ValueError):
        json.loads(free)


def test_masks_are_computed_beside_the_forward_pass(sched, tok, monkeypatch):
    seen = set()
    real = S.Constraint.prepare

    def prepare(self):
        seen.add(threading.current_thread().name.split("_")[0])
        return real(self)
    monkeypatch.setattr(S.Constraint, "prepare", prepare)
    g = S.compile_grammar(S.json_schema(SCHEMAS[1]), tok, "json_schema")
    (text, reason), = run(sched, [gen(tok, g, seed=3)])
    assert isinstance(json.loads(text), dict) and reason == "stop"
    assert "reame-masks" in seen


class _TimedMatcher:
    """A matcher whose mask computation either burns CPU or only waits (a loaded machine: the
    thread waits for a core or for the GIL) for `seconds`."""

    def __init__(self, seconds, busy):
        self.seconds, self.busy = seconds, busy

    def deep_copy(self):
        return self

    def is_error(self):
        return False

    def unsafe_compute_mask_ptr(self, ptr, nbytes):
        import time
        if not self.busy:
            time.sleep(self.seconds)
            return
        t = time.thread_time()
        while time.thread_time() - t < self.seconds:
            pass


def test_the_mask_time_limit_counts_cpu_time_not_waiting(tok, monkeypatch):
    """A mask that costs more CPU than STEP_SECONDS ends the request with a GrammarError; one
    whose thread only waited as long (a loaded machine) does not. Catches the limit measured in
    wall time (a CI machine under load failed a cheap JSON schema at 0.58 s) and a limit never
    checked."""
    monkeypatch.setattr(S, "STEP_SECONDS", 0.05)
    waited = S.Constraint(S.Grammar("{}", "json_schema", _TimedMatcher(0.15, busy=False)), tok)
    assert waited.mask().shape == (tok.n_vocab,)
    busy = S.Constraint(S.Grammar("{}", "json_schema", _TimedMatcher(0.15, busy=True)), tok)
    with pytest.raises(S.GrammarError, match="to compute one token's choices"):
        busy.mask()


def test_max_tokens_inside_a_value_ends_with_length(sched, tok):
    g = S.compile_grammar(S.json_schema({"type": "object", "properties": {
        "text": {"type": "string"}}, "required": ["text"]}), tok, "json_schema")
    (text, reason), = run(sched, [gen(tok, g, max_tokens=6, seed=1)])
    assert reason == "length" and text.startswith('{"text": "')
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.parametrize("seed", range(4))
def test_unicode_escapes_numbers_and_empty_arrays(sched, tok, seed):
    schema = {"type": "object", "properties": {
        "s": {"type": "string", "maxLength": 6},
        "n": {"type": "number"},
        "e": {"type": "array", "maxItems": 0},
        "m": {"type": "array", "items": {"type": "integer"}, "minItems": 0, "maxItems": 2}},
        "required": ["s", "n", "e", "m"], "additionalProperties": False}
    g = S.compile_grammar(S.json_schema(schema), tok, "json_schema")
    (text, reason), = run(sched, [gen(tok, g, seed=seed)])
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert value["e"] == [] and text.count('"e": []') == 1


def test_string_content_round_trips_unicode_and_escapes(tok):
    """Driving the matcher with a chosen text: escapes and non-ASCII are accepted as JSON
    writes them, an unescaped control character is not."""
    g = S.compile_grammar(S.json_schema({"type": "string"}), tok, "json_schema")
    good = json.dumps('caf\u00e9 "q" \\ \t \u2603 \U0001f600', ensure_ascii=False)
    c = S.Constraint(g, tok)
    for t in tok.encode(good, add_special=False):
        assert c.mask()[t], (good, t)
        c.accept(t)
    assert c.accepting
    c = S.Constraint(g, tok)
    bad = tok.encode('"a\nb"', add_special=False)
    with pytest.raises(S.GrammarError):
        for t in bad:
            c.accept(t)


@pytest.mark.parametrize("kind,source,check", [
    ("regex", r"[0-9]{3}-[a-z]{2}", lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
    ("choice", ["positive", "negative", "neutral"],
     lambda t: t in ("positive", "negative", "neutral")),
    ("gbnf", 'root ::= "yes" | "no" | digit digit\ndigit ::= [0-9]',
     lambda t: re.fullmatch(r"yes|no|[0-9]{2}", t)),
    ("lark", 'start: "(" NUM ("," NUM)* ")"\nNUM: /[0-9]{1,3}/',
     lambda t: re.fullmatch(r"\([0-9]{1,3}(,[0-9]{1,3})*\)", t)),
])
def test_regex_choice_gbnf_and_lark(sched, tok, kind, source, check):
    g = S.compile_grammar(getattr(S, kind)(source), tok, kind)
    outs = run(sched, [gen(tok, g, seed=s, max_tokens=60) for s in range(6)])
    for text, reason in outs:
        assert reason == "stop" and check(text), text


@pytest.mark.parametrize("kind,source", [("regex", "(unclosed"), ("gbnf", "root ::= ("),
                                         ("lark", "start: undefined_rule"),
                                         ("json_schema", {"type": "no-such-type"})])
def test_invalid_grammars_are_errors(tok, kind, source):
    with pytest.raises(S.GrammarError):
        S.compile_grammar(getattr(S, kind)(source), tok, kind)


def test_sampler_respects_the_mask_at_every_temperature(tok):
    """Greedy and sampled draws never leave the allowed set (top-k/p over allowed tokens)."""
    from reame.sampling import Sampler
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(tok.n_vocab).astype(np.float32) * 5
    allowed = np.zeros(tok.n_vocab, bool)
    allowed[[7, 500, 9000]] = True
    for p in (SamplingParams(temperature=0), SamplingParams(temperature=1.5, seed=1),
              SamplingParams(temperature=1, top_k=2, seed=2),
              SamplingParams(temperature=1, top_p=0.5, min_p=0.1, seed=3)):
        s = Sampler(p, [])
        for _ in range(50):
            assert s.sample(logits, allowed).token in (7, 500, 9000)


def test_sampler_never_draws_a_blocked_token_when_most_are_allowed(tok):
    """The dense path (free text: nearly every token allowed): the blocked tokens have the
    largest logits by far and still never come out, with or without truncation."""
    from reame.sampling import Sampler
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(tok.n_vocab).astype(np.float32)
    blocked = [3, 77, 4000]
    logits[blocked] = 50.0
    allowed = np.ones(tok.n_vocab, bool)
    allowed[blocked] = False
    for p in (SamplingParams(temperature=0), SamplingParams(temperature=2.0, seed=1),
              SamplingParams(temperature=1, top_k=5, seed=2),
              SamplingParams(temperature=1, top_p=0.9, seed=3)):
        s = Sampler(p, [])
        for _ in range(100):
            assert s.sample(logits, allowed).token not in blocked


def test_bound_integers_gives_unbounded_integers_sixteen_digits():
    """structured.bound_integers: an integer without a bound gets +-(2**53 - 1) (llama.cpp's
    16 digits), at any depth and in a type list; bounds the schema gives, numbers, enum /
    const / default values and the input are left alone."""
    big = S.SAFE_INTEGER
    schema = {"type": "object", "properties": {
        "a": {"type": "integer"},
        "b": {"type": "integer", "minimum": 0},
        "c": {"type": "integer", "exclusiveMaximum": 10},
        "d": {"type": ["integer", "null"]},
        "e": {"type": "number"},
        "f": {"type": "array", "items": {"type": "integer"}},
        "g": {"enum": [{"type": "integer"}]},
        "h": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "integer"}}}
    before = json.dumps(schema)
    out = S.bound_integers(schema)
    assert json.dumps(schema) == before
    p = out["properties"]
    assert (p["a"]["minimum"], p["a"]["maximum"]) == (-big, big)
    assert (p["b"]["minimum"], p["b"]["maximum"]) == (0, big)
    assert "minimum" in p["c"] and "maximum" not in p["c"] and p["c"]["exclusiveMaximum"] == 10
    assert p["d"]["maximum"] == big and p["f"]["items"]["minimum"] == -big
    assert "minimum" not in p["e"] and p["g"] == {"enum": [{"type": "integer"}]}
    assert out["$defs"]["n"]["maximum"] == big


@pytest.mark.parametrize("text,ok", [('{"n": 9007199254740991}', True),
                                     ('{"n": -9007199254740991}', True),
                                     ('{"n": 0}', True),
                                     ('{"n": 9007199254740992}', False),
                                     ('{"n": 12345678901234567}', False)])
def test_an_unbounded_integer_ends_within_sixteen_digits(tok, text, ok):
    """The grammar of `{"n": integer}` (json_schema, and a tool's arguments) takes integers up
    to 2**53 - 1 and no longer ones. Catches the runaway of issue 28's client tests: stories260K
    asked for pydantic-ai's `output_type=int` wrote `{"response": -3000000000...` until
    max_tokens, so the client never got JSON."""
    import llguidance
    from reame.toolcalls import HERMES
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    call = '<tool_call>\n{"name": "f", "arguments": ' + text + '}\n</tool_call>'
    for source, out in [(S.json_schema(schema), text),
                        (HERMES.grammar([tool], {"type": "function", "function": {"name": "f"}}),
                         call)]:
        g = S.compile_grammar(source, tok, "test")
        m = llguidance.LLMatcher(S.lltokenizer(tok), g.source, log_level=0)
        ids = tok.encode(out, add_special=False)
        assert (m.consume_tokens(ids) and m.is_accepting()) == ok, out
