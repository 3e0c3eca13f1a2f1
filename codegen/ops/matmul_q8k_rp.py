"""matmul_q8k_rp: matmul_q8k with the weights in the row-panel layout (codegen/panel_layout.py).

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T
    args ("w", "xq", "y", "n"); dims ("M", "K", "acc"); K a multiple of 256, M of 16

The contract of matmul_q8k except for `w`: `panel_layout.repack` of the GGUF rows, done once when
the engine loads the model. The row-panel kernels (16 rows in the vector lanes, matmul_q8k's
family `panel`) then read each superblock's transposed scales and quants with plain loads
instead of transposing 16 rows in registers per call, so one layout serves decode (nt = 1) as
well as batches and prompts. Threads split the rows in whole panels.

Families (templates/matmul_q8k_rp_<family>.ll.j2, which include matmul_q8k's):
    generic   matmul_q8k's generic kernel, each superblock gathered back from the record into a
              stack buffer first: the portable reference the dispatch table checks against
    panel     matmul_q8k's row-panel kernel on records: zmm lanes from AVX-512 VNNI, two ymm
              halves below it (avx2, avx_vnni, avx512); types Q4_K, Q5_K, Q6_K, Q3_K (quants
              q + 4 with Q6_K's per-16 chains), Q2_K (q on per-16 chains from zero, mins in
              float) and IQ4_XS (levels by vpshufb: level + 128 with a -128 x sum correction on
              zmm, |level| x the activation signed by vpsignb on ymm);
              in prompt chunks (min_tokens) below AVX-512 VNNI the panel as two passes of 8
              rows (lanes = 8). No tile prefetches
              (the template's next-panel prefetch, pf_loc, is the GGUF panels'): the hardware
              prefetcher follows the record stream
The expected result and tolerance are matmul_q8k's (same integer sums, same float steps).
"""

from __future__ import annotations

from reame.tensor_types import PROMPT_STEP

from .base import HEAVY_SLICES, Op, Variant, row_panel_case
from .matmul_q8k import OP as Q8K_OP
from .matmul_q8k import TOLERANCE, TUNED

# the types with a row-panel layout (codegen/panel_layout.py)
RP_TYPES = (*TUNED, "Q2_K", "Q3_K", "IQ4_XS")

# the types whose 8-row passes measured faster in prompt chunks at avx2 (1 thread, 2048 x 2048,
# 64 tokens, nt 8: Q4_K 148 -> 177 GOP/s, Q5_K 133 -> 150 on the Intel VM; Q6_K 114 -> 116
# there, but on AMD Zen 4 87 -> 128, 2048 x 5632 86 -> 128, 5632 x 2048 76 -> 126, 2048 x 256
# 87 -> 141, hot, nt 4 on 16 lanes 92-110;
# IQ4_XS 896 x 4864, 64 tokens: 72 -> 99, the 0.5B file's 512-token prompt's ffn_down 1519 ->
# 1236 thread-ms; Q3_K 5632 x 2048, 2 threads: 150-183 -> 214-263, a TinyLlama-shaped Q3_K_M
# 512-token prefill 91-97 -> 128 tok/s; Q2_K 180 -> 297); in
# steps of <= 16 tokens, weights from DRAM, they lose (the second pass reads no new lines, so
# memory waits: a 4-token step's Q4_K products 38.8 -> 48.2 thread-ms)
HALVES_TYPES = ("Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "Q3_K", "Q2_K")


_case, _reference = row_panel_case(Q8K_OP)


OP = Op(
    name="matmul_q8k_rp",
    slices=HEAVY_SLICES,
    args=("w", "xq", "y", "n"),
    dims=("M", "K", "acc"),
    variants=(
        Variant("generic", "generic", RP_TYPES, ({"nt": 1, "u": 1}, {"nt": 4, "u": 1}),
                "matmul_q8k generic on superblocks gathered from the panel records"),
        Variant("panel", "avx512_vnni", RP_TYPES,
                ({"nt": 1}, {"nt": 2}, {"nt": 4}),
                "matmul_q8k's row panels on the panel layout: 16 rows x nt tokens per register "
                "tile, scales and quants loaded pre-transposed; no software prefetch (the "
                "hardware prefetcher follows the record stream; on AMD Zen 4 prefetcht0 8 KiB "
                "ahead cost 11% at one token and 46% at four, docs/kernels-kquants.md); steps of "
                "8-16 tokens as passes of 4 (Zen 4: 8 tokens on nt = 8 1.2x two passes of 4)"),
        Variant("panel", "avx512_vnni", RP_TYPES, ({"nt": 8},),
                "prompt chunks: 8 tokens per pass (a 512-token TinyLlama Q4_K_M prompt 5% faster "
                "than on passes of 4)", min_tokens=PROMPT_STEP),
        Variant("panel", "avx2", RP_TYPES,
                ({"nt": 1}, {"nt": 2}, {"nt": 4}, {"nt": 8}),
                "the same row panels in two 256-bit halves (rows 0-7, 8-15): per weight dword "
                "vpmaddubsw with the token's 4 bytes broadcast, the pairs summed in i16, then "
                "vpmaddwd (AVX-VNNI: vpdpbusd per half); no software prefetch (it cost 30% "
                "here: the hardware prefetcher follows the record stream)", below="avx512_vnni"),
        Variant("panel", "avx2", HALVES_TYPES, ({"nt": 8, "lanes": 8},),
                "prompt chunks: the 16-row panel as two 8-row passes (lanes = rows per "
                "register tile), whose 8 weight vectors per 32-block and 8-lane accumulators "
                "fit the 16 ymm registers the 16-lane tile spills",
                min_tokens=PROMPT_STEP, below="avx512_vnni"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: TOLERANCE[dtype],
    example_dims={"M": 5632, "K": 2048, "acc": 0},
    doc="y[n, M] (+)= W[M, K] @ X[n, K]^T, K-quant weights in the row-panel layout x Q8K "
        "activations",
)
