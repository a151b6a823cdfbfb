"""TMA tensor maps: what TMA can read, and the 128-byte ``CUtensorMap`` of a matrix.

A map is passed to the Hopper kernels *by value*, as a ``__grid_constant__`` kernel parameter
(``build.py`` writes the kernel's entry), so it lives in the launch's own parameter buffer: no
device memory to allocate, copy or keep alive, and a CUDA graph captures it with the launch.
Encoding one (``cuTensorMapEncodeTiled``, a host-only driver call, made through ctypes: the
cuda.bindings wrapper costs about 14 us a call) is cached by its arguments, so repeated calls
with the same operands pay a dictionary lookup.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict

from .layout import ITEMSIZE

__all__ = ["tma_requirements", "tma_rows_fast", "encode", "MAP_BYTES"]

MAP_BYTES = 128
# CUtensorMapDataType (8-bit floats travel as UINT8: TMA moves bytes, wgmma reads them as fp8).
# "tf32": float32 values loaded as TFLOAT32, which rounds them to tf32 to nearest on the way, as
# cvt.rna.tf32.f32 would; loaded as FLOAT32, wgmma reads them truncated (benchmarks/check_tf32.py, in git at 4dce1f6).
_DTYPES = {"float16": 6, "bfloat16": 9, "float32": 7, "tf32": 11, "float8_e4m3fn": 0, "float8_e5m2": 0}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}                       # CUtensorMapSwizzle
_L2_PROMOTION_256B = 3                                        # CUtensorMapL2promotion
_CACHE: OrderedDict = OrderedDict()
CACHE_SIZE = 4096


def tma_requirements(ptr: int, ld: int, itemsize: int):
    """Why a row-major matrix (rows ``ld`` elements apart) cannot be a TMA source, or None.
    (cuTensorMapEncodeTiled: 16-byte aligned base, row strides a multiple of 16 bytes.)"""
    if ptr % 16:
        return f"its data pointer is not 16-byte aligned (address % 16 = {ptr % 16})"
    if (ld * itemsize) % 16:
        return (f"its rows are {ld * itemsize} bytes apart, not a multiple of 16 "
                f"(leading dimension {ld} x {itemsize} bytes)")
    return None


def tma_rows_fast(ptr: int, ld: int, itemsize: int) -> bool:
    """Whether every row of the matrix starts on a 32-byte sector. Rows that do not (16 mod 32
    bytes apart) cost each 128-byte box row a fifth sector, and the operand that is two thirds of
    a 128x256 tile's traffic then starves the kernel (benchmarks/NOTES.md, Hopper ladder)."""
    return ptr % 32 == 0 and (ld * itemsize) % 32 == 0


def _check(ptr: int, dtype: str, ld: int, box_cols: int, box_rows: int, swizzle: int) -> int:
    itemsize = ITEMSIZE[dtype]
    why = tma_requirements(ptr, ld, itemsize)
    if why:
        raise ValueError(f"TMA cannot read this matrix: {why}")
    if not (1 <= box_cols <= 256 and 1 <= box_rows <= 256):
        raise ValueError(f"TMA boxes are at most 256 x 256, got {box_rows} x {box_cols}")
    if swizzle and box_cols * itemsize > swizzle:
        raise ValueError(f"a {swizzle}B-swizzled box row is at most {swizzle} bytes, got {box_cols * itemsize}")
    return itemsize


def encode(ptr: int, dtype: str, cols: int, rows: int, ld: int, box_cols: int, box_rows: int,
           swizzle: int = 128, batches: int = 0, bstride: int = 0) -> bytes:
    """The CUtensorMap of a row-major ``rows x cols`` matrix (element (r, c) at
    ``ptr + (r * ld + c) * itemsize``) read or written in ``box_rows x box_cols`` boxes; boxes
    past the edges read as zeros and are clipped when stored. With ``batches``, a 3-D map of
    that many such matrices ``bstride`` elements apart (boxes one matrix deep). Cached by the
    arguments."""
    key = (ptr, dtype, cols, rows, ld, box_cols, box_rows, swizzle, batches, bstride)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    itemsize = _check(ptr, dtype, ld, box_cols, box_rows, swizzle)
    if batches and (bstride * itemsize) % 16:
        raise ValueError(f"TMA cannot read this batch: its matrices are {bstride * itemsize} bytes apart, "
                         "not a multiple of 16")
    from .driver import CudaError, libcuda
    rank = 3 if batches else 2
    u64s, u32s = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
    dims, strides = (cols, rows, batches)[:rank], (ld * itemsize, bstride * itemsize)[:rank - 1]
    out = ctypes.create_string_buffer(MAP_BYTES)
    err = libcuda().cuTensorMapEncodeTiled(
        out, _DTYPES[dtype], rank, ctypes.c_void_p(ptr), u64s(*dims), (ctypes.c_uint64 * (rank - 1))(*strides),
        u32s(*(box_cols, box_rows, 1)[:rank]), u32s(*(1,) * rank), 0, _SWIZZLE[swizzle], _L2_PROMOTION_256B, 0)
    if err:
        raise CudaError(f"cuTensorMapEncodeTiled failed with CUresult {err} (rows={rows}, "
                        f"cols={cols}, ld={ld}, box={box_rows}x{box_cols}, dtype={dtype})")
    words = out.raw
    _CACHE[key] = words
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return words
