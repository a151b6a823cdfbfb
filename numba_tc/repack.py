"""Operands TMA cannot read (rows not 16 bytes apart, or a base not 16-byte aligned) copied
once into scratch at a pitch it can: rows 128 bytes apart, so that every box row also starts on
a 32-byte sector (``tensormap.tma_rows_fast``). One pass over the operand, read and write, which
the Hopper kernel then reads at full speed; the mma.sync fallback it replaces ran such problems
at a fraction of that (benchmarks/NOTES.md, session 12).
"""
from __future__ import annotations

from numba import cuda, int64

from .jit import kernel, kernel_factory
from .layout import ITEMSIZE, ROW_BYTES
from .primitives import ldg_in16, stg_out1
from .schedule import cdiv

__all__ = ["repack_kernel", "pitch", "grid", "THREADS", "VEC"]

THREADS = 256
VEC = 8                                     # elements a thread copies
_KIND = {"float16": 1, "bfloat16": 2}       # ptx/mma.cu: ldg_in16 / stg_out1 conversions (exact)


def pitch(width: int, dtype: str) -> int:
    """The copy's row pitch in elements: ``width`` rounded up to 128 bytes."""
    per = ROW_BYTES // ITEMSIZE[dtype]
    return cdiv(max(width, 1), per) * per


def grid(lines: int, width: int) -> int:
    return max(1, cdiv(lines * cdiv(width, VEC), THREADS))


@kernel_factory
def repack_kernel(dtype: str):
    """dst[line, :width] = src[line, :width] for 16-bit elements, rows ``ld_src`` / ``ld_dst``
    elements apart (a column-major operand: its columns are the lines)."""
    KIND, ITEM = _KIND[dtype], ITEMSIZE[dtype]

    def repack(src, dst, lines, width, ld_src, ld_dst):
        i = int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
        per_line = (width + VEC - 1) // VEC
        line = i // per_line
        c0 = (i - line * per_line) * VEC
        if line >= lines:
            return
        s = src + (line * ld_src + c0) * ITEM
        d = dst + (line * ld_dst + c0) * ITEM
        for j in range(VEC):
            if c0 + j < width:
                stg_out1(d + j * ITEM, ldg_in16(s + j * ITEM, KIND), KIND)

    return kernel(repack, ("i64",) * 6)
