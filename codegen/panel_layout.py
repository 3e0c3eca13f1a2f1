"""The row-panel weight layout of K-quant and IQ4_XS tensors (op matmul_q8k_rp) and of Q8_0 /
Q4_0 / Q4_1 / IQ4_NL tensors (op matmul_q8a_rp, one record per 16 rows and 32-block).

The panel kernels compute 16 weight rows at once with row r in vector lane r: per superblock they
load each of the 16 rows' bytes and transpose them in registers (16 x 4 or 16 x 8 dwords). The
panel layout stores those transposes instead, once, at load: for each group of 16 rows and each
superblock one record of 64-byte vectors, vector k of a segment (off, n) holding dword k of
bytes [off, off + 4n) of the 16 rows' superblocks, lane r = row r. Segments are listed in the
order the kernel reads them. A record is the same size as the 16 superblocks (Q6_K and Q3_K:
+32 bytes for the scale d, read as one dword at byte 206 / 106 of each row). The legacy types' f16 scale d sits
at byte 0 with the quants from byte 2, so it is stored first as 16 halfwords (F16_SEGMENTS):
their records are exactly the 16 blocks' bytes.
"""

from __future__ import annotations

import numpy as np

PANEL_ROWS = 16

# (byte offset in a row's superblock, dwords), in the kernel's reading order; the legacy types
# (op matmul_q8a_rp, one record per 16 rows and 32-block) likewise
SEGMENTS: dict[str, tuple[tuple[int, int], ...]] = {
    "Q4_K": ((0, 4), (16, 8), (48, 8), (80, 8), (112, 8)),
    "Q5_K": ((0, 4), (16, 8), (48, 8), (80, 8), (112, 8), (144, 8)),
    "Q6_K": ((192, 4), (206, 1), (128, 8), (0, 8), (32, 8), (160, 8), (64, 8), (96, 8)),
    # Q2_K: scales | mins (16 bytes), d | dmin, qs
    "Q2_K": ((0, 4), (80, 1), (16, 8), (48, 8)),
    # Q3_K: scales (12 bytes), d (the high half of the dword at 106), hmask, qs
    "Q3_K": ((96, 3), (106, 1), (0, 8), (32, 8), (64, 8)),
    # IQ4_XS: d | scales_h, scales_l, then each 32-block's 16 bytes of nibbles
    "IQ4_XS": ((0, 2), *((8 + 16 * j, 4) for j in range(8))),
    "Q8_0": ((2, 8),),
    "Q4_0": ((2, 4),),
    "IQ4_NL": ((2, 4),),                # Q4_0's layout: d, then 16 bytes of nibbles
    "Q4_1": ((0, 1), (4, 4)),           # d | m << 16 in one dword per row, then the quants
}
# f16 fields stored first in a record as one 32-byte vector each (lane r = row r's 2 bytes): the
# scale d of the types whose quants start at byte 2 (a dword there would repeat two quant bytes)
F16_SEGMENTS: dict[str, tuple[int, ...]] = {"Q8_0": (0,), "Q4_0": (0,), "IQ4_NL": (0,)}
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "Q3_K": 110, "Q2_K": 84, "IQ4_XS": 136,
               "Q8_0": 34, "Q4_0": 18, "Q4_1": 20, "IQ4_NL": 18}


def record_offsets(dtype: str) -> dict[int, int]:
    """Byte offset in a record of each segment, by its offset in a row's (super)block."""
    out, at = {}, 0
    for off in F16_SEGMENTS.get(dtype, ()):
        out[off] = at
        at += 2 * PANEL_ROWS
    for off, n in SEGMENTS[dtype]:
        out[off] = at
        at += 64 * n
    return out


def record_bytes(dtype: str) -> int:
    return 2 * PANEL_ROWS * len(F16_SEGMENTS.get(dtype, ())) + 64 * sum(n for _, n in SEGMENTS[dtype])


def repack(raw: np.ndarray, dtype: str) -> np.ndarray:
    """GGUF rows [M, K/256 superblocks] (legacy types: K/32 blocks; uint8, M a multiple of 16)
    -> the panel layout (uint8, one record per 16 rows and (super)block, panel-major)."""
    bb = BLOCK_BYTES[dtype]
    m = raw.shape[0]
    if m % PANEL_ROWS:
        raise ValueError(f"{m} rows: the panel layout needs a multiple of {PANEL_ROWS}")
    w = np.ascontiguousarray(raw).reshape(m // PANEL_ROWS, PANEL_ROWS, -1, bb)
    p, _, nsb, _ = w.shape
    out = np.empty((p, nsb, record_bytes(dtype)), np.uint8)
    at = 0
    for off in F16_SEGMENTS.get(dtype, ()):
        seg = w[:, :, :, off:off + 2].view(np.uint16).reshape(p, PANEL_ROWS, nsb)
        out[:, :, at:at + 2 * PANEL_ROWS].view(np.uint16)[...] = seg.transpose(0, 2, 1)
        at += 2 * PANEL_ROWS
    for off, n in SEGMENTS[dtype]:                 # one strided copy per segment
        seg = w[:, :, :, off:off + 4 * n].view(np.uint32).reshape(p, PANEL_ROWS, nsb, n)
        out[:, :, at:at + 64 * n].view(np.uint32).reshape(p, nsb, n, PANEL_ROWS)[...] = \
            seg.transpose(0, 2, 3, 1)
        at += 64 * n
    return out.reshape(-1)
