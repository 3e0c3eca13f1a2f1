"""What one forward step computes: a set of tokens, each in its own sequence at its own position.

The same structure describes a decode step (one token for each of several sequences), a prefill
chunk (consecutive positions of one sequence) and any mix of the two, so every engine has one
entry point: `forward(batch) -> logits for batch.logits_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    tokens: np.ndarray       # int32 [n]  token ids
    positions: np.ndarray    # int32 [n]  position of each token in its sequence
    seq_ids: np.ndarray      # int32 [n]  KV-cache slot of each token's sequence
    logits_rows: np.ndarray  # int32 [m]  which of the n tokens need logits (in this order)
    # the first n_decode tokens are generated ones (a decoding sequence's next token and its
    # drafts), the rest prompt tokens; None: not said (the engine then goes by the step's size)
    n_decode: int | None = None

    @classmethod
    def build(cls, tokens, positions, seq_ids, logits_rows=None,
              n_decode: int | None = None) -> "Batch":
        tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
        n = len(tokens)
        positions = np.asarray(positions, dtype=np.int32).reshape(-1)
        seq_ids = np.broadcast_to(np.asarray(seq_ids, dtype=np.int32), (n,)).copy()
        if logits_rows is None:
            logits_rows = np.arange(n, dtype=np.int32)
        logits_rows = np.asarray(logits_rows, dtype=np.int32).reshape(-1)
        if len(positions) != n:
            raise ValueError("tokens and positions differ in length")
        if n_decode is not None and not 0 <= n_decode <= n:
            raise ValueError(f"n_decode {n_decode} outside 0..{n}")
        return cls(tokens, positions, seq_ids, logits_rows, n_decode)

    @classmethod
    def prefill(cls, tokens, start: int, seq: int, all_logits: bool = False) -> "Batch":
        """A chunk of one sequence's prompt starting at position `start`; logits of its last token."""
        n = len(tokens)
        rows = np.arange(n) if all_logits else [n - 1]
        return cls.build(tokens, np.arange(start, start + n), seq, rows, n_decode=0)

    @classmethod
    def decode(cls, tokens, positions, seq_ids) -> "Batch":
        """One token per sequence, each at its own position; logits for all of them."""
        return cls.build(tokens, positions, seq_ids, n_decode=np.size(tokens))

    def __len__(self) -> int:
        return len(self.tokens)
