"""Where drafts come from: token runs seen before, found by their last few tokens.

A `TokenIndex` keeps token documents and, for every position p of each, the n-gram of the
`NGRAM` tokens before it (tokens[p - NGRAM:p]) -> (document, p), the most recent `MAX_OCC`
occurrences per n-gram. To draft after a context, look up its last n-gram, measure how far back
each occurrence keeps matching the context (the match length), and read the tokens that
followed the best ones (`candidates`). The same structure serves two scopes:

- one per sequence over its own prompt and output (`local`: prompt lookup; the document is the
  sequence's token list itself, indexed as it grows), and
- one per model over earlier requests (`global`): each finished request adds the part of its
  prompt not stored before (whole 64-token chunks seen earlier are skipped, so a conversation's
  history is stored once) and its output after the prompt's last tokens. A repeated output adds
  weight to the stored one instead of a copy. Bounded in tokens: the documents that served the
  fewest accepted tokens, least recently, are evicted first.

An n-gram index with match extension was chosen over a suffix tree (SuffixDecoding) for its
cost in Python: one dict lookup per draft and a few token comparisons, and no per-node objects
(a suffix tree over 256k tokens is millions of them); the match extension gives the suffix
tree's longest-match preference, and the occurrence counts its frequency scores.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass

NGRAM = 3           # tokens that key a lookup (packed into one int, 20 bits a token id)
MAX_OCC = 12        # occurrences kept per n-gram (the most recent)
MAX_MATCH = 32      # how far back a match is measured
CHUNK = 64          # prompt chunk that is stored once (global)
TAIL = 48           # prompt tokens stored before an output (its context)


@dataclass
class Candidate:
    """A continuation found for a context: `tokens` followed an earlier occurrence of the
    context's last `match` tokens in document `doc` at position `pos`."""
    doc: int
    pos: int
    match: int
    weight: float
    local: bool


class TokenIndex:
    def __init__(self, max_tokens: int = 1 << 18, local: bool = False):
        self.local = local
        self.max_tokens = max_tokens
        self.docs: dict[int, object] = {}          # id -> tokens (array('i') or the seq's list)
        self.meta: dict[int, list] = {}            # id -> [copies, accepted tokens served, last use]
        self.index: dict[int, list[int]] = {}      # key(n-gram) -> packed (doc << 32 | pos)
        self.indexed: dict[int, int] = {}          # doc -> positions indexed so far
        self.n_tokens = 0
        self.evictions = 0
        self._next = 0
        self._clock = 0
        self._outputs: dict[int, int] = {}         # hash of an output document -> its id
        self._chunks: OrderedDict[int, None] = OrderedDict()   # prompt chunks stored (global)

    # ---- adding ----

    def add(self, tokens, weight: int = 1) -> int:
        """A new document (a copy of `tokens`, or, local, the list itself as it grows)."""
        d = self._next
        self._next += 1
        self.docs[d] = tokens if self.local else array("i", tokens)
        self.meta[d] = [weight, 0.0, self._tick()]
        self.indexed[d] = 0
        self.extend(d)
        return d

    def extend(self, d: int) -> None:
        """Index document d's positions added since the last call."""
        toks = self.docs[d]
        start = max(self.indexed[d], NGRAM)
        end = len(toks)
        index, packed = self.index, d << 32
        for p in range(start, end):
            key = (toks[p - 3] << 40) | (toks[p - 2] << 20) | toks[p - 1]     # NGRAM = 3
            occ = index.get(key)
            if occ is None:
                index[key] = [packed | p]
            else:
                occ.append(packed | p)
                if len(occ) > MAX_OCC:
                    del occ[0]
        self.n_tokens += end - self.indexed[d]
        self.indexed[d] = end

    def add_request(self, prompt, output) -> None:
        """A finished request (global): the prompt's unseen chunks, then its output after the
        prompt's last TAIL tokens; a repeated output weighs more instead of being stored twice.
        Evicts what no longer fits."""
        new_from = len(prompt)
        h = 0
        for i in range(0, len(prompt) - CHUNK + 1, CHUNK):
            h = hash((h, tuple(prompt[i:i + CHUNK])))
            if h in self._chunks:
                self._chunks.move_to_end(h)
            else:
                self._chunks[h] = None
                new_from = min(new_from, i)
        while len(self._chunks) > self.max_tokens // CHUNK:
            self._chunks.popitem(last=False)
        if new_from < len(prompt) - TAIL:           # new prompt text: stored for later requests
            self.add(prompt[max(0, new_from - NGRAM):len(prompt) - TAIL])
        if output:
            doc = list(prompt[-TAIL:]) + list(output)
            key = hash(tuple(doc))
            d = self._outputs.get(key)
            if d is not None and d in self.docs:
                self.meta[d][0] += 1
                self.meta[d][2] = self._tick()
            else:
                self._outputs[key] = self.add(doc)
        self.evict()

    # ---- eviction ----

    def evict(self) -> None:
        """Over max_tokens: drop the documents that served the fewest accepted tokens (and
        were stored once), least recently used among equals, down to 7/8 of the bound (one
        ranking for many evictions)."""
        if self.n_tokens <= self.max_tokens:
            return
        ranked = sorted(self.docs, key=lambda k: (self.meta[k][1] + self.meta[k][0] - 1,
                                                  self.meta[k][2]))
        for d in ranked[:-1]:
            if self.n_tokens <= self.max_tokens * 7 // 8:
                break
            self.drop(d)

    def drop(self, d: int) -> None:
        """Forget document d and its index entries (as many operations as it has tokens)."""
        toks = self.docs.pop(d)
        n = self.indexed.pop(d)
        del self.meta[d]
        index = self.index
        for p in range(NGRAM, n):
            key = (toks[p - 3] << 40) | (toks[p - 2] << 20) | toks[p - 1]
            occ = index.get(key)
            if occ is not None:
                occ[:] = [x for x in occ if x >> 32 != d]
                if not occ:
                    del index[key]
        self.n_tokens -= n
        self.evictions += 1

    # ---- drafting ----

    def candidates(self, ctx, limit: int = 4) -> list[Candidate]:
        """Occurrences of ctx's last NGRAM tokens, best first (longest match, then most used),
        at most `limit` (a local document's own end is not indexed yet: no self-match)."""
        if len(ctx) < NGRAM:
            return []
        occ = self.index.get((ctx[-3] << 40) | (ctx[-2] << 20) | ctx[-1])
        if not occ:
            return []
        n_ctx = len(ctx)
        out = []
        seen = set()
        for packed in reversed(occ):                # most recent first
            d, p = packed >> 32, packed & 0xFFFFFFFF
            toks = self.docs[d]
            if p >= len(toks) or (d, p) in seen:
                continue
            seen.add((d, p))
            m = NGRAM
            top = min(MAX_MATCH, p, n_ctx)
            while m < top and toks[p - m - 1] == ctx[n_ctx - m - 1]:
                m += 1
            meta = self.meta[d]
            out.append(Candidate(d, p, m, meta[0] + meta[1], self.local))
        out.sort(key=lambda c: (-c.match, -c.weight))
        return out[:limit]

    def continuation(self, c: Candidate, n: int) -> list[int]:
        toks = self.docs.get(c.doc)
        if toks is None:
            return []
        return list(toks[c.pos:c.pos + n])

    def credit(self, doc: int, accepted: int) -> None:
        """Accepted draft tokens that came from document doc (its usefulness)."""
        m = self.meta.get(doc)
        if m is not None:
            m[1] += accepted
            m[2] = self._tick()

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    # ---- persistence (global) ----

    def state(self) -> dict:
        """What load() reads back. The documents are copies of their arrays (a memory copy:
        cheap on the engine thread); `jsonable` turns them into lists elsewhere."""
        docs = sorted(self.docs, key=lambda d: self.meta[d][2])   # oldest first
        return {"ngram": NGRAM,
                "docs": [[self.meta[d][0], round(self.meta[d][1], 2), array("i", self.docs[d])]
                         for d in docs],
                "chunks": list(self._chunks)[-4096:]}

    @staticmethod
    def jsonable(state: dict) -> dict:
        return {**state, "docs": [[c, s, t.tolist()] for c, s, t in state["docs"]]}

    def load(self, state: dict, n_vocab: int) -> int:
        """Documents from state() (checked: token ids within the vocabulary); returns the
        number loaded. ValueError when the state is not one this index wrote."""
        if state.get("ngram") != NGRAM:
            raise ValueError(f"n-gram size {state.get('ngram')!r}, not {NGRAM}")
        docs = state.get("docs")
        if not isinstance(docs, list):
            raise ValueError("docs: a list expected")
        loaded = 0
        for item in docs:
            if not (isinstance(item, list) and len(item) == 3):
                raise ValueError("docs: [copies, served, tokens] expected")
            copies, served, toks = item
            if not (isinstance(toks, list) and toks and all(
                    isinstance(t, int) and 0 <= t < min(n_vocab, 1 << 20) for t in toks)):
                raise ValueError("docs: token ids within the vocabulary expected")
            if not (isinstance(copies, int) and isinstance(served, (int, float))):
                raise ValueError("docs: counts expected")
            d = self.add(toks, max(1, copies))
            self.meta[d][1] = float(max(0.0, served))
            self._outputs[hash(tuple(toks))] = d
            loaded += 1
        for h in state.get("chunks") or []:
            if isinstance(h, int):
                self._chunks[h] = None
        self.evict()
        return loaded
