"""Constrained decoding: the tokens a grammar allows next, from llguidance.

llguidance (Microsoft's grammar engine behind `guidance`, also used by llama.cpp and vLLM) was
chosen because it computes a whole-vocabulary token mask in tens of microseconds by walking a
token trie against an Earley parser (no precompiled per-state tables, so a new JSON schema costs
nothing up front), takes JSON schemas, regexes, Lark and GBNF grammars natively, needs only
each token's bytes (which our tokenizer has) and works from numpy. Writing our own would mean a
schema-to-grammar compiler and an incremental parser: the part that is hard to get right.

A `Grammar` is compiled (and checked) once per request in the HTTP thread, its first mask
computed there too (the costly step: lexer set-up and the text the grammar forces); each
sequence gets its own `Constraint`, a copy of that prepared `LLMatcher`. Per generated token:

    mask = constraint.mask()          # bool [n_vocab]: the allowed tokens (computed ahead)
    token = sample(logits where mask) # reame.sampling.Sampler.sample(logits, allowed=mask)
    constraint.accept(token)          # advance; `done` once the grammar is complete

`prepare()` computes the mask early: the scheduler calls it for every constrained sequence of
a step on a worker thread while the forward pass runs (llguidance drops the GIL).

Bounds (issue 29: a client's grammar must not stall the others or fill the memory): every
matcher runs under `LIMITS` (llguidance's per-step lexer fuel and Earley items, lexer states,
grammar size, and errors that never echo the grammar or the parser state); a grammar whose
counted repetitions could force more than reame.grammar_size.MAX_SIZE characters is refused
before llguidance sees it; the tokenizer llguidance calls back (under the GIL) for forced text
gets at most MAX_TOKENIZE bytes of it. Errors are one short line (`short_error`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import grammar_size
from .errors import ReameError


class GrammarError(ReameError):
    """A schema, regex or grammar llguidance refuses (the message says why)."""


def _llg():
    try:
        import llguidance
    except ImportError as e:                # a dependency: only a broken install lacks it
        raise GrammarError(f"constrained decoding needs llguidance ({e})") from None
    return llguidance


_LIMITS = None


# Earley items in one row (llguidance's default 2000). A step's cost grows with the square
# of it: the ambiguous GBNF `root ::= s "y"` / `s ::= s s | "x"` reached 0.5 s per token and
# 100 s in all before its row hit 2000; at 500 it fails after 250 tokens, 14 ms at most per
# token. Tool grammars of 128 tools and JSON schemas with anyOf of 60 objects need under 200.
MAX_ITEMS_IN_ROW = 500
# one mask computation longer than this ends the request (a safety net: masks take ~1 ms);
# counted in the computing thread's CPU time, so that a loaded machine (the thread waiting for a
# core or for the GIL) does not end a request whose grammar is cheap
STEP_SECONDS = 0.5


def limits():
    """The llguidance limits of every matcher: its defaults (200k lexer fuel and 50k Earley
    items per step, 250k lexer states, 500k grammar symbols) but MAX_ITEMS_IN_ROW, with
    `verbose_errors` off, so that an error carries neither the grammar nor the parser state."""
    global _LIMITS
    if _LIMITS is None:
        _LIMITS = _llg().LLParserLimits(max_items_in_row=MAX_ITEMS_IN_ROW,
                                        verbose_errors=False)
    return _LIMITS


MAX_ERROR = 200             # characters of an llguidance message that reach the client


def short_error(message: str) -> str:
    """llguidance's message cut to its first line (no `<non-verbose/>`, no grammar excerpt, no
    parser state) and MAX_ERROR characters."""
    line = next((x.strip() for x in str(message).splitlines()
                 if x.strip() and x.strip() != "<non-verbose/>"), "rejected")
    return line if len(line) <= MAX_ERROR else line[:MAX_ERROR - 3] + "..."


def _check_size(size: int, what: str) -> None:
    if size > grammar_size.MAX_SIZE:
        raise GrammarError(f"the {what} can force {size:,} characters of fixed text "
                           f"(literals times nested repetition counts; at most "
                           f"{grammar_size.MAX_SIZE:,})")


# ---- the tokenizer, once per vocabulary ----

_TOKENIZERS: dict[int, object] = {}
_TOK_LOCK = threading.Lock()


# bytes of forced text tokenized per call, at least (4 of the vocabulary's longest token if
# more): llguidance asks for all of it but uses only the first token, and a grammar forcing a
# megabyte of "a" held the GIL for 3 s per step
MAX_TOKENIZE = 1024


class _Vocab:
    """What llguidance's TokenizerWrapper reads: token bytes (control tokens marked with a
    leading 0xff, so grammars never produce them as text), EOS and a tokenize function.

    The tokenize function must return ids whose bytes are exactly the bytes asked for:
    llguidance tokenizes the text a grammar forces (the "{" of a JSON object, the rest of a
    choice) and checks each forced token against the grammar. The forced text continues the
    output, so it is tokenized without SentencePiece's space prefix (with it, "{" became
    "▁" "{" and the first token broke the grammar: the HTTP 500 of issue 28); where a
    vocabulary's rules still change the bytes (whitespace that a special token's lstrip/rstrip
    flag swallows), the longest-match tokenization of the bytes is returned instead.

    Only the first MAX_TOKENIZE bytes (or 4 longest tokens) are tokenized, cut at a character
    boundary: llguidance allows only the first forced token and tokenizes again at the next
    step, and drops the last tokens it gets as possibly merging with what follows, so such a
    prefix gives it the same first token."""

    def __init__(self, tok):
        self._tok = tok
        n = tok.n_vocab
        self.tokens = [(b"\xff" + tok.token_bytes(i)) if tok.is_special(i) else tok.token_bytes(i)
                       for i in range(n)]
        self.eos_token_id = tok.eos_id if tok.eos_id is not None else min(tok.eog_ids)
        self.bos_token_id = tok.bos_id
        self.special_token_ids = [i for i in range(n) if tok.is_special(i)]
        self._by_bytes: dict[bytes, int] | None = None     # for greedy(), built when needed
        self._cap = max(MAX_TOKENIZE, 4 * max(map(len, self.tokens), default=0))

    def __call__(self, data: bytes) -> list[int]:
        if len(data) > self._cap:
            cut = self._cap
            while cut and data[cut] & 0xC0 == 0x80:            # not inside a UTF-8 character
                cut -= 1
            data = data[:cut]
        ids = self._tok.encode(data.decode("utf-8", "replace"), add_special=False,
                               space_prefix=False)
        if b"".join(self.tokens[i] for i in ids) == data:
            return ids
        return self.greedy(data)

    def greedy(self, data: bytes) -> list[int]:
        """Longest-match tokenization of `data` over the non-control tokens (bytes no token
        spells are left out)."""
        if self._by_bytes is None:
            from .tokenizer.vocab import ATTR_BYTE
            attrs = self._tok.vocab.attrs
            by: dict[bytes, int] = {}
            for i, b in enumerate(self.tokens):
                if b and b[0] != 0xff and (b not in by or attrs[by[b]] & ATTR_BYTE):
                    by[b] = i                      # a piece ("a") wins over a byte token (<0x61>)
            self._by_bytes = by
            self._longest = max(map(len, by), default=1)
        by, out, i = self._by_bytes, [], 0
        while i < len(data):
            for k in range(min(self._longest, len(data) - i), 0, -1):
                t = by.get(data[i:i + k])
                if t is not None:
                    out.append(t)
                    i += k
                    break
            else:
                i += 1
        return out


def lltokenizer(tok):
    """llguidance's view of our tokenizer (built once per tokenizer: ~1 s for 150k tokens)."""
    key = id(tok)
    with _TOK_LOCK:
        if key not in _TOKENIZERS:
            llg = _llg()
            wrapper = llg.TokenizerWrapper(_Vocab(tok))
            _TOKENIZERS[key] = llg.LLTokenizer(wrapper, n_vocab=tok.n_vocab,
                                               eos_token=sorted(tok.eog_ids) or None)
        return _TOKENIZERS[key]


# ---- grammars from the request fields ----

@dataclass(frozen=True)
class Grammar:
    """A compiled-and-checked llguidance grammar and where it came from (for errors), with a
    matcher whose first mask is computed (each Constraint starts from a copy of it)."""
    source: str               # llguidance's JSON grammar
    origin: str               # "json_schema", "regex", ...
    matcher: object = field(default=None, compare=False, repr=False)


# JSON as Python's json.dumps writes it: no free whitespace (a model that likes blanks could
# otherwise fill max_tokens with them, and a random-weight one does), ", " and ": " between
# items; a schema's own "x-guidance" options override these
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_schema(schema, open_objects: bool = False) -> str:
    """The grammar of `schema`. Objects are closed (`close_objects`) unless `open_objects`."""
    if not isinstance(schema, (dict, bool)):
        raise GrammarError("a JSON schema must be an object")
    if too_deep(schema, MAX_DEPTH):
        raise GrammarError(f"the JSON schema is nested deeper than {MAX_DEPTH} levels")
    try:
        _check_size(grammar_size.schema_size(schema), "JSON schema")
    except RecursionError:                  # $ref chains: depth is checked, references are not
        raise GrammarError("the JSON schema's references chain too deep") from None
    if isinstance(schema, dict) and not open_objects:
        schema = close_objects(schema)
    if isinstance(schema, dict):
        schema = bound_integers(schema)
    try:
        return _llg().LLMatcher.grammar_from_json_schema(
            schema if isinstance(schema, dict) else {} if schema else {"not": {}},
            defaults=JSON_STYLE)
    except ValueError as e:
        raise GrammarError(f"invalid JSON schema: {short_error(e)}") from None


# JSON nesting (objects and arrays) a schema or a tool's value may have: the schema walkers
# here and in llguidance recurse (a 10,000-deep schema crashed llguidance's native code)
MAX_DEPTH = 64


def too_deep(value, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` (decoded JSON) nests objects/arrays more than `limit` deep; iterative."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        if d > limit:
            return True
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return False


# the integers JSON exchanges exactly (RFC 8259 section 6, IEEE doubles): at most 16 digits
SAFE_INTEGER = 2 ** 53 - 1
_NOT_SCHEMAS = ("enum", "const", "default", "examples")     # values, not subschemas


def bound_integers(schema: dict) -> dict:
    """`schema` with each integer that has no lower (upper) bound given -(2**53 - 1) (2**53 -
    1): at most 16 digits, as llama.cpp's json-schema-to-grammar writes an integer. Unbounded,
    a small model writes digits until max_tokens (stories260K: `{"age": -300000000000...`, cut,
    so the client has no JSON). A bound the schema gives is kept; numbers with a fraction are
    not bounded (no JSON Schema keyword limits their digits). Returns a copy."""
    def walk(s, key=None):
        if key in _NOT_SCHEMAS:
            return s
        if isinstance(s, list):
            return [walk(v) for v in s]
        if not isinstance(s, dict):
            return s
        out = {k: walk(v, k) for k, v in s.items()}
        t = s.get("type")
        if t == "integer" or isinstance(t, list) and "integer" in t and "number" not in t:
            if "minimum" not in s and "exclusiveMinimum" not in s:
                out["minimum"] = -SAFE_INTEGER
            if "maximum" not in s and "exclusiveMaximum" not in s:
                out["maximum"] = SAFE_INTEGER
        return out
    return walk(schema)


# keywords whose values are subschemas: a map of them, one, or a list of them
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = ("additionalProperties", "unevaluatedProperties", "items", "additionalItems",
               "contains", "not", "if", "then", "else", "propertyNames", "unevaluatedItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_APPLICATORS = ("allOf", "anyOf", "oneOf")


def close_objects(schema: dict) -> dict:
    """`schema` with every object that lists its properties closed: `additionalProperties:
    false` wherever a schema has `properties` or `patternProperties` and says nothing of
    `additionalProperties` / `unevaluatedProperties` (as llama.cpp does, and vLLM's guidance
    backend with `disable_additional_properties`). JSON Schema's default is open, but a
    model then invents keys, which clients reading the object into a type refuse; an object
    the schema opens (`additionalProperties: true` or a schema) stays open, one without
    `properties` (`{"type": "object"}`, JSON mode) is any object. Closed, an object has each
    key at most once (llguidance writes the listed properties in order).

    Keys an object gets from its `allOf` / `anyOf` / `oneOf` members stay allowed: a closed
    object allows its members' properties, a closed member its object's (and, in `allOf`, its
    siblings'), so that closing never makes a schema's valid objects invalid. A `$ref` target
    that is such a member (of an `allOf` with others, or of an object with properties) is left
    open: the keys of the objects using it are not known there. Returns a copy; `schema` is
    not changed."""
    root = schema
    shared_refs: set[str] = set()

    def props(s) -> set[str]:
        """Property names a member declares (through one local $ref)."""
        if isinstance(s, dict) and isinstance(s.get("$ref"), str):
            s = grammar_size.resolve_ref(root, s["$ref"]) or s
        p = s.get("properties") if isinstance(s, dict) else None
        return set(p) if isinstance(p, dict) else set()

    def find_shared(s) -> None:
        if isinstance(s, dict):
            for k in _APPLICATORS:
                members = s.get(k)
                if isinstance(members, list) and (k == "allOf" and len(members) > 1
                                                  or "properties" in s):
                    shared_refs.update(m["$ref"] for m in members if isinstance(m, dict)
                                       and isinstance(m.get("$ref"), str))
            for v in s.values():
                find_shared(v)
        elif isinstance(s, list):
            for v in s:
                find_shared(v)

    def close(s, outside: frozenset, path: str):
        if not isinstance(s, dict):
            return s
        out = dict(s)
        own = set(s["properties"]) if isinstance(s.get("properties"), dict) else set()
        for k in _SCHEMA_MAPS:
            if isinstance(s.get(k), dict):
                out[k] = {n: close(v, frozenset(), f"{path}/{k}/{n}") for n, v in s[k].items()}
        for k in _SCHEMA_ONE:
            if isinstance(s.get(k), dict):
                out[k] = close(s[k], frozenset(), f"{path}/{k}")
        members_props = set()
        for k in _SCHEMA_LISTS:
            v = s.get(k)
            if not isinstance(v, list):
                continue
            if k in _APPLICATORS:
                each = [props(m) for m in v]
                members_props.update(*each)
                both = set().union(*each) if k == "allOf" else set()
                out[k] = [close(m, frozenset(outside | own | both), f"{path}/{k}/{i}")
                          for i, m in enumerate(v)]
            else:
                out[k] = [close(m, frozenset(), f"{path}/{k}/{i}") for i, m in enumerate(v)]
        if (("properties" in s or "patternProperties" in s) and path not in shared_refs
                and "additionalProperties" not in s and "unevaluatedProperties" not in s
                and isinstance(s.get("properties", {}), dict)):
            extra = (outside | members_props) - own
            if extra:
                out["properties"] = {**out.get("properties", {}), **{n: {} for n in
                                                                    sorted(extra)}}
            out["additionalProperties"] = False
        return out

    find_shared(schema)
    return close(schema, frozenset(), "#")


def json_object() -> str:
    """Any JSON object (OpenAI's JSON mode)."""
    return json_schema({"type": "object"})


def regex(pattern: str) -> str:
    _check_size(grammar_size.regex_size(pattern), "regex")
    return _llg().LLMatcher.grammar_from_regex(pattern)


def choice(options: list[str]) -> str:
    """Exactly one of the strings."""
    return regex("|".join(re.escape(o) for o in options))


def lark(source: str) -> str:
    _check_size(grammar_size.lark_size(source), "grammar")
    return _llg().LLMatcher.grammar_from_lark(source)


def gbnf(source: str) -> str:
    """llama.cpp's GBNF grammar (as its `grammar` field takes)."""
    _llg()
    from llguidance.gbnf_to_lark import gbnf_to_lark
    return lark(to_lark(gbnf_to_lark, source, "GBNF grammar"))


def to_lark(convert, source: str, what: str) -> str:
    """`convert(source)` (llguidance's GBNF-to-Lark converters); their errors as GrammarError,
    without the excerpt of the grammar they quote."""
    try:
        return convert(source)
    except Exception as e:                  # the converter raises on syntax errors
        raise GrammarError(f"invalid {what}: {short_error(str(e).split(', ' + chr(39))[0])}") \
            from None


def compile_grammar(source: str, tok, origin: str) -> Grammar:
    """Check `source` against the vocabulary and compute its first mask now, on the calling
    (request) thread, so that a bad or too costly grammar is a 400 before the engine sees it,
    and the lexer set-up and first forced text are not paid on the engine's step."""
    llg = _llg()
    lt = lltokenizer(tok)
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(source, lt,
                                                                      limits=limits())
    if is_error:
        raise GrammarError(f"invalid {origin}: {short_error(messages[0] if messages else '')}")
    matcher = llg.LLMatcher(lt, source, log_level=0, limits=limits())
    if not matcher.is_error():
        matcher.compute_bitmask()
    if matcher.is_error():
        raise GrammarError(f"invalid {origin}: {short_error(matcher.get_error())}")
    return Grammar(source, origin, matcher)


# ---- one sequence ----

class Constraint:
    """A grammar's state for one sequence."""

    def __init__(self, grammar: Grammar, tok):
        llg = _llg()
        self.tok = tok
        self.n_vocab = tok.n_vocab
        self.origin = grammar.origin
        if grammar.matcher is not None:          # prepared by compile_grammar: copy its state
            self.matcher = grammar.matcher.deep_copy()
        else:
            self.matcher = llg.LLMatcher(lltokenizer(tok), grammar.source, log_level=0,
                                         limits=limits())
        if self.matcher.is_error():
            raise GrammarError(f"invalid {grammar.origin}: "
                               f"{short_error(self.matcher.get_error())}")
        self.words = (self.n_vocab + 31) // 32
        self._bits = np.zeros((1, self.words), np.int32)
        self._ready = False                  # _bits holds the mask of the current state
        self._slow = 0.0                     # a mask that took over STEP_SECONDS: its time

    def prepare(self) -> None:
        """Compute the next token's mask now (any thread; llguidance drops the GIL)."""
        if not self._ready:
            t = time.thread_time()
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            t = time.thread_time() - t
            if t > STEP_SECONDS:
                self._slow = t
            self._ready = True

    def mask(self) -> np.ndarray:
        """bool [n_vocab]: the tokens the grammar allows next. GrammarError when the mask
        could not be computed (a limit hit mid-generation): the sequence's request fails."""
        self.prepare()
        if self.matcher.is_error():
            raise GrammarError(f"the {self.origin} failed during generation: "
                               f"{short_error(self.matcher.get_error())}")
        if self._slow:
            raise GrammarError(f"the {self.origin} took {self._slow:.2f} s to compute one "
                               f"token's choices (at most {STEP_SECONDS:g} s)")
        return np.unpackbits(self._bits.view(np.uint8), count=self.n_vocab,
                             bitorder="little").view(bool)

    def accept(self, token: int) -> None:
        """Advance past a sampled token (it was allowed)."""
        self._ready = False
        if not self.matcher.consume_token(token):
            raise GrammarError(f"the {self.origin} failed during generation at token {token}: "
                               f"{short_error(self.matcher.get_error())}")

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing but end-of-generation may follow."""
        return self.matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        return self.matcher.is_accepting()


def prepare_all(constraints: list[Constraint]) -> None:
    """Masks of several sequences (a step's constrained ones), one after the other on this
    thread (llguidance releases the GIL for each: run this beside the forward pass)."""
    for c in constraints:
        c.prepare()


def dumps_schema(schema) -> str:
    return json.dumps(schema, separators=(",", ":"))
