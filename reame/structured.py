"""Constrained decoding: the tokens a grammar allows next, from llguidance.

llguidance (Microsoft's grammar engine behind `guidance`, also used by llama.cpp and vLLM) was
chosen because it computes a whole-vocabulary token mask in tens of microseconds by walking a
token trie against an Earley parser (no precompiled per-state tables, so a new JSON schema costs
nothing up front), takes JSON schemas, regexes, Lark and GBNF grammars natively, needs only
each token's bytes (which our tokenizer has) and works from numpy. Writing our own would mean a
schema-to-grammar compiler and an incremental parser: the part that is hard to get right.

A `Grammar` is compiled (and checked) once per request in the HTTP thread; each sequence gets
its own `Constraint` (an `LLMatcher`). Per generated token:

    mask = constraint.mask()          # bool [n_vocab]: the allowed tokens (computed ahead)
    token = sample(logits where mask) # reame.sampling.Sampler.sample(logits, allowed=mask)
    constraint.accept(token)          # advance; `done` once the grammar is complete

`prepare()` computes the mask early: the scheduler calls it for every constrained sequence of
a step on a worker thread while the forward pass runs (llguidance drops the GIL).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass

import numpy as np

from .errors import ReameError


class GrammarError(ReameError):
    """A schema, regex or grammar llguidance refuses (the message says why)."""


def _llg():
    try:
        import llguidance
    except ImportError as e:                # a dependency: only a broken install lacks it
        raise GrammarError(f"constrained decoding needs llguidance ({e})") from None
    return llguidance


# ---- the tokenizer, once per vocabulary ----

_TOKENIZERS: dict[int, object] = {}
_TOK_LOCK = threading.Lock()


class _Vocab:
    """What llguidance's TokenizerWrapper reads: token bytes (control tokens marked with a
    leading 0xff, so grammars never produce them as text), EOS and a tokenize function."""

    def __init__(self, tok):
        self._tok = tok
        n = tok.n_vocab
        self.tokens = [(b"\xff" + tok.token_bytes(i)) if tok.is_special(i) else tok.token_bytes(i)
                       for i in range(n)]
        self.eos_token_id = tok.eos_id if tok.eos_id is not None else min(tok.eog_ids)
        self.bos_token_id = tok.bos_id
        self.special_token_ids = [i for i in range(n) if tok.is_special(i)]

    def __call__(self, data: bytes) -> list[int]:
        return self._tok.encode(data.decode("utf-8", "replace"), add_special=False)


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
    """A compiled-and-checked llguidance grammar and where it came from (for errors)."""
    source: str               # llguidance's JSON grammar
    origin: str               # "json_schema", "regex", ...


# JSON as Python's json.dumps writes it: no free whitespace (a model that likes blanks could
# otherwise fill max_tokens with them, and a random-weight one does), ", " and ": " between
# items; a schema's own "x-guidance" options override these
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_schema(schema) -> str:
    if not isinstance(schema, (dict, bool)):
        raise GrammarError("a JSON schema must be an object")
    try:
        return _llg().LLMatcher.grammar_from_json_schema(
            schema if isinstance(schema, dict) else {} if schema else {"not": {}},
            defaults=JSON_STYLE)
    except ValueError as e:
        raise GrammarError(f"invalid JSON schema: {e}") from None


def json_object() -> str:
    """Any JSON object (OpenAI's JSON mode)."""
    return json_schema({"type": "object"})


def regex(pattern: str) -> str:
    return _llg().LLMatcher.grammar_from_regex(pattern)


def choice(options: list[str]) -> str:
    """Exactly one of the strings."""
    return regex("|".join(re.escape(o) for o in options))


def lark(source: str) -> str:
    return _llg().LLMatcher.grammar_from_lark(source)


def gbnf(source: str) -> str:
    """llama.cpp's GBNF grammar (as its `grammar` field takes)."""
    _llg()
    try:
        from llguidance.gbnf_to_lark import gbnf_to_lark
        return lark(gbnf_to_lark(source))
    except Exception as e:                  # the converter raises on syntax errors
        raise GrammarError(f"invalid GBNF grammar: {e}") from None


def compile_grammar(source: str, tok, origin: str) -> Grammar:
    """Check `source` against the vocabulary now, so a bad grammar is a 400, not a failed
    generation."""
    llg = _llg()
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(source, lltokenizer(tok))
    if is_error:
        raise GrammarError(f"invalid {origin}: {messages[0] if messages else 'rejected'}")
    return Grammar(source, origin)


# ---- one sequence ----

class Constraint:
    """A grammar's state for one sequence."""

    def __init__(self, grammar: Grammar, tok):
        llg = _llg()
        self.tok = tok
        self.n_vocab = tok.n_vocab
        self.matcher = llg.LLMatcher(lltokenizer(tok), grammar.source, log_level=0)
        if self.matcher.is_error():
            raise GrammarError(f"invalid {grammar.origin}: {self.matcher.get_error()}")
        self.words = (self.n_vocab + 31) // 32
        self._bits = np.zeros((1, self.words), np.int32)
        self._ready = False                  # _bits holds the mask of the current state

    def prepare(self) -> None:
        """Compute the next token's mask now (any thread; llguidance drops the GIL)."""
        if not self._ready:
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            self._ready = True

    def mask(self) -> np.ndarray:
        """bool [n_vocab]: the tokens the grammar allows next."""
        self.prepare()
        return np.unpackbits(self._bits.view(np.uint8), count=self.n_vocab,
                             bitorder="little").view(bool)

    def accept(self, token: int) -> None:
        """Advance past a sampled token (it was allowed)."""
        self._ready = False
        if not self.matcher.consume_token(token):
            raise GrammarError(f"token {token} does not continue the grammar: "
                               f"{self.matcher.get_error()}")

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
