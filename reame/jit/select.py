"""Which kernel variant an op site starts with (before the adaptive runtime measures others).

Policy: the most specific family this ISA level can run (the variant with the highest minimum
level, skipping variants declared for bigger programs (`Variant.min_tokens`) or smaller ones
(`Variant.max_tokens`) and preferring the former at one level where they qualify), the family the op
file prefers for that many tokens where it declares a policy (`Op.prefers`: the row panels of
matmul_q8a in every program, matmul_q8k's for batches with long rows and prompt chunks, the
GEMM for float prompt chunks), and within it the tile that fits the program's token count (see
`choose`); ops `matmul_q8k_rp` (Q4_K/Q5_K weights, Q6_K's below avx512_vnni, IQ4_XS's at
avx2 / avx_vnni) and
`matmul_q8a_rp` (Q8_0/Q4_0/Q4_1/IQ4_NL below avx512_vnni), on weights repacked into the row-panel
layout by the engine, are panels at every step size, nt = 1 for decode. Quantised
weights go through the integer path (activations quantised to Q8A, `matmul_q8a`) when the level
has a kernel for that type; float weights through `matmul`, with the GEMM family for prompt
chunks. The adaptive runtime replaces these starting points by measured winners.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..codegen import registry
from ..codegen.isa import ISA
from ..codegen.panel_layout import PANEL_ROWS
from ..codegen.spec import KernelSpec
from ..codegen.ops.matmul_q8k import prompt_q8k
from ..tensor_types import PROMPT_STEP, TENSOR_TYPES

log = logging.getLogger("reame.jit")

# K-quant weights read Q8K activations (one scale per 256 values, op matmul_q8k) in programs for
# at least this many tokens, Q8A (matmul_q8a) below: see docs/engine.md for the measurements
Q8K_MIN_TOKENS = 1


@dataclass(frozen=True)
class Site:
    """How one matrix product runs: its kernel, the activations it reads and its weights' layout."""
    spec: KernelSpec
    act: str | None             # None: f32 rows; "q8a" / "q8k": the 8-bit copy quantize_q8a /
    #                             quantize_q8k makes of them
    layout: str                 # "gguf": the file's bytes; "row_panel": repacked at load

    @property
    def op(self) -> str:
        return self.spec.op


def matmul_site(dtype: str, rows: int, K: int, n_tokens: int, isa: ISA, acc: int = 0, *,
                int_dot: bool = True, q8k_min_tokens: int | None = Q8K_MIN_TOKENS,
                q8a_ok: bool = True, q8k_ok: bool = True, row_panel: bool = True,
                tile_tokens: int | None = None) -> Site:
    """The one decision of how a matmul site with weights of `dtype` (rows x K) runs in a program
    for steps of up to n_tokens tokens:
    - quantised weights with integer-dot kernels at this level read 8-bit activations (unless
      int_dot=False, `--act-type f32`): Q8K for the type table's q8k types (K a multiple of
      256) in programs of >= q8k_min_tokens tokens (prompt-chunk programs only where
      prompt_q8k says so), through matmul_q8k_rp on a copy repacked into the row-panel layout
      for the row_panel types (at their row_panel_levels) with whole 16-row panels where the
      level has the panel kernels, else matmul_q8k on the file's bytes; Q8A (K a multiple of
      32) through matmul_q8a otherwise (through matmul_q8a_rp on a repacked copy for the
      row_panel types at their row_panel_levels, with whole 16-row panels);
    - everything else reads f32 rows through matmul (weights dequantised in registers).
    q8a_ok / q8k_ok: the caller has a buffer for that activation copy; row_panel: the caller
    repacks (experts do not); tile_tokens: tokens per product, when not n_tokens (an expert's
    share of a step), for the tile choice."""
    t = TENSOR_TYPES[dtype]
    tt = tile_tokens or n_tokens
    dims = dict(M=rows, K=K, acc=acc)
    if int_dot and t.quantized:
        if (q8k_ok and t.act_format == "q8k" and K % 256 == 0 and q8k_min_tokens is not None
                and n_tokens >= q8k_min_tokens
                and (n_tokens < PROMPT_STEP or prompt_q8k(dtype, isa))
                and has_kernel("matmul_q8k", dtype, isa)):
            if (row_panel and t.row_panel_at(isa.level) and rows % PANEL_ROWS == 0
                    and has_kernel("matmul_q8k_rp", dtype, isa, family="panel")):
                return Site(choose("matmul_q8k_rp", dtype, isa, tt, **dims), "q8k", "row_panel")
            return Site(choose("matmul_q8k", dtype, isa, tt, **dims), "q8k", "gguf")
        if q8a_ok and K % 32 == 0 and has_kernel("matmul_q8a", dtype, isa):
            if (row_panel and t.row_panel_at(isa.level) and rows % PANEL_ROWS == 0
                    and has_kernel("matmul_q8a_rp", dtype, isa, family="panel")):
                return Site(choose("matmul_q8a_rp", dtype, isa, tt, **dims), "q8a", "row_panel")
            return Site(choose("matmul_q8a", dtype, isa, tt, **dims), "q8a", "gguf")
    return Site(choose("matmul", dtype, isa, tt, **dims), None, "gguf")

# tile keys that count tokens per pass: nt (every matmul family's tokens per weight pass), nr
# (the GEMM micro-kernel's tokens, BLAS's name), rb (attention's query rows per block)
TOKEN_TILE_KEYS = ("nt", "nr", "rb")


def _rank(isa: ISA, level: str) -> int:
    return isa.levels.index(level) if level in isa.levels else -1


def tokens_per_pass(tile: dict) -> int:
    for k in TOKEN_TILE_KEYS:
        if k in tile:
            return int(tile[k])
    return 1


def choose(op_name: str, dtype: str, isa: ISA, n_tokens: int, **dims) -> KernelSpec:
    """The starting spec of an op site in a program for steps of up to `n_tokens` tokens: the
    most specific family, then the tile that needs the fewest passes over the weights for
    n_tokens (fewer weight rows per iteration and smaller tiles breaking ties: one row stream
    per thread reaches the bandwidth ceiling in decode; then the order the variant lists its
    tiles in)."""
    op = registry.get_op(op_name)
    best = None
    for v in op.variants:
        if dtype not in v.dtypes or not v.usable(isa):
            continue
        if not v.min_tokens <= n_tokens <= v.max_tokens:   # e.g. AMX tiles: prompt chunks only
            continue
        # the highest level; at one level a variant declared for bigger programs (min_tokens)
        # is the more specific one where it qualifies
        key = (_rank(isa, v.min_level), v.min_tokens)
        if best is None or key > best[0]:
            best = (key, [v])
        elif key == best[0]:
            best[1].append(v)
    if best is None:
        raise ValueError(f"no {op_name} kernel for {dtype} at level {isa.level}")
    cands = [(v, t) for v in best[1] for t in op.tiles(v, dims)]
    if not cands:
        raise ValueError(f"no {op_name} tile at level {isa.level} fits {dims}")
    if op.prefers is not None:          # the op file's measured family policy
        cands = [(v, t) for v, t in cands if op.prefers(v.family, n_tokens, dims)] or cands

    if "K" in dims and "nt" in cands[0][1] and cands[0][0].family != "panel":
        # 1-row integer-dot tiles read nt activation rows per weight row: keep them in L1
        # (measured: batch-8 decode of the 0.5B model, ffn_down K=4864 at nt=4 instead of 8: +9%).
        # Row panels read a repacked copy and were measured faster at nt=8 for every K.
        fits = [(v, t) for v, t in cands if tokens_per_pass(t) * dims["K"] <= ACT_L1_BYTES]
        cands = fits or cands

    def cost(vt):
        tile = vt[1]
        tpp = tokens_per_pass(tile)
        # fewest weight passes, fewest rows, fewest tokens per pass, then the tile that
        # prefetches nearest (pf_loc = locality hint of the panels' next-panel prefetch)
        return (-(-n_tokens // tpp), tile.get("rows", 1), tpp,
                -tile.get("pf_loc", 0) if vt[0].family == "panel" else 0, vt[0].tiles.index(tile),
                sorted(tile.items()))
    v, tile = min(cands, key=cost)
    return KernelSpec.make(op_name, dtype, v.family, isa.level, **tile, **dims)


ACT_L1_BYTES = 24 << 10       # int8 activation bytes a token tile may keep in L1 (half of 48 KiB)


def bf16_attention(isa: ISA, **dims) -> bool:
    """Whether attn_prefill has a usable BF16 (AMX) variant at this level, and, given dims, a
    tile of it that serves them (it refuses sliding windows and soft-capping)."""
    op = registry.get_op("attn_prefill")
    return any("BF16" in v.dtypes and v.usable(isa) and (not dims or op.tiles(v, dims))
               for v in op.variants)


def bf16_cache_layout(isa: ISA) -> str | None:
    """The bf16 KV cache layout this level's attention reads, the one decision of it: "bf16"
    (the AMX tile layout) where attn_prefill's amx family is usable, else "bf16p" (the pair
    layout) where attn_decode's bf16dp family is (AVX512_BF16), else None."""
    if bf16_attention(isa):
        return "bf16"
    return "bf16p" if bf16dp_attention(isa) else None


def bf16dp_attention(isa: ISA) -> bool:
    """Whether attn_decode has a usable BF16 variant (bf16dp: AVX512_BF16) at this level."""
    return any("BF16" in v.dtypes and v.usable(isa) for v in registry.get_op("attn_decode").variants)


def bf16_cache_refusal(isa: ISA, config, block_size: int,
                       attn_type: str | None = None, layout: str | None = None) -> str | None:
    """Why this CPU and model cannot keep a bf16 KV cache (`--kv-type bf16`) in `layout`
    (default: bf16_cache_layout), or None. Every row of every step attends in bf16 on the
    kernel family that reads the layout in place: the AMX tile layout ("bf16") on
    attn_prefill's amx family (no sliding window or soft-capping, head dims multiples of 32
    (keys) and 16 (values), key tiles that divide the block size); the pair layout ("bf16p") on
    attn_decode's bf16dp family (AVX512_BF16; no window or cap, an even key head size, value
    head size a multiple of 16, blocks of a multiple of 16). No attention type asking for f32
    numerics."""
    if attn_type in ("f32", "invariant"):
        return f"--kv-type bf16 attends in bf16; --attn-type {attn_type} asks for f32"
    layout = layout or bf16_cache_layout(isa)
    if not (layout == "bf16" and bf16_attention(isa) or layout == "bf16p" and bf16dp_attention(isa)):
        return (f"--kv-type bf16 needs AMX-BF16 tiles (ISA level amx and the OS's permission to "
                f"use them) or AVX512_BF16 dot products (level avx512_bf16); this CPU runs at "
                f"level {isa.level}: use --kv-type f16 for a 16-bit cache")
    c = config
    dims = dict(H=c.n_head, Hkv=c.n_head_kv, D=c.head_dim, Dv=c.head_dim_v, C=block_size,
                BS=block_size, kv=layout, scale=float(c.kq_scale))
    if c.attn_softcap or c.swa:
        return ("--kv-type bf16: the bf16 attention has no sliding window or soft-capping, which "
                "this model uses: use --kv-type f16")
    if layout == "bf16p":
        if not registry.get_op("attn_decode").specs("BF16", isa, **dims):
            return (f"--kv-type bf16: no bf16 attention tile serves head dims {c.head_dim}/"
                    f"{c.head_dim_v} (an even key size and a value size a multiple of 16 "
                    f"needed) and KV blocks of {block_size}: use --kv-type f16")
        return None
    if not bf16_attention(isa, **dims):
        return (f"--kv-type bf16: no amx attention tile serves head dims {c.head_dim}/"
                f"{c.head_dim_v} (multiples of 32 and 16 needed), {c.n_head}/{c.n_head_kv} heads "
                f"and KV blocks of {block_size}: use --kv-type f16")
    return None


def attn_precision(attn_type: str, isa: ISA, int_dot: bool) -> str:
    """The engine's attention precision, "f32" or "bf16", from the option attn_type: "auto" is
    bf16 where this level has the AMX-BF16 family and activations are q8 (int_dot; f32
    activations ask for the reference's numerics: f32 attention too), else f32; "bf16" without
    AMX-BF16 logs a warning and stays f32; "invariant" (f32 on the decode kernel in every
    program: the engine's program builder) stays itself."""
    if attn_type not in ("auto", "f32", "bf16", "invariant"):
        raise ValueError(f"attn_type {attn_type!r}: must be auto, f32, bf16 or invariant")
    if attn_type == "invariant":
        return attn_type
    if attn_type == "auto":
        return "bf16" if int_dot and bf16_attention(isa) else "f32"
    if attn_type == "bf16" and not bf16_attention(isa):
        log.warning("--attn-type bf16 needs AMX-BF16 tiles (ISA level amx and the OS's "
                    "permission to use them); this CPU runs at level %s: attention stays f32",
                    isa.level)
        return "f32"
    return attn_type


def attn_prefill_spec(attn_type: str, isa: ISA, n_tokens: int, **dims) -> KernelSpec:
    """The one decision of the attention precision (engine option attn_type, `--attn-type`):
    a prompt-chunk program (>= PROMPT_STEP tokens) with attn_type "bf16" runs attn_prefill's
    AMX-BF16 family (dtype BF16) where it is usable and serves dims; everything else f32."""
    if attn_type == "bf16" and n_tokens >= PROMPT_STEP and bf16_attention(isa, **dims):
        return choose("attn_prefill", "BF16", isa, n_tokens, **dims)
    return choose("attn_prefill", "F32", isa, n_tokens, **dims)


def has_kernel(op_name: str, dtype: str, isa: ISA, family: str | None = None) -> bool:
    """Whether op `op_name` has a variant (of `family`, if given) for weights of `dtype` at this
    level."""
    return any(dtype in v.dtypes and v.usable(isa) and family in (None, v.family)
               for v in registry.get_op(op_name).variants)

