"""quantize_q8k: f32 activation rows -> Q8K (codegen/q8k.py), the input of `matmul_q8k`.

Bit-exact with `q8k.quantize_rows`: per 256-superblock d = amax / 127 in f32, inv = 1 / d (0 for
an all-zero block), q = sign(v) * floor(|v| + 0.5) with v = x * inv, all in f32 as numpy does;
bs = sum(q) per 16 values (int16), xs = d * (bs[2j] + bs[2j+1]) per 32 values (f32).

Threading: the n * K/256 superblocks of the batch are split into `nth` contiguous ranges, so one
decode row is split between threads as evenly as a prefill batch is. Padding bytes of a row (up
to `row_stride(K)`) are never written.
"""

from __future__ import annotations

from .. import q8k
from .quantize_q8a import quantize_op

OP = quantize_op("quantize_q8k", q8k, 256,
                 "quantise n f32 rows of K to Q8K (int8 + per-256 f32 scale + per-16 sums + "
                 "per-32 dequantised sums)")
