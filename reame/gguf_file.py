"""Reading a GGUF file: metadata and tensor descriptors from the header, tensor data by mmap.

The header is parsed with `struct` rather than `gguf.GGUFReader`: the reader builds a numpy view
per field part, which costs ~7 s on a 150k-token vocabulary (measured on
ggml-vocab-qwen2.gguf) where this parser takes a fraction of a second. Tensor data stays
zero-copy: each tensor is a view into one read-only `numpy.memmap` of the file. The format and
the type enums are gguf's own (`gguf.GGMLQuantizationType`, `GGML_QUANT_SIZES`);
tests/test_model_errors.py checks this parser against `GGUFReader` on stories260K, a vocabulary
GGUF and synthetic models (all of ../shared would take ~40 s of GGUFReader time).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import ModelError
from .pace import checkpoint
from .tensor_types import TensorType, tensor_type

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# Arrays of arrays nested deeper than this are refused (llama.cpp reads no nested array at all;
# unbounded, a few kB of nesting exhausted Python's recursion limit).
MAX_ARRAY_DEPTH = 4
# The fewest bytes a key-value pair (key length, value type, a 1-byte value) and a tensor
# descriptor (name length, dimension count, type, offset) take: a header whose counts need more
# than the file holds is refused before anything is read.
MIN_KV_BYTES, MIN_TENSOR_INFO_BYTES = 13, 24
# The fewest bytes of one element of a string array (its length) and of an array of arrays
# (element type and count): a claimed count is checked against the bytes left before the loop.
_MIN_ELEMENT = {8: 8, 9: 12}

# GGUF value types -> (struct format, size); 8 = string, 9 = array are handled apart.
_SCALARS = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
          10: "<u8", 11: "<i8", 12: "<f8"}


@dataclass
class Tensor:
    """One tensor of a GGUF file. `shape` is in GGUF (ggml) order: shape[0] is the row length."""
    name: str
    type: TensorType
    shape: tuple[int, ...]
    data: np.ndarray            # raw bytes (uint8) of the tensor, a view into the file's mmap
    offset: int                 # absolute file offset of the data

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def n_rows(self) -> int:
        return self.n_elements // self.shape[0]

    @property
    def row_bytes(self) -> int:
        return self.type.row_bytes(self.shape[0])

    def rows(self) -> np.ndarray:
        """Raw data as (n_rows, row_bytes) uint8."""
        return self.data.reshape(self.n_rows, self.row_bytes)

    def dequantize(self) -> np.ndarray:
        """float32 array in numpy order (reversed GGUF shape), via gguf.quants (the reference)."""
        out = self.type.dequantize(self.rows())
        return out.reshape(tuple(reversed(self.shape)))


class _Cursor:
    def __init__(self, buf: memoryview, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise ModelError(self.path, f"truncated GGUF header (needs byte {self.pos + n:,}, "
                                        f"file has {len(self.buf):,})")

    def scalar(self, vtype: int):
        fmt, size = _SCALARS[vtype]
        self.need(size)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def u32(self) -> int:
        return self.scalar(4)

    def u64(self) -> int:
        return self.scalar(10)

    def string(self) -> str:
        n = self.u64()
        self.need(n)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int, key: str = "", depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype == 8:
            return self.string()
        if vtype == 9:
            if depth >= MAX_ARRAY_DEPTH:
                raise ModelError(self.path, f"metadata key {key!r:.60}: arrays nested more than "
                                            f"{MAX_ARRAY_DEPTH} deep")
            itype, count = self.u32(), self.u64()
            self.need(count * _MIN_ELEMENT.get(itype, 0))
            if itype in _NUMPY:
                size = np.dtype(_NUMPY[itype]).itemsize
                self.need(count * size)
                arr = np.frombuffer(self.buf, dtype=_NUMPY[itype], count=count, offset=self.pos)
                self.pos += count * size
                return arr.copy()
            if itype == 8:                # a vocabulary: 150k strings in a few tenths of a s
                out = []
                for i in range(count):
                    if not i & 1023:
                        checkpoint()
                    out.append(self.string())
                return out
            if itype == 9:
                return [self.value(9, key, depth + 1) for _ in range(count)]
            raise ModelError(self.path, f"unknown GGUF array element type {itype}")
        raise ModelError(self.path, f"unknown GGUF value type {vtype}")


class GGUFFile:
    """A GGUF file opened read-only: `metadata` (key -> python value) and `tensors` (name -> Tensor).

    `on_progress(done, total)`, when given, is called as the header's entries (metadata keys, then
    tensor descriptors) are read; it changes nothing else."""

    def __init__(self, path: str | os.PathLike,
                 on_progress: Callable[[int, int], None] | None = None):
        self.path = str(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise ModelError(self.path, f"cannot open: {e.strerror or e}") from None
        if size == 0:
            raise ModelError(self.path, "empty file (not a GGUF model)")
        if len(magic) < 4 and GGUF_MAGIC.startswith(magic):
            raise ModelError(self.path, f"truncated GGUF header (file has {size} bytes)")
        if magic != GGUF_MAGIC:
            raise ModelError(self.path, "not a GGUF file (bad magic "
                                        f"{magic!r}, expected b'GGUF')")
        self.size = size
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(memoryview(self._map), self.path)
        cur.pos = 4
        self.version = cur.u32()
        if self.version not in (2, 3):
            if self.version > 0xFFFF:
                raise ModelError(self.path, "big-endian GGUF files are not supported")
            raise ModelError(self.path, f"unsupported GGUF version {self.version}")
        n_tensors, n_kv = cur.u64(), cur.u64()
        least = cur.pos + n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES
        if least > size:
            raise ModelError(self.path, f"corrupt GGUF header or truncated file: {n_kv:,} keys "
                                        f"and {n_tensors:,} tensors need at least {least:,} "
                                        f"bytes, the file has {size:,}")

        self.metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.u32(), key)
            if on_progress is not None:
                on_progress(i + 1, n_kv + n_tensors)

        infos = []
        for i in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if n_dims > 4:
                raise ModelError(self.path, f"tensor {name!r} has {n_dims} dimensions (at most 4)")
            dims = tuple(cur.u64() for _ in range(n_dims))
            infos.append((name, dims, cur.u32(), cur.u64()))
            if on_progress is not None:
                on_progress(n_kv + i + 1, n_kv + n_tensors)

        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (not isinstance(align, int) or isinstance(align, bool)
                or align <= 0 or align & (align - 1)):
            raise ModelError(self.path, f"invalid general.alignment {align!r:.40} "
                                        "(must be a power of two)")
        data_start = (cur.pos + align - 1) // align * align
        self.tensors: dict[str, Tensor] = {}
        for name, dims, type_id, offset in infos:
            ttype = tensor_type(type_id)
            if ttype is None:
                try:
                    tname = GGMLQuantizationType(type_id).name
                except ValueError:
                    tname = f"#{type_id}"
                raise ModelError(self.path, f"tensor {name!r} has type {tname}, which Reame does "
                                            "not support (supported: F32, F16, BF16, Q8_0, Q4_0, "
                                            "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)")
            row = dims[0] if dims else 1
            if row % ttype.block_size:
                raise ModelError(self.path, f"tensor {name!r}: row length {row} is not a "
                                            f"multiple of the {ttype.name} block ({ttype.block_size})")
            n_el = math.prod(dims)                # Python ints: a product never wraps around
            nbytes = n_el // ttype.block_size * ttype.type_size
            start = data_start + offset
            if start + nbytes > size:
                raise ModelError(self.path, f"truncated file: tensor {name!r} needs bytes up to "
                                            f"{start + nbytes:,}, the file has {size:,}")
            self.tensors[name] = Tensor(name, ttype, dims or (1,),
                                        self._map[start:start + nbytes], start)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def release(self, tensor: Tensor) -> None:
        """Drop the pages of a tensor's data from this process (an engine that keeps its own
        copy, e.g. repacked, calls it so the file's pages stop counting in its memory). The
        mapping stays valid: a later read pages the bytes back in from the file."""
        mm = getattr(self._map, "_mmap", None)
        if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-tensor.offset // page) * page                 # whole pages inside the tensor
        end = (tensor.offset + tensor.data.nbytes) // page * page
        if end > start:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)


def quant_size(type_id: int) -> tuple[int, int]:
    """(block size, bytes per block) of a ggml type id."""
    return GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
