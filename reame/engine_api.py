"""`Engine`: what the scheduler, the adaptive runtime and the server may use of an engine.

Both engines (reame/reference.py, reame/jit/engine.py) run the model's graph (reame/graph.py)
over a paged KV cache and have every member below; test doubles do too (tests/test_engine_api.py
checks them all), so no caller asks `getattr(engine, ..., default)` or `hasattr`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .batch import Batch
from .config import ModelConfig
from .kernel_plan import KernelPlan
from .kv_cache import PagedKVCache


@runtime_checkable
class Engine(Protocol):
    name: str                          # "jit", "reference"
    model: object                      # reame.model.Model (its path, metadata, tensors)
    config: ModelConfig
    n_ctx: int                         # context per sequence
    kv: PagedKVCache                   # slots, blocks and the block tables the planner writes
    max_tokens: int | None             # tokens one step may hold (None: any)
    max_logits: int | None             # logits rows one step may return (None: any)
    attn_type: str                     # prompt rows' attention: "f32", "bf16", "invariant"
    kernel_plan: KernelPlan | None     # its tunable kernels (None: nothing to tune)

    def forward(self, batch: Batch) -> np.ndarray:
        """float32 logits [len(batch.logits_rows), n_vocab]; K/V of every token cached."""

    def final_hidden(self, lo: int, hi: int) -> np.ndarray:
        """The output-normed hidden states of tokens lo..hi-1 of the last forward's batch."""

    def close(self) -> None:
        """Release its threads (an engine on the shared pool leaves it running)."""
