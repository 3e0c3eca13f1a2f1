"""Choosing and building an engine by name (`--engine`)."""

from __future__ import annotations

from .errors import ReameError
from .kv_cache import DEFAULT_MAX_CTX

ENGINES = ("jit", "reference")
DEFAULT_ENGINE = "jit"


def create_engine(model, name: str = DEFAULT_ENGINE, *, n_ctx: int | None = None,
                  max_seqs: int = 4, kv_type: str = "f32", threads: int | None = None):
    """An engine over a loaded model. n_ctx defaults to min(trained context, 4096)."""
    n_ctx = n_ctx or min(model.config.n_ctx_train, DEFAULT_MAX_CTX)
    if name == "reference":
        from .reference import ReferenceEngine
        return ReferenceEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type)
    if name == "jit":
        from .jit.engine import JITEngine
        return JITEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type, threads=threads)
    raise ReameError(f"unknown engine {name!r} (choose from: {', '.join(ENGINES)})")
