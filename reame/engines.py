"""Choosing and building an engine by name (`--engine`)."""

from __future__ import annotations

from .errors import ReameError
from .kv_cache import DEFAULT_MAX_CTX

ENGINES = ("jit", "reference")
DEFAULT_ENGINE = "jit"
# Activations of products with quantised weights (`--act-type`): "q8" rounds them to 8 bits per
# 32 values and multiplies with integer dot products, as llama.cpp does (the JIT's default:
# fastest); "f32" keeps them in float32 and dequantises the weights in registers, which matches
# the f32 reference engine (its default) at the cost of speed. See docs/engine.md.
ACT_TYPES = ("q8", "f32")
DEFAULT_ACT_TYPE = {"jit": "q8", "reference": "f32"}


def create_engine(model, name: str = DEFAULT_ENGINE, *, n_ctx: int | None = None,
                  max_seqs: int = 4, kv_type: str = "f32", threads: int | None = None,
                  act_type: str | None = None):
    """An engine over a loaded model. n_ctx defaults to min(trained context, 4096); act_type
    (one of ACT_TYPES) to the engine's DEFAULT_ACT_TYPE."""
    if name not in ENGINES:
        raise ReameError(f"unknown engine {name!r} (choose from: {', '.join(ENGINES)})")
    act_type = act_type or DEFAULT_ACT_TYPE[name]
    if act_type not in ACT_TYPES:
        raise ReameError(f"unknown activation type {act_type!r} (choose from: {', '.join(ACT_TYPES)})")
    n_ctx = n_ctx or min(model.config.n_ctx_train, DEFAULT_MAX_CTX)
    if name == "reference":
        from .jit.engine import Q8K_MIN_TOKENS
        from .reference import ReferenceEngine
        # q8: the numpy oracle of the JIT's integer path (Q8A, and Q8K where the JIT uses it)
        return ReferenceEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type,
                               act_quant=act_type == "q8", q8k_min_tokens=Q8K_MIN_TOKENS)
    from .jit.engine import JITEngine
    return JITEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type, threads=threads,
                     int_dot=act_type == "q8")
