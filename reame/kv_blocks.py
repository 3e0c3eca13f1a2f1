"""The blocks of the KV pool: who holds each one, and the cross-request prefix cache.

A block is in one of three states:
- *in use*: referenced by one or more sequences (`ref[b] > 0`); a full block whose tokens are
  known may be shared read-only by any number of them;
- *cached*: unreferenced, but full and registered under the hash of its contents, so a later
  sequence with the same prefix takes it instead of recomputing it; these are evicted, least
  recently used first, only when an allocation finds no free block;
- *free*: holds nothing anyone can find.

A full block's hash chains the hash of the block before it with the block's token ids, salted
with the model's identity: equal hashes mean equal tokens at equal positions after an equal
prefix, hence equal keys and values. Pure Python, no engine: the scheduler drives it and writes
the resulting block ids into the engine's block tables (reame/kv_cache.py).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

ROOT = b""          # the parent hash of a sequence's first block


def chain_hashes(tokens, block_size: int, salt: bytes = b"", parent: bytes = ROOT,
                 first: int = 0) -> list[bytes]:
    """Hashes of the full blocks first, first + 1, ... of `tokens` (parent: hash of block
    first - 1)."""
    out = []
    for start in range(first * block_size, len(tokens) - block_size + 1, block_size):
        h = hashlib.blake2b(array("i", tokens[start:start + block_size]).tobytes(),
                            digest_size=16, key=salt[:64], person=b"reame-kv")
        h.update(parent)
        parent = h.digest()
        out.append(parent)
    return out


class BlockPool:
    def __init__(self, n_blocks: int, block_size: int, salt: bytes = b""):
        self.n_blocks, self.block_size, self.salt = n_blocks, block_size, salt
        self.ref = [0] * n_blocks
        self.hash_of: list[bytes | None] = [None] * n_blocks
        self.by_hash: dict[bytes, int] = {}
        self._free = list(range(n_blocks - 1, -1, -1))    # a stack: low ids first
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced cached blocks, oldest first
        # counters since start (Prometheus): prompt tokens looked up / found, evictions
        self.queries = self.hits = self.evictions = 0

    # ---- state ----

    @property
    def available(self) -> int:
        """Blocks an allocation can get: free ones and evictable cached ones."""
        return len(self._free) + len(self._lru)

    @property
    def used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.n_blocks - self.available

    @property
    def cached(self) -> int:
        """Blocks findable by hash (in use or not)."""
        return len(self.by_hash)

    # ---- allocation and references ----

    def allocate(self) -> int:
        """A block for one sequence (ref 1): a free one, else the least recently used cached
        one (evicted from the cache). IndexError when every block is in use."""
        if self._free:
            b = self._free.pop()
        elif self._lru:
            b, _ = self._lru.popitem(last=False)
            del self.by_hash[self.hash_of[b]]
            self.hash_of[b] = None
            self.evictions += 1
        else:
            raise IndexError("every KV block is in use")
        self.ref[b] = 1
        return b

    def take(self, b: int) -> None:
        """One more reference to block b (a cache hit, or a sibling sharing it)."""
        if self.ref[b] == 0:
            self._lru.pop(b, None)
        self.ref[b] += 1

    def release(self, b: int) -> None:
        """Drop one reference; an unreferenced block stays findable if it is cached."""
        if self.ref[b] <= 0:
            raise ValueError(f"block {b} released more often than taken")
        self.ref[b] -= 1
        if self.ref[b] == 0:
            if self.hash_of[b] is not None:
                self._lru[b] = None                     # most recently used at the end
            else:
                self._free.append(b)

    # ---- the prefix cache ----

    def hashes(self, tokens, parent: bytes = ROOT, first: int = 0) -> list[bytes]:
        return chain_hashes(tokens, self.block_size, self.salt, parent, first)

    def lookup(self, hashes: list[bytes]) -> list[int]:
        """The cached blocks of the longest prefix of `hashes` (no references taken)."""
        out = []
        for h in hashes:
            b = self.by_hash.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def register(self, b: int, h: bytes) -> bool:
        """Make full block b findable under hash h. False when another block already holds the
        same contents (b then stays private and is freed when released)."""
        if self.hash_of[b] is not None:
            return self.hash_of[b] == h
        if h in self.by_hash:
            return False
        self.by_hash[h] = b
        self.hash_of[b] = h
        return True

    def check(self) -> None:
        """Internal consistency (tests): every block in exactly one state, hashes both ways."""
        free, lru = set(self._free), set(self._lru)
        assert len(free) == len(self._free) and not free & lru
        for b in range(self.n_blocks):
            assert self.ref[b] >= 0
            assert (b in free) + (b in lru) + (self.ref[b] > 0) == 1, b
            assert (b in lru) <= (self.hash_of[b] is not None)
            assert (b in free) <= (self.hash_of[b] is None)
        assert all(self.hash_of[b] == h for h, b in self.by_hash.items())
        assert sum(h is not None for h in self.hash_of) == len(self.by_hash)
