"""Choosing and building an engine by name (`--engine`)."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ReameError
from .kv_cache import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_CTX, KV_TYPES as CACHE_TYPES, bytes_per_token

ENGINES = ("jit", "reference")
DEFAULT_ENGINE = "jit"
# Activations of products with quantised weights (`--act-type`): "q8" rounds them to 8 bits per
# 32 values and multiplies with integer dot products, as llama.cpp does (the JIT's default:
# fastest); "f32" keeps them in float32 and dequantises the weights in registers, which matches
# the f32 reference engine (its default) at the cost of speed. See docs/engine.md.
ACT_TYPES = ("q8", "f32")
DEFAULT_ACT_TYPE = {"jit": "q8", "reference": "f32"}
# Attention precision of prompt-chunk programs (`--attn-type`): "bf16" runs the JIT's prompt
# chunks on attn_prefill's AMX-BF16 family (q, k, v and the softmax weights rounded to bf16, sums
# in f32: docs/kernels-attention.md), where the CPU has AMX-BF16 (without it the engine logs a
# warning and keeps f32); "f32" everywhere; "auto" (the default) is bf16 where the CPU has
# AMX-BF16 and activations are q8, else f32, without a warning (`--act-type f32`, chosen to
# match the f32 reference, keeps f32 attention too; the reference engine: always f32). Decode
# steps and windowed / soft-capped layers stay f32. Decided in reame/jit/select.py
# (attn_precision, attn_prefill_spec).
ATTN_TYPES = ("auto", "f32", "bf16", "invariant")
DEFAULT_ATTN_TYPE = "auto"
# KV cache type (`--kv-type`): f32, f16, bf16 (every row's attention in bf16 on the kernels that
# read the cache in place, in the layout select.bf16_cache_layout picks for the CPU: the AMX
# tile layout "bf16" on attn_prefill's amx family, or the pair layout "bf16p" on attn_decode's
# bf16dp family with AVX512_BF16 and no AMX; reame/jit/select.py bf16_cache_refusal), or
# "auto", the command line's and server's default: bf16 where the JIT engine can keep it
# (AMX-BF16 or AVX512_BF16, a model the kernels serve) and activations are q8 with
# bf16-capable attention (not --act-type f32 or --attn-type f32 / invariant, which ask for f32
# numerics); else, with those numerics, f16 on x86 CPUs with AVX2 (F16C converts the halves as
# attention reads them: decode steps 1.08-1.35x an f32 cache's, prompts within 1-4%, half the
# memory; a 2-vCPU Xeon with AVX-512 VNNI and no BF16, 2026-12-06, docs/benchmarks.md), else
# f32 (the generic x86 level, whose f16 decode is slower than f32, docs/kernels-attention.md;
# ARM64: not measured). ("bf16p" is how bf16 is kept, not an option of its own.)
KV_TYPES = ("auto", *(t for t in CACHE_TYPES if t != "bf16p"))
DEFAULT_KV_TYPE = "auto"


def kv_type_for(model_config, kv_type: str = DEFAULT_KV_TYPE, engine: str = DEFAULT_ENGINE,
                act_type: str | None = None, attn_type: str | None = None,
                block_size: int = DEFAULT_BLOCK_SIZE, isa=None) -> str:
    """The KV cache type an engine gets: `kv_type` itself, "auto" resolved (KV_TYPES) for
    `isa` (default: this machine's, codegen.isa.detect); bf16 asked for where it cannot be kept
    is a ReameError naming why (before any worker starts or weight is read)."""
    if kv_type not in KV_TYPES and kv_type != "bf16p":
        raise ReameError(f"unknown KV cache type {kv_type!r} (choose from: {', '.join(KV_TYPES)})")
    if kv_type in ("f32", "f16"):
        return kv_type
    if engine != "jit":
        if kv_type in ("bf16", "bf16p"):
            raise ReameError(f"--kv-type bf16 needs the jit engine (the {engine} engine's "
                             "attention is f32): use f16")
        return "f32"
    from .codegen.isa import detect
    from .jit.select import bf16_cache_layout, bf16_cache_refusal
    isa = isa or detect()
    layout = "bf16p" if kv_type == "bf16p" else bf16_cache_layout(isa)
    why = bf16_cache_refusal(isa, model_config, block_size, attn_type, layout)
    if kv_type != "auto" and why:
        raise ReameError(why)
    if kv_type == "auto":
        if (act_type or DEFAULT_ACT_TYPE[engine]) != "q8" or attn_type in ("f32", "invariant"):
            return "f32"                    # f32 numerics asked for
        if why:                             # no bf16 attention here: halves where F16C reads them
            return "f16" if isa.has("avx2") else "f32"
    return layout


def context_size(model, n_ctx: int | None = None) -> int:
    """The context per sequence an engine gets: n_ctx, else min(trained context, 4096)."""
    return n_ctx or min(model.config.n_ctx_train, DEFAULT_MAX_CTX)


def create_engine(model, name: str = DEFAULT_ENGINE, *, n_ctx: int | None = None,
                  max_seqs: int = 4, kv_type: str = "f32", threads: int | None = None,
                  act_type: str | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                  kv_blocks: int | None = None, cpus: list[int] | None = None,
                  attn_type: str | None = None, shared_pools: bool = False):
    """An engine over a loaded model (`cpus`: the JIT's compute thread i pinned to cpus[i]). n_ctx (context per sequence) defaults to min(trained
    context, 4096); kv_type one of KV_TYPES ("auto" resolved by kv_type_for); act_type (one of ACT_TYPES) to the engine's DEFAULT_ACT_TYPE; attn_type (one
    of ATTN_TYPES; bf16 the JIT's only) to DEFAULT_ATTN_TYPE; the KV pool to kv_blocks blocks of
    block_size positions (default: n_ctx for each of max_seqs slots); shared_pools: the JIT runs on
    the process's compute threads (several models in one server, reame.turns)."""
    if name not in ENGINES:
        raise ReameError(f"unknown engine {name!r} (choose from: {', '.join(ENGINES)})")
    act_type = act_type or DEFAULT_ACT_TYPE[name]
    if act_type not in ACT_TYPES:
        raise ReameError(f"unknown activation type {act_type!r} (choose from: {', '.join(ACT_TYPES)})")
    attn_type = attn_type or DEFAULT_ATTN_TYPE
    if attn_type not in ATTN_TYPES:
        raise ReameError(f"unknown attention type {attn_type!r} "
                         f"(choose from: {', '.join(ATTN_TYPES)})")
    if attn_type == "bf16" and name != "jit":
        raise ReameError(f"--attn-type {attn_type} needs the jit engine (the {name} engine's "
                         "attention is f32)")
    n_ctx = context_size(model, n_ctx)
    c = model.config
    kv_type = kv_type_for(c, kv_type, name, act_type, attn_type, block_size)
    per_block = block_size * bytes_per_token(c.n_layer, c.n_head_kv, c.head_dim, c.head_dim_v,
                                             kv_type)
    check_fits(model, (kv_blocks or max_seqs * -(-n_ctx // block_size)) * per_block)
    if name == "reference":
        from .jit.engine import Q8K_MIN_TOKENS
        from .reference import ReferenceEngine
        # q8: the numpy oracle of the JIT's integer path (Q8A, and Q8K where the JIT uses it)
        return ReferenceEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type,
                               act_quant=act_type == "q8", q8k_min_tokens=Q8K_MIN_TOKENS,
                               block_size=block_size, kv_blocks=kv_blocks)
    from .jit.engine import JITEngine
    return JITEngine(model, n_ctx=n_ctx, max_seqs=max_seqs, kv_dtype=kv_type, threads=threads,
                     int_dot=act_type == "q8", block_size=block_size, kv_blocks=kv_blocks,
                     cpus=cpus, attn_type=attn_type, shared_pools=shared_pools)


KV_MEMORY_SHARE = 0.25      # of the available memory, at most, for the default KV pool


def available_memory(cgroup: str = "/sys/fs/cgroup") -> int:
    """Bytes this process can use without swapping: the system's MemAvailable (free memory and
    reclaimable caches, the model file's cached pages among them), or the physical memory,
    lowered to what the container's cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves."""
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    for d, limit, usage, cache in ((cgroup, "memory.max", "memory.current", "file"),
                                   (f"{cgroup}/memory", "memory.limit_in_bytes",
                                    "memory.usage_in_bytes", "cache")):
        try:
            text = Path(d, limit).read_text().strip()
            if text == "max" or int(text) >= 2**60:
                continue
            used = int(Path(d, usage).read_text())
            for line in Path(d, "memory.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == cache:                   # page cache: reclaimable within the limit
                    used -= int(value)
            avail = min(avail, max(0, int(text) - used))
            break
        except (OSError, ValueError):
            continue
    return avail


def check_fits(model, kv_bytes: int) -> None:
    """Refuse, before anything is allocated or compiled, a model whose weights and KV cache do
    not fit in the memory available (one line naming what it needs)."""
    weights = sum(t.data.nbytes for t in model.tensors.values())
    need, avail = weights + kv_bytes, available_memory()
    if need > avail:
        gib = 2**30
        raise ReameError(
            f"{os.path.basename(model.path)} needs {need / gib:.1f} GiB of memory (weights "
            f"{weights / gib:.1f} GiB + KV cache {kv_bytes / gib:.1f} GiB) but "
            f"{avail / gib:.1f} GiB is available: use a smaller quantisation, or a smaller "
            f"--ctx-size / --kv-cache-mb")


def kv_budget(config, n_ctx: int, max_seqs: int, kv_type: str = "f32",
              block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_mb: int | None = None,
              workers: int = 1) -> tuple[int, int]:
    """(blocks in the KV pool, context per sequence) for a server.

    The pool is `kv_cache_mb` MiB when given; by default enough for every one of `max_seqs`
    sequences to hold `n_ctx` tokens (what the batch can use at once; the prefix cache lives in
    whatever running sequences leave free), but at most KV_MEMORY_SHARE of the available memory
    split between the workers. The context is capped to what the pool holds, so one sequence can
    always run to its end (with every other one preempted).
    """
    per_block = block_size * bytes_per_token(config.n_layer, config.n_head_kv, config.head_dim,
                                             config.head_dim_v, kv_type)
    if kv_cache_mb is not None:
        blocks = kv_cache_mb * 2**20 // per_block
    else:
        blocks = max_seqs * -(-n_ctx // block_size)
        blocks = min(blocks, int(available_memory() * KV_MEMORY_SHARE) // max(1, workers)
                     // per_block)
    if blocks < 2:
        raise ReameError(f"a KV cache of {kv_cache_mb or 'the available'} MiB holds fewer than "
                         f"2 blocks of {block_size} tokens ({per_block / 2**20:.2f} MiB each)")
    return blocks, min(n_ctx, blocks * block_size)
