"""The merge loop both tokenizer models share: repeatedly join the adjacent pair of symbols that
`priority(left, right)` ranks first (lowest key; None: never), the leftmost on ties.

BPE ranks a pair by its merge rank; SentencePiece by the rank of the joined piece's score
(both non-negative ints). `merge_heap` is the O(n log n) form used on real input: a heap of
plain ints `key * n + left` over a doubly linked list of symbols (arrays), an entry stale once
the pair at `left` has another key. On 300,000 symbols ("a" x 300,000, SmolLM2) it peaks at
24 MB and takes 0.5 s, where a heap of (key, left, joined text) tuples took 70 MB and 0.9 s.
`merge_naive` is the obvious O(n^2) scan, kept as its reference in the tests.
"""

from __future__ import annotations

import heapq
from array import array
from typing import Callable

from ..errors import ReameError

Priority = Callable[[str, str], int | None]
CACHE_MAX = 200_000      # words a tokenizer remembers; the cache is cleared when it grows past this
CACHE_WORD = 64          # longer words are not remembered: a client's giant words cannot fill it


class TokenLimit(ReameError):
    """The text has more than `limit` tokens: `at_least` of them were counted (or bounded from
    below) when tokenizing stopped."""

    def __init__(self, limit: int, at_least: int):
        super().__init__(f"the text has more than {limit} tokens (at least {at_least})")
        self.limit, self.at_least = limit, at_least


def encode_words(words, cache: dict, encode_word: Callable[[str], list[int]],
                 out: list[int], limit: int | None = None, width: int = 1) -> None:
    """Append the ids of each word to `out`, remembering each short word's ids in `cache`.

    `limit`: raise TokenLimit as soon as `out` holds more ids, or before merging a word that
    must make more than the ids left (a token spells at most `width` characters: a word of c
    characters has at least c / width tokens), so that tokenizing stops within one word of the
    limit and a giant word over it is never merged."""
    if limit is None:
        limit = 1 << 62
    for word in words:
        ids = cache.get(word)
        if ids is None:
            if len(out) + len(word) // width > limit:
                raise TokenLimit(limit, len(out) + len(word) // width)
            ids = encode_word(word)
            if len(word) <= CACHE_WORD:
                if len(cache) >= CACHE_MAX:
                    cache.clear()
                cache[word] = ids
        out.extend(ids)
        if len(out) > limit:
            raise TokenLimit(limit, len(out))


def merge_naive(syms: list[str], priority: Priority) -> list[str]:
    syms = list(syms)
    while len(syms) > 1:
        best, best_i = None, -1
        for i in range(len(syms) - 1):
            k = priority(syms[i], syms[i + 1])
            if k is not None and (best is None or k < best):
                best, best_i = k, i
        if best_i < 0:
            break
        syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
    return syms


def merge_heap(syms: list[str], priority: Priority) -> list[str]:
    syms = list(syms)
    n = len(syms)
    if n < 2:
        return syms
    nxt = array("q", range(1, n + 1))                 # the linked list, 8 bytes a symbol
    nxt[-1] = -1
    prv = array("q", range(-1, n - 1))
    # key[i]: the priority of the pair starting at symbol i (None: no merge). A heap entry is
    # the int key * n + i; it is stale when key[i] is another key now. An old entry whose key
    # the new pair at i happens to have stands for that pair: it sorts exactly where the new
    # pair's own entry does, so merging on it merges what the new entry would
    key = [priority(a, b) for a, b in zip(syms, syms[1:])]
    key.append(None)
    heap = [k * n + i for i, k in enumerate(key) if k is not None]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        k, left = divmod(pop(heap), n)
        if key[left] != k:
            continue                                  # stale: that pair changed since
        right = nxt[left]
        text = syms[left] + syms[right]
        syms[left] = text
        syms[right] = ""
        key[right] = None
        nr = nxt[right]
        nxt[left] = nr
        pl = prv[left]
        if pl >= 0:
            kp = key[pl] = priority(syms[pl], text)
            if kp is not None:
                push(heap, kp * n + pl)
        if nr >= 0:
            prv[nr] = left
            kn = key[left] = priority(text, syms[nr])
            if kn is not None:
                push(heap, kn * n + left)
        else:
            key[left] = None
    return [s for s in syms if s]
