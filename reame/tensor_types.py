"""The tensor-type table: one row per GGUF tensor type Reame runs.

Adding a type is adding one row here (and one kernel template in templates/). Sizes come from
gguf's own table so they can never drift from the file format; `gguf.quants.dequantize` is the
numerical reference for every kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as _quants


@dataclass(frozen=True)
class TensorType:
    name: str                        # GGUF spelling: "Q4_K"
    ggml: GGMLQuantizationType       # the enum value stored in the file
    block_size: int                  # elements per block
    type_size: int                   # bytes per block
    quantized: bool                  # True for block-quantised types
    # the activations its integer-dot kernels read (llama.cpp's vec_dot_type): "q8a" (8-bit, one
    # f32 scale per 32 values: matmul_q8a), "q8k" (one per 256: matmul_q8k), None (float rows)
    act_format: str | None = None
    int_dot: bool = False            # Q8A kernels exist (for "q8k" types: steps below the
    #                                  engine's q8k_min_tokens, rows not a multiple of 256)
    row_panel: bool = False          # repacked at load into the row-panel layout (matmul_q8k_rp,
    #                                  matmul_q8a_rp)
    q8k_prompt: bool = False         # Q8K kernels in prompt-chunk steps too (>= PROMPT_STEP
    #                                  tokens; without them those steps take the float path)...
    prompt_families: tuple[str, ...] = ()   # ...or only at levels where matmul_q8k has one of
    #                                  these families for the type (codegen/ops/matmul_q8k.prompt_q8k)
    row_panel_levels: tuple[str, ...] = ()  # row_panel only at these ISA levels (empty: all)

    def row_panel_at(self, level: str) -> bool:
        """Whether weights of this type are repacked into the row-panel layout at `level`."""
        return self.row_panel and (not self.row_panel_levels or level in self.row_panel_levels)

    def row_bytes(self, n: int) -> int:
        """Bytes of one row of `n` elements (n must be a multiple of block_size)."""
        return n // self.block_size * self.type_size

    def dequantize(self, data: np.ndarray) -> np.ndarray:
        """Reference dequantisation to float32 (gguf.quants), rows preserved."""
        return np.asarray(_quants.dequantize(data, self.ggml), dtype=np.float32)



def _row(name: str, act_format: str | None = None, int_dot: bool = False,
         row_panel: bool = False, q8k_prompt: bool = False,
         prompt_families: tuple[str, ...] = (), row_panel_levels: tuple[str, ...] = ()) -> TensorType:
    ggml = GGMLQuantizationType[name]
    block, size = GGML_QUANT_SIZES[ggml]
    return TensorType(name, ggml, block, size, name not in ("F32", "F16", "BF16"), act_format,
                      int_dot or act_format == "q8a", row_panel, q8k_prompt, prompt_families,
                      row_panel_levels)


# Steps of at least this many tokens run the JIT's prompt-chunk program (the one above its
# 16-token bucket, reame/jit/engine.py BUCKETS); the reference engine emulates the same rule.
PROMPT_STEP = 17


# the x86 levels whose row panels run on 256-bit registers (below avx512_vnni)
PANEL_256 = ("avx2", "avx_vnni", "avx512")
# the x86 levels where Q8_0 / Q4_0 / Q4_1 / IQ4_NL (matmul_q8a_rp) and Q2_K / Q3_K / IQ4_XS
# (matmul_q8k_rp) weights are repacked into records: every one but amx, whose prompt chunks run
# AMX tiles on the file's rows
RECORD_LEVELS = PANEL_256 + ("avx512_vnni", "avx512_bf16")

TENSOR_TYPES: dict[str, TensorType] = {t.name: t for t in (
    #    type      activations  traits
    _row("F32"),
    _row("F16"),
    _row("BF16"),
    # Q8_0 / Q4_0 / Q4_1 (and IQ4_NL below): row panels on records (matmul_q8a_rp) at every x86
    # level but amx: the panels on GGUF rows (matmul_q8a `panel`, 16-row transposes and a scale
    # gather per block) cost more than the 1-row tiles at one token on 256-bit registers, and
    # on zmm (AMD Zen 4, 2 threads from DRAM) 1.6-1.75x the records' time at one token and up
    # to 1.9x at 8 (docs/kernels-int8.md); on AMX CPUs the file's rows feed the AMX prompt tiles
    _row("Q8_0",   "q8a",       row_panel=True, row_panel_levels=RECORD_LEVELS),
    _row("Q4_0",   "q8a",       row_panel=True, row_panel_levels=RECORD_LEVELS),
    _row("Q4_1",   "q8a",       row_panel=True, row_panel_levels=RECORD_LEVELS),
    _row("Q5_0",   "q8a"),
    _row("Q5_1",   "q8a"),
    _row("Q4_K",   "q8k",       int_dot=True, row_panel=True, q8k_prompt=True),
    _row("Q5_K",   "q8k",       int_dot=True, row_panel=True, q8k_prompt=True),
    # Q6_K: row panels only below avx512_vnni, where matmul_q8k has no panel family on GGUF rows
    # (the records' ymm panels: prompt-sized 2048 x 5632 117 against 63-74 GOP/s for the 1-row
    # avx2 tiles; from avx512_vnni the zmm panels on GGUF rows are as fast as on records)
    _row("Q6_K",   "q8k",       int_dot=True, row_panel=True, q8k_prompt=True,
         row_panel_levels=PANEL_256),
    # Q8K kernels only (no Q8A kernels). Since 2026-12-06 repacked into row panels (records) at
    # every x86 level but amx, run in every program (prompt chunks too: select.prompt_q8k);
    # elsewhere prompt chunks on Q8K where the level has matmul_q8k's AMX tiles (3.5-4.5x the
    # float gemm, docs/kernels-kquants.md) or AArch64's smmla tiles, else the float path.
    # AMD Zen 4, 2 threads, weights hot, 2048 x 5632 at 64 tokens: IQ4_XS 679 GOP/s against 205
    # for the 1-row vnni tiles and 138-161 for the float gemm, Q3_K 540 against 235 and 155,
    # Q2_K 468 against 256 and 148; a TinyLlama-shaped Q3_K_M's one-token step 21.5-25.4 ->
    # 16.4-20.8 ms; forced avx2, IQ4_XS 896 x 4864: one token 92 -> 63 us, 64 tokens 130 ->
    # 160-200 GOP/s (docs/kernels-kquants.md)
    _row("Q2_K",   "q8k",       prompt_families=("amx", "i8mm"), row_panel=True,
         row_panel_levels=RECORD_LEVELS),
    _row("Q3_K",   "q8k",       prompt_families=("amx", "i8mm"), row_panel=True,
         row_panel_levels=RECORD_LEVELS),
    _row("IQ4_XS", "q8k",       prompt_families=("amx", "i8mm"), row_panel=True,
         row_panel_levels=RECORD_LEVELS),
    _row("IQ4_NL", "q8a",       row_panel=True, row_panel_levels=RECORD_LEVELS),
)}

# IQ4_NL / IQ4_XS: the 16 signed levels a 4-bit index selects (gguf's own table)
IQ4_LEVELS: tuple[int, ...] = tuple(int(v) for v in _quants.IQ4_NL.kvalues)

BY_GGML: dict[int, TensorType] = {int(t.ggml): t for t in TENSOR_TYPES.values()}


def tensor_type(name_or_id) -> TensorType | None:
    """Look a type up by GGUF name ("Q8_0") or ggml enum / integer id; None if unsupported."""
    if isinstance(name_or_id, str):
        return TENSOR_TYPES.get(name_or_id.upper())
    return BY_GGML.get(int(name_or_id))
