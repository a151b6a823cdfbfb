"""Operands TMA cannot read (rows not 16 bytes apart, or a base not 16-byte aligned) copied
once into scratch at a pitch it can: rows 128 bytes apart, so that every box row also starts on
a 32-byte sector (``tensormap.tma_rows_fast``). One pass over the operand, read and write, which
the Hopper kernel then reads at full speed; the mma.sync fallback it replaces ran such problems
at a fraction of that (benchmarks/NOTES.md, session 12).

8-bit operands have one more reason to be copied: wgmma reads them k-major only (A row-major, B
column-major), so the other layouts are transposed on the way (``gather8_kernel``), through a
tile in shared memory so that the reads follow the source's rows and the writes the copy's.
"""
from __future__ import annotations

from numba import cuda, int64, uint8

from .intrinsics import device_array
from .jit import kernel, kernel_factory
from .layout import ITEMSIZE, ROW_BYTES
from .primitives import ldg_in16, stg_out1
from .schedule import cdiv

__all__ = ["repack_kernel", "gather8_kernel", "pitch", "grid", "grid8", "THREADS", "VEC", "TILE8"]

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


TILE8 = 64                                  # the 8-bit copy's tile: TILE8 x TILE8 bytes per block


def grid8(lines: int, width: int) -> int:
    return max(1, cdiv(lines, TILE8) * cdiv(width, TILE8))


@kernel_factory
def gather8_kernel(trans: bool):
    """dst[i, j] = src[i * s_i + j * s_j] for bytes (i < lines, j < width; dst rows ``ld_dst``
    apart): a copy of an 8-bit operand into rows of K, transposing it where its K is not the
    contiguous dimension (``trans``: the source is contiguous along i, ``s_i`` == 1). Each block
    moves a TILE8 x TILE8 tile through shared memory, read along the source's contiguous
    dimension and written along dst's rows: both coalesced."""
    T, TP, GROUPS = TILE8, TILE8 + 1, THREADS // TILE8      # TP: [j][i] rows padded, columns in distinct banks

    def gather(src, dst, lines, width, s_i, s_j, ld_dst):
        tile = cuda.shared.array((T, TP), uint8)
        tiles_j = (width + T - 1) // T
        bi = cuda.blockIdx.x // tiles_j
        i0 = int64(bi) * T
        j0 = int64(cuda.blockIdx.x - bi * tiles_j) * T
        fast = cuda.threadIdx.x & (T - 1)
        g = cuda.threadIdx.x // T
        s = device_array(src, ((lines - 1) * s_i + (width - 1) * s_j + 1,), (1,), uint8)
        d = device_array(dst, (lines * ld_dst,), (1,), uint8)
        for r in range(g, T, GROUPS):
            ii, jj = (fast, r) if trans else (r, fast)
            i, j = i0 + ii, j0 + jj
            if i < lines and j < width:
                tile[jj, ii] = s[i * s_i + j * s_j]
        cuda.syncthreads()
        for r in range(g, T, GROUPS):
            i, j = i0 + r, j0 + fast
            if i < lines and j < width:
                d[i * ld_dst + j] = tile[fast, r]

    return kernel(gather, ("i64",) * 7)
