"""What templates need to know of a tensor type: the row of reame's type table, as a dict."""

from __future__ import annotations

from reame.tensor_types import IQ4_LEVELS, TENSOR_TYPES  # noqa: F401  (IQ4_LEVELS: for templates)


def type_info(dtype: str) -> dict:
    t = TENSOR_TYPES.get(dtype)
    if t is None:
        raise ValueError(f"unknown tensor type {dtype!r}")
    return {"name": t.name, "block": t.block_size, "bytes": t.type_size, "quantized": t.quantized}
