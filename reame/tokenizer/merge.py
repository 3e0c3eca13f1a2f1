"""The merge loop both tokenizer models share: repeatedly join the adjacent pair of symbols that
`priority(left, right)` ranks first (lowest key; None: never), the leftmost on ties.

BPE ranks a pair by its merge rank; SentencePiece by the score of the joined piece. `merge_heap`
is the O(n log n) form used on real input (a heap of (key, left index, joined text) over a doubly
linked list of symbols; stale entries are recognised by their text); `merge_naive` is the
obvious O(n^2) scan, kept as its reference in the tests.
"""

from __future__ import annotations

import heapq
from typing import Callable, Hashable

Priority = Callable[[str, str], Hashable | None]
CACHE_MAX = 200_000      # words a tokenizer remembers; the cache is cleared when it grows past this


def encode_words(words, cache: dict, encode_word: Callable[[str], list[int]],
                 out: list[int]) -> None:
    """Append the ids of each word to `out`, remembering each word's ids in `cache`."""
    for word in words:
        ids = cache.get(word)
        if ids is None:
            ids = encode_word(word)
            if len(cache) >= CACHE_MAX:
                cache.clear()
            cache[word] = ids
        out.extend(ids)


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
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    nxt[-1] = -1
    heap = []
    for i in range(n - 1):
        k = priority(syms[i], syms[i + 1])
        if k is not None:
            heap.append((k, i, syms[i] + syms[i + 1]))
    heapq.heapify(heap)
    while heap:
        _, left, text = heapq.heappop(heap)
        right = nxt[left]
        if not syms[left] or right < 0 or syms[left] + syms[right] != text:
            continue                                  # stale: one side was merged already
        syms[left] = text
        syms[right] = ""
        nr = nxt[right]
        nxt[left] = nr
        if nr >= 0:
            prv[nr] = left
        pl = prv[left]
        if pl >= 0:
            k = priority(syms[pl], text)
            if k is not None:
                heapq.heappush(heap, (k, pl, syms[pl] + text))
        if nr >= 0:
            k = priority(text, syms[nr])
            if k is not None:
                heapq.heappush(heap, (k, left, text + syms[nr]))
    return [s for s in syms if s]
