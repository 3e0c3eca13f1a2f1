"""matmul_q8k: K-quant weights (Q4_K, Q5_K, Q6_K) times Q8K activations, integer dot products.

    y[n, M] (+)= dequant(w)[M, K] @ dequant(xq)[n, K]^T
    args ("w", "xq", "y", "n"); dims ("M", "K", "acc"); K a multiple of 256

`w` holds M rows of K/256 superblocks (GGUF layout), `xq` n activation rows in the Q8K format of
codegen/q8k.py (made by the op `quantize_q8k`: one f32 scale D per 256 values and an integer
sub-scale s_j per 32), `y` is float32 [n, M]; `acc=1` adds to y. Threads split the M rows (one
weight-row stream per thread); tokens are processed in tiles of `nt`, each weight superblock
unpacked once per tile.

Because the activation sub-scales are integers, the kernels multiply them into the weights'
integer sub-block scales and add the products of a whole superblock in int32; one float
multiply-add per superblock and token applies d_w * D (matmul_q8a's K-quant kernels on Q8A do a
float multiply-add per 32-block and token). Q4_K/Q5_K mins and Q6_K's -32 offset use Q8K's
per-16 dequantised activation sums `xs` (one 16-lane FMA per superblock and token).

Families (templates/matmul_q8k_<family>.ll.j2, skeleton in matmul_q8k_common.ll.j2):
    generic   portable vector IR (zext/sext, mul, reduce add), any LLVM target
    avx2      AVX2 vpmaddubsw + vpmaddwd (the i16 multiplier: the sub-block scale times the
              activation sub-scale, one vpmullw per superblock and token, a vpshufb per block),
              one 32-block per ymm, int32 sums over the superblock (IQ4_XS: levels by vpshufb,
              |level| x the activation given its sign)
    vnni      AVX-512 VNNI: vpdpbusd, vpackssdw, vpmullw (weight scale x activation sub-scale
              words), vpmaddwd/vpdpwssd; 64 values per zmm, GFNI nibble split on GFNI hosts
    panel     AVX-512 VNNI register tiles of 16 rows x nt tokens (rows in the lanes)
    dotprod   AArch64 sdot on signed byte halves, addp to block / 16-group sums, integer scale
              products; figures: docs/kernels-arm.md
    i8mm      AArch64 smmla register tiles of 2 rows x 2 tokens for multi-token steps (the
              dotprod code for nt = 1), integer scale products per block; docs/kernels-arm.md
    amx       AMX-INT8 (Q2_K, Q3_K, IQ4_XS; prompt-chunk programs only, reame/jit/select.py):
              each 16-row panel decoded once per token chunk into int8 B tiles (the weights'
              integer sub-scales folded in where the product fits int8), one tdpbssd per
              32-block and 16-token tile, its int32 tile scaled into 16 float accumulators
Tiles: nt = tokens per weight pass, u = superblocks per loop step, pf_bytes = software
prefetch distance (bytes) of the weight stream; pf_loc = the panels' next-panel prefetch
locality (3: L1, 2: L2, none: off). Measured figures: docs/kernels-kquants.md.

The expected result is dequant(W) @ dequant(xq)^T in float64: the integer sums per superblock
are exact, the error is float32 rounding of the per-superblock scale products and of the sums
over superblocks (and, Q4_K/Q5_K, of the separate min term).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from reame.tensor_types import PROMPT_STEP, TENSOR_TYPES

from .. import q8k
from .base import Case, HEAVY_SLICES, Op, Variant
from .matmul_q8a_kquants import (TILES_AVX2, TILES_PORTABLE, TILES_VNNI, random_activations,
                                random_weights)

K_TYPES = tuple(t.name for t in TENSOR_TYPES.values() if t.act_format == "q8k")   # Q8K types
TUNED = ("Q4_K", "Q5_K", "Q6_K")   # types of the panel family (generic, avx2, vnni: all)
AMX_TYPES = ("Q2_K", "Q3_K", "IQ4_XS")   # types of the amx family
_TILES = ("nt = tokens per weight pass, u = superblocks per loop step, pf_bytes = prefetch "
          "distance (B)")


def _case(spec, rng, n):
    M, K = spec.p["M"], spec.p["K"]
    w = random_weights(spec.dtype, rng, M, K)
    xq = q8k.quantize_rows(random_activations(rng, n, K))
    y = (rng.standard_normal((n, M)).astype(np.float32) if spec.p.get("acc")
         else np.full((n, M), np.nan, np.float32))       # acc=0 must overwrite every output
    bufs = {"w": w, "xq": xq, "y": y}
    return Case(bufs, OP.pack(bufs, n=n), ("y",), {"y0": y.copy(), "n": n})


def _reference(spec, case):
    K = spec.p["K"]
    W = TENSOR_TYPES[spec.dtype].dequantize(case.buffers["w"]).astype(np.float64)
    X = q8k.dequantize_rows(case.buffers["xq"], K, np.float64)          # exact
    y = X @ W.T
    if spec.p.get("acc"):
        y = y + case.meta["y0"].astype(np.float64)
    return {"y": y}


@functools.lru_cache(maxsize=None)
def amx_permitted() -> bool:
    """Whether this process may use AMX tile data: Linux grants it per process on request
    (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); without it a tile instruction faults.
    The amx kernels also ask on their first call, so a kernel built and called outside
    `Variant.usable` (tests, benchmarks) runs too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0        # SYS_arch_prctl on x86-64
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class AmxVariant(Variant):
    """A variant that needs the AMX level and the OS's permission to use tile data; only
    programs for prompt chunks (>= PROMPT_STEP tokens) start on it: its tiles decode a 16-row
    panel once per chunk of tokens and compute 16 tokens per tile, wasted on small steps
    (matmul_q8a, SmolLM2-135M Q4_1, 2 threads: an 8-token step's products 14.3 thread-ms on
    tiles vs 7.7 on the panels, 16 tokens 15.8 vs 13.0; prompt chunks of 256 1.09x faster, a
    0.5B Q8_0's 1.31x: docs/kernels-int8.md)."""
    min_tokens: int = PROMPT_STEP

    def usable(self, isa) -> bool:
        return super().usable(isa) and isa.arch == "x86_64" and amx_permitted()


# (rtol, atol) for data of about unit size (|y| ~ 1 for any K): the integer sums per superblock
# are exact; float32 rounding of d_w * D, of the int32 -> f32 conversion and of the sums over
# superblocks remains. Tightness: tests/test_kernels_matmul_q8k_act.py.
TOLERANCE = {t: (1e-5, 2e-5) for t in K_TYPES}

PANEL_MIN_K = 4096       # row panels for long rows in batched decode...
PANEL_MIN_TOKENS = 17    # ...and for any K in prompt-sized programs (above the 16 bucket)


def _prefers(family: str, n_tokens: int, dims: dict) -> bool:
    """The row panels for several tokens with K >= 4096 (1.3-2.6x at 4-8 tokens: the 1-row
    tiles' activations no longer fit L1) and for > 16 tokens (prefill: 1.1-1.5x); at 4-16 tokens
    and short K the 1-row tiles are as fast or faster (Q6_K head 32000 x 2048: panels
    0.45-0.65x), the panels' per-block transposes costing more than the K-quants' cheaper
    1-row unpacking; decode (1 token) never: the streaming 1-row tiles read each weight once at
    the bandwidth (docs/kernels-kquants.md, 2 threads, weights from DRAM)."""
    panel = n_tokens >= 2 and (dims.get("K", 0) >= PANEL_MIN_K or n_tokens >= PANEL_MIN_TOKENS)
    return (family == "panel") == panel


OP = Op(
    name="matmul_q8k",
    prefers=_prefers,
    slices=HEAVY_SLICES,
    args=("w", "xq", "y", "n"),
    dims=("M", "K", "acc"),
    variants=(
        Variant("generic", "generic", K_TYPES, TILES_PORTABLE,
                "portable: 32-lane zext/sext/mul/reduce per 32-block, integer sub-block "
                "scales and sub-scales, one float scale per superblock; " + _TILES),
        Variant("avx2", "avx2", K_TYPES, TILES_AVX2,
                "AVX2 vpmaddubsw + vpmaddwd (sub-block scale x activation sub-scale as the i16 "
                "multiplier), int32 sums per superblock; " + _TILES),
        Variant("vnni", "avx512_vnni", K_TYPES, TILES_VNNI,
                "AVX-512 VNNI, 64 values per zmm: vpdpbusd, vpackssdw, integer scale words "
                "(weight sub-block scale x activation sub-scale), vpmaddwd/vpdpwssd; int32 sums "
                "per superblock; " + _TILES),
        Variant("panel", "avx512_vnni", TUNED,
                ({"nt": 4, "pf_loc": 3}, {"nt": 8, "pf_loc": 3}, {"nt": 8, "pf_loc": 2},
                 {"nt": 8}),
                "AVX-512 VNNI register tiles of 16 rows x nt tokens, rows in the vector lanes: "
                "each 32-block's quants transposed in registers, one vpdpbusd per dword and token "
                "with the activation broadcast, sub-block scales as float lanes (16 rows per "
                "instruction); activations repacked superblock-major per token tile; nt = tokens "
                "per weight pass, pf_loc = next-panel prefetch locality (3: L1, 2: L2, none: off)"),
        Variant("dotprod", "dotprod", K_TYPES, ({"nt": 1, "u": 1}, {"nt": 2, "u": 1},
                                                 {"nt": 4, "u": 1}),
                "AArch64 dot product: a superblock unpacked to 16 signed byte halves once per "
                "token tile, one sdot per half and token, addp levels to the 8 block (4 x 4 "
                "group) sums, integer scale products (umull/smull of the weight scale and the "
                "activation sub-scale), two scvtf/fmla per superblock and token, mins by fmls "
                "on the same accumulators; " + _TILES),
        Variant("i8mm", "i8mm", K_TYPES, ({"nt": 1, "u": 1}, {"nt": 2, "u": 1},
                                           {"nt": 4, "u": 1}),
                "AArch64 int8 matrix multiply: register tiles of 2 rows x 2 tokens, each row's "
                "superblock unpacked as in dotprod and the rows zipped, four smmla per block "
                "and token pair (token pairs interleaved once per tile in a stack buffer), "
                "integer scale products by smull/mla summed over the blocks that cannot "
                "overflow int32, one scvtf/fmla per span and tile, mins by fmla and a faddp "
                "tree; nt = 1 is the dotprod code (decode: no token pair); " + _TILES),
        AmxVariant("amx", "amx", AMX_TYPES, ({"tc": 256}, {"tc": 512}),
                   "AMX-INT8: per 16-row panel and token chunk the rows decoded once into int8 B "
                   "tiles (integer sub-scales folded in for Q2_K/Q3_K), per 16-token tile and "
                   "32-block one tdpbssd with the tokens' Q8K quants as A, the int32 tile scaled "
                   "into float accumulators; for prompt-chunk programs; tc = tokens per chunk "
                   "(per-32 activation scale table, weight decode reused by tc/16 tiles)"),
    ),
    make_case=_case,
    reference=_reference,
    tolerance=lambda dtype: TOLERANCE[dtype],
    example_dims={"M": 5632, "K": 2048, "acc": 0},
    doc="y[n, M] (+)= W[M, K] @ X[n, K]^T, K-quant weights x Q8K activations, integer dots",
)


def prompt_q8k(dtype: str, isa) -> bool:
    """Whether prompt-chunk programs (>= PROMPT_STEP tokens) run weights of `dtype` on Q8K
    (matmul_q8k, or matmul_q8k_rp's panels) at this level: the type table's q8k_prompt types
    always; its row_panel types where they are repacked at this level (Q2_K, Q3_K and IQ4_XS at
    every x86 level but amx: the panels serve every program; expert matrices, which are not
    repacked, then run matmul_q8k's 1-row tiles); its prompt_families types where this op has
    one of those families for them at this level (the AMX tiles, AArch64's smmla tiles); else
    the float path. The JIT's planning (reame/jit/select.py) and the reference engine
    (ReferenceEngine.act_format, at the level a JIT engine would take by default) both ask
    here."""
    t = TENSOR_TYPES[dtype]
    if t.q8k_prompt or t.row_panel_at(isa.level):
        return True
    return any(v.family in t.prompt_families and dtype in v.dtypes and v.usable(isa)
               for v in OP.variants)
