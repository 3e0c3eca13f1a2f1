"""The KV cache: a pool of fixed-size blocks of keys and values, and a block table per sequence.

Memory per layer: k[block, kv_head, row, head_dim] (v likewise) for `n_blocks` blocks of
`block_size` positions, so the keys one head attends over inside a block are contiguous rows.
Type bf16 is the AMX tile layout (codegen/ops/kv_layout.py): bfloat16 bits, values transposed
within a block, v[block, kv_head, head_dim_v, row], read in place by attn_prefill's amx family.
Type bf16p is the pair layout of CPUs with AVX512_BF16 but no AMX: bfloat16 bits, keys as pairs of
their transpose k[block, kv_head, head_dim / 2, row, 2], values as pairs of consecutive rows
v[block, kv_head, row / 2, head_dim_v, 2], read by attn_decode's bf16dp family.
A running sequence occupies a *slot*: a row of `tables` (int32 [max_seqs, max_blocks]) listing
its blocks in order, position t being row t % block_size of block tables[slot, t // block_size].
The attention and store_kv kernels read K/V through that table (codegen/ops/kv_layout.py).

Who fills the tables: the scheduler's block pool (reame/kv_blocks.py) hands out blocks as
sequences grow, shares full blocks between sequences (prefix cache) and frees them. Without it
(`reame generate`, tests, benchmarks) the cache starts in the *whole-context* layout: when the
pool has max_seqs * max_blocks blocks, slot s owns blocks s * max_blocks ... (s + 1) * max_blocks - 1.
"""

from __future__ import annotations

import numpy as np

from .codegen.ops.kv_layout import KV_DTYPES, row_layout, write_rows

DEFAULT_MAX_CTX = 4096     # context per sequence when the user does not ask for another
DEFAULT_BLOCK_SIZE = 64    # positions per block (docs/server.md: 16 / 32 / 64 measured)
KV_TYPES = KV_DTYPES        # f32, f16, bf16 (bits in uint16, the AMX tile layout), bf16p (pairs)


def bytes_per_token(n_layer: int, n_head_kv: int, head_dim: int, head_dim_v: int,
                    dtype: str = "f32") -> int:
    """KV memory one position of one sequence takes over all layers."""
    return n_layer * n_head_kv * (head_dim + head_dim_v) * np.dtype(KV_TYPES[dtype]).itemsize


class PagedKVCache:
    def __init__(self, n_layer: int, max_seqs: int, n_head_kv: int, n_ctx: int, head_dim: int,
                 head_dim_v: int | None = None, dtype: str = "f32",
                 block_size: int = DEFAULT_BLOCK_SIZE, n_blocks: int | None = None):
        if dtype not in KV_TYPES:
            raise ValueError(f"KV cache type must be one of {', '.join(KV_TYPES)}, not {dtype!r}")
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"the KV block size must be a power of two, not {block_size}")
        self.dtype = KV_TYPES[dtype]
        self.kv_type = dtype
        self.n_layer, self.max_seqs, self.block_size = n_layer, max_seqs, block_size
        self.n_ctx = n_ctx                                   # positions one sequence may use
        self.max_blocks = -(-n_ctx // block_size)           # blocks one sequence can hold
        self.table_ctx = self.max_blocks * block_size        # the kernels' C: n_ctx rounded up
        whole = max_seqs * self.max_blocks
        self.n_blocks = whole if n_blocks is None else int(n_blocks)
        if self.n_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        hv = head_dim_v or head_dim
        self.block_bytes = block_size * bytes_per_token(n_layer, n_head_kv, head_dim, hv, dtype)
        # np.zeros maps zero pages lazily: memory is touched only as blocks are written
        kshape = (block_size, head_dim)
        vshape = (hv, block_size) if dtype == "bf16" else (block_size, hv)
        if dtype == "bf16p":
            if head_dim % 2 or block_size < 2:
                raise ValueError("the bf16p KV layout needs an even head size and block size")
            kshape, vshape = (head_dim // 2, block_size, 2), (block_size // 2, hv, 2)
        self.k = [np.zeros((self.n_blocks, n_head_kv) + kshape, self.dtype)
                  for _ in range(n_layer)]
        self.v = [np.zeros((self.n_blocks, n_head_kv) + vshape, self.dtype)
                  for _ in range(n_layer)]
        self.tables = np.zeros((max_seqs, self.max_blocks), np.int32)   # every entry a valid block
        self.whole_context = self.n_blocks >= whole
        if self.whole_context:
            self.tables[:] = np.arange(whole, dtype=np.int32).reshape(max_seqs, self.max_blocks)
        self.free_slots = list(range(max_seqs))[::-1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    # ---- slots: the rows of the block table ----

    def alloc(self) -> int:
        """A free slot; raises RuntimeError when all are in use."""
        if not self.free_slots:
            raise RuntimeError("no free KV-cache slot")
        return self.free_slots.pop()

    def free(self, slot: int) -> None:
        if slot not in self.free_slots:
            self.free_slots.append(slot)

    def set_blocks(self, slot: int, first: int, blocks) -> None:
        """Table entries first, first + 1, ... of `slot` := blocks (validated: a kernel follows
        them without checks)."""
        blocks = np.asarray(blocks, np.int64)
        if len(blocks) and (blocks.min() < 0 or blocks.max() >= self.n_blocks):
            raise ValueError(f"block id out of the pool of {self.n_blocks}")
        if first < 0 or first + len(blocks) > self.max_blocks:
            raise ValueError(f"block table entries {first}..{first + len(blocks) - 1} of "
                             f"{self.max_blocks}")
        self.tables[slot, first:first + len(blocks)] = blocks

    def copy_block(self, src: int, dst: int) -> None:
        """Copy block src's keys and values (all layers) into block dst (copy-on-write)."""
        for layer in range(self.n_layer):
            self.k[layer][dst] = self.k[layer][src]
            self.v[layer][dst] = self.v[layer][src]

    # ---- the numpy reference engine's access ----

    def check(self, positions: np.ndarray, seq_ids: np.ndarray) -> None:
        if len(positions) and (positions.min() < 0 or positions.max() >= self.n_ctx):
            raise ValueError(f"position out of the KV cache (n_ctx={self.n_ctx})")
        if len(seq_ids) and (seq_ids.min() < 0 or seq_ids.max() >= self.max_seqs):
            raise ValueError(f"sequence slot out of range (max_seqs={self.max_seqs})")

    def store(self, layer: int, seq: np.ndarray, pos: np.ndarray, k: np.ndarray, v: np.ndarray):
        """k [n, n_head_kv, head_dim] and v for n tokens at (seq[i], pos[i])."""
        blk, row = self.tables[seq, pos // self.block_size], pos % self.block_size
        write_rows(self.k[layer], self.v[layer], blk, row, k, v, self.kv_type)

    def prefix(self, layer: int, seq: int, length: int):
        """float32 keys and values [n_head_kv, length, d] of positions 0..length-1 of one sequence."""
        blocks = self.tables[seq, :-(-length // self.block_size)]
        parts = row_layout(self.k[layer][blocks], self.v[layer][blocks], self.kv_type)
        return tuple(x.transpose(1, 0, 2, 3).reshape(x.shape[1], -1, x.shape[3])[:, :length]
                     for x in parts)
