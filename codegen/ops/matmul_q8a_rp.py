"""matmul_q8a_rp: matmul_q8a with the weights in the row-panel layout (codegen/panel_layout.py).

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T
    args ("w", "xq", "y", "n"); dims ("M", "K", "acc"); K a multiple of 32, M of 16

The contract of matmul_q8a except for `w`: `panel_layout.repack` of the GGUF rows of a Q8_0, Q4_0,
Q4_1 or IQ4_NL tensor, done once when the engine loads the model: per 16 rows and 32-block one record
(the 16 rows' f16 d as one 32-byte vector, Q4_1's d | m << 16 as one 64-byte vector, then the
quants' dwords, lane r = row r). The row panels then read with plain loads what matmul_q8a's
`panel` family transposes and gathers from 16 rows per block, which at one token on 256-bit
registers cost more than the 1-row tiles, and on zmm more than the records (docs/kernels-int8.md).
Threads split the rows in whole panels.

Families (templates/matmul_q8a_rp_<family>.ll.j2, which include matmul_q8a's):
    generic   matmul_q8a's generic kernel, each block gathered back from its record into a stack
              buffer first: the portable reference the dispatch table checks against
    panel     matmul_q8a's row-panel kernel on records, at the 256-bit levels (two ymm halves;
              Q8_0 as |q| x the activation with q's sign at avx2, as q + 128 at avx_vnni; in
              prompt chunks (min_tokens) Q4_0/Q4_1 as two passes of 8 rows, lanes = 8) and from
              avx512_vnni on zmm (nt up to 12 in steps, 8 in prompt chunks; 16 tokens as two
              passes of 8): the weights' layout at
              every x86 level but amx (reame/tensor_types.py RECORD_LEVELS; on AMD Zen 4 the
              zmm panels on GGUF rows took 1.6-1.75x the records' time at one token,
              docs/kernels-int8.md)
The expected result and tolerance are matmul_q8a's (same integer sums, same float steps).
"""

from __future__ import annotations

from reame.tensor_types import PROMPT_STEP

from .base import HEAVY_SLICES, Op, Variant, row_panel_case
from .matmul_q8a import OP as Q8A_OP

RP_TYPES = ("Q8_0", "Q4_0", "Q4_1", "IQ4_NL")
# the types whose 8-row passes measured faster in prompt chunks at avx2 (1 thread, 4864 x 896,
# 64 tokens, nt 8: Q4_0 168 -> 197 GOP/s, Q4_1 161 -> 172); not Q8_0/IQ4_NL, whose psign +
# vpmaddubsw + vpmaddwd per dword keep ports 0/1 busy either way (0-20% slower)
HALVES_TYPES = ("Q4_0", "Q4_1")


_case, _reference = row_panel_case(Q8A_OP)


OP = Op(
    name="matmul_q8a_rp",
    slices=HEAVY_SLICES,
    args=("w", "xq", "y", "n"),
    dims=("M", "K", "acc"),
    variants=(
        Variant("generic", "generic", RP_TYPES, ({"nt": 1}, {"nt": 4}),
                "matmul_q8a generic on blocks gathered from the panel records"),
        Variant("panel", "avx2", RP_TYPES, ({"nt": 1}, {"nt": 2}, {"nt": 4}, {"nt": 8}),
                "matmul_q8a's row panels on the panel layout: 16 rows x nt tokens per register "
                "tile as two ymm halves, quants and scales loaded pre-transposed",
                below="avx512_vnni"),
        Variant("panel", "avx512_vnni", RP_TYPES,
                ({"nt": 1}, {"nt": 2}, {"nt": 4}, {"nt": 8}),
                "the same on zmm registers (one vpdpbusd per 16 rows and dword); no nt = 16 "
                "(AMD Zen 4, Q8_0 4864 x 896 from DRAM: 16 tokens 273 us on nt = 16 against 217 "
                "on two passes of 8; hot, nt = 12 as fast per token as nt = 16)"),
        Variant("panel", "avx512_vnni", RP_TYPES, ({"nt": 12},),
                "the zmm panels 12 tokens wide, for steps of 9-12 tokens (one pass where nt = 8 "
                "takes two); prompt chunks stay on nt = 8, faster there (AMD Zen 4, 512 tokens "
                "hot, 2 threads: Q4_1 1536 x 576 1456 against 1528 us, Q4_0 / Q8_0 4864 x 896 "
                "1-1.5% faster; SmolLM2 Q4_1 prefill 1.11x, one alternating pair)",
                max_tokens=PROMPT_STEP - 1),
        Variant("panel", "avx2", HALVES_TYPES, ({"nt": 8, "lanes": 8},),
                "prompt chunks: the 16-row panel as two 8-row passes (lanes = rows per "
                "register tile), whose 8 weight vectors per block and 8-lane accumulators fit "
                "the 16 ymm registers the 16-lane tile spills",
                min_tokens=PROMPT_STEP, below="avx512_vnni"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=Q8A_OP.tolerance,
    example_dims={"M": 4864, "K": 896, "acc": 0},
    doc="y[n, M] (+)= W[M, K] @ X[n, K]^T, Q8_0/Q4_0/Q4_1/IQ4_NL weights in the row-panel layout x Q8A "
        "activations",
)
