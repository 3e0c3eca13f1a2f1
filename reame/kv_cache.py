"""The KV cache: keys and values of every layer for a fixed set of sequence slots.

Layout per layer: k[slot, kv_head, position, head_dim] (and v likewise), so the keys one head
attends over are contiguous in memory: the layout the attention kernels read.
"""

from __future__ import annotations

import numpy as np

DEFAULT_MAX_CTX = 4096     # context per sequence when the user does not ask for another


class KVCache:
    def __init__(self, n_layer: int, max_seqs: int, n_head_kv: int, n_ctx: int,
                 head_dim: int, head_dim_v: int | None = None, dtype: str = "f32"):
        if dtype not in ("f32", "f16"):
            raise ValueError(f"KV cache type must be f32 or f16, not {dtype!r}")
        self.dtype = np.float32 if dtype == "f32" else np.float16
        self.n_layer, self.max_seqs, self.n_ctx = n_layer, max_seqs, n_ctx
        hv = head_dim_v or head_dim
        # np.zeros maps zero pages lazily: memory is touched only as positions fill up
        self.k = [np.zeros((max_seqs, n_head_kv, n_ctx, head_dim), self.dtype) for _ in range(n_layer)]
        self.v = [np.zeros((max_seqs, n_head_kv, n_ctx, hv), self.dtype) for _ in range(n_layer)]
        self.free_slots = list(range(max_seqs))[::-1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    def alloc(self) -> int:
        """A free sequence slot; raises RuntimeError when all are in use."""
        if not self.free_slots:
            raise RuntimeError("no free KV-cache slot")
        return self.free_slots.pop()

    def free(self, slot: int) -> None:
        if slot not in self.free_slots:
            self.free_slots.append(slot)

    def check(self, positions: np.ndarray, seq_ids: np.ndarray) -> None:
        if len(positions) and (positions.min() < 0 or positions.max() >= self.n_ctx):
            raise ValueError(f"position out of the KV cache (n_ctx={self.n_ctx})")
        if len(seq_ids) and (seq_ids.min() < 0 or seq_ids.max() >= self.max_seqs):
            raise ValueError(f"sequence slot out of range (max_seqs={self.max_seqs})")

    def store(self, layer: int, seq: np.ndarray, pos: np.ndarray, k: np.ndarray, v: np.ndarray):
        """k [n, n_head_kv, head_dim] and v for n tokens at (seq[i], pos[i])."""
        self.k[layer][seq, :, pos] = k
        self.v[layer][seq, :, pos] = v

    def prefix(self, layer: int, seq: int, length: int):
        """float32 keys and values [n_head_kv, length, d] of positions 0..length-1 of one sequence."""
        return (self.k[layer][seq, :, :length].astype(np.float32, copy=False),
                self.v[layer][seq, :, :length].astype(np.float32, copy=False))

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Copy the first `length` positions of slot src into slot dst (prefix sharing)."""
        for layer in range(self.n_layer):
            self.k[layer][dst, :, :length] = self.k[layer][src, :, :length]
            self.v[layer][dst, :, :length] = self.v[layer][src, :, :length]
