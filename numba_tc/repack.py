"""Operands TMA cannot read (rows not 16 bytes apart, or a base not 16-byte aligned) copied
once into scratch at a pitch it can: rows 128 bytes apart, so that every box row also starts on
a 32-byte sector (``tensormap.tma_rows_fast``). One pass over the operand, read and write, which
the Hopper kernel then reads at full speed; the mma.sync fallback it replaces ran such problems
at a fraction of that (benchmarks/NOTES.md).

8-bit and 32-bit (tf32) operands have one more reason to be copied: wgmma reads them k-major only
(A row-major, B column-major), so the other layouts are transposed on the way (``gather_kernel``),
through a tile in shared memory so that the reads follow the source's rows and the writes the
copy's.
"""
from __future__ import annotations

from numba import cuda, float32, int64, uint8, uint32

from .intrinsics import device_array, f32_ptr, ptr
from .jit import device, kernel, kernel_factory
from .layout import ITEMSIZE, ROW_BYTES
from .primitives import ldg_f32x4, ldg_in16, ldg_v4u32, prmt, stg_f32x4, stg_out1, stg_v4u32
from .schedule import cdiv

__all__ = ["repack_kernel", "chunks_ok", "gather_kernel", "pitch", "grid", "grid_tiles", "vector_ok", "gather_kernels", "THREADS", "VEC", "TILE"]

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
def repack_kernel(dtype: str, vec: bool = False):
    """dst[line, :width] = src[line, :width] for 16-bit elements, rows ``ld_src`` / ``ld_dst``
    elements apart (a column-major operand: its columns are the lines). ``vec``: the source's
    base, pitch and width are whole 16-byte chunks (``chunks_ok``), each thread's VEC elements
    one 16-byte load and store (rows TMA reads slowly, copied at HBM speed); else element by
    element (rows not 16 bytes apart)."""
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
        if vec:
            w = cuda.local.array(4, uint32)
            ldg_v4u32(ptr(w), 0, s)
            stg_v4u32(d, ptr(w), 0)
            return
        for j in range(VEC):
            if c0 + j < width:
                stg_out1(d + j * ITEM, ldg_in16(s + j * ITEM, KIND), KIND)

    return kernel(repack, ("i64",) * 6)


def chunks_ok(ptr: int, ld: int, width: int, item: int) -> bool:
    """Whether ``repack_kernel``'s 16-byte path may copy these lines: base, pitch and width in
    whole 16-byte chunks (a thread's VEC elements)."""
    return item == 2 and ptr % 16 == 0 and (ld * item) % 16 == 0 and width % VEC == 0


TILE = {1: 128, 4: 64}                      # the transposing copy's tile: TILE x TILE elements per block,
                                            # by element size (16 KiB of fp8, 16 KiB of fp32)
_WORD = {1: uint8, 4: float32}              # the elements it moves (fp32: bits moved, never computed)


def grid_tiles(lines: int, width: int, item: int) -> int:
    t = TILE[item]
    return max(1, cdiv(lines, t) * cdiv(width, t))


def vector_ok(ptr: int, stride: int, item: int) -> bool:
    """Whether ``gather_kernel``'s 16-byte accesses may read this source: the base and every
    line along its contiguous dimension 16-byte aligned (``stride``: elements between lines)."""
    return item in _WORD and ptr % 16 == 0 and (stride * item) % 16 == 0


@kernel_factory
def gather_kernel(trans: bool, item: int, vec: bool = False):
    """dst[i, j] = src[i * s_i + j * s_j] for elements of ``item`` bytes (1: fp8, 4: fp32 read as
    tf32; i < lines, j < width; dst rows ``ld_dst`` apart): a copy of an operand wgmma reads
    k-major only into rows of K, transposing it where its K is not the contiguous dimension
    (``trans``: the source is contiguous along i, ``s_i`` == 1). Each block moves a TILE x TILE
    tile through shared memory, read along the source's contiguous dimension and written along
    dst's rows: both coalesced. ``vec`` (transposing sources ``vector_ok`` allows): whole tiles
    move 16 bytes an access (``_vector_tile``). (A copy that does not transpose is one of rows
    TMA cannot read, which are not 16-byte aligned either.)"""
    T, W = TILE[item], _WORD[item]
    TP, GROUPS = T + 1, THREADS // T                  # TP: rows padded, columns in distinct banks
    if vec and not trans:
        raise ValueError("16-byte accesses move the elements of a transposing copy only")
    vector_tile = _vector_tile(item)

    def gather(src, dst, lines, width, s_i, s_j, ld_dst):
        tile = cuda.shared.array((T, TP), W)
        tiles_j = (width + T - 1) // T
        bi = cuda.blockIdx.x // tiles_j
        i0 = int64(bi) * T
        j0 = int64(cuda.blockIdx.x - bi * tiles_j) * T
        tid = cuda.threadIdx.x
        if vec and i0 + T <= lines and j0 + T <= width:
            vector_tile(tile, src, dst, i0, j0, s_j, ld_dst)
            return
        fast = tid & (T - 1)
        g = tid // T
        s = device_array(src, ((lines - 1) * s_i + (width - 1) * s_j + 1,), (item,), W)     # (byte strides)
        d = device_array(dst, (lines * ld_dst,), (item,), W)
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


def gather_kernels(item: int) -> list:
    """Every copy of ``item``-byte elements a planner can pick (ahead-of-time compiles)."""
    return [gather_kernel(t, item, v) for t, v in ((False, False), (True, False), (True, True))]


def _vector_tile(item: int):
    """The device function moving one whole TILE x TILE tile of a transposing copy 16 bytes an
    access: E elements of a source line (contiguous along i) per load, E of a dst row per store.
    fp32 elements go through shared memory as they are. fp8 ones as 32-bit words: a thread loads
    16 bytes of each of 4 lines, transposes the 4 x 4 blocks of bytes in registers (``prmt``) and
    stores words holding one element of the 4 lines; a dst row's 16 bytes are then 4 words."""
    T = TILE[item]
    E = 16 // item                      # elements in 16 bytes
    Q = T // E                          # 16-byte pieces of a tile row
    PIECES = T * Q // THREADS           # pieces a thread moves each way
    STEP = THREADS // Q                 # tile rows between a thread's pieces

    @device
    def vector_f32(tile, src, dst, i0, j0, s_j, ld_dst):
        tid = cuda.threadIdx.x
        q = tid % Q
        v = cuda.local.array(4, float32)
        for p in range(PIECES):
            r = tid // Q + p * STEP
            ldg_f32x4(ptr(v), f32_ptr(src), (i0 + 4 * q) + (j0 + r) * s_j)    # 4 of i (contiguous) at j0 + r
            for e in range(4):
                tile[r, 4 * q + e] = v[e]
        cuda.syncthreads()
        for p in range(PIECES):
            r = tid // Q + p * STEP
            for e in range(4):
                v[e] = tile[4 * q + e, r]
            stg_f32x4(f32_ptr(dst), (i0 + r) * ld_dst + j0 + 4 * q, ptr(v))

    TW = T // 4 + 1                     # fp8: words in a row of the word tile (odd)
    if item == 1 and THREADS != (T // 4) * Q:
        raise ValueError("the fp8 tile's threads: one per 4 lines x 16 bytes")

    @device
    def vector_u8(tile, src, dst, i0, j0, s_j, ld_dst):
        # (``tile``, the element-wise path's bytes, is not used: words go through a tile of their own)
        words = cuda.shared.array((T, TW), uint32)      # [i][g ^ swz(i)]: element i of lines 4 g .. 4 g + 3
        tid = cuda.threadIdx.x
        q = tid % Q                                     # 16 elements of i: 16 q ..
        g = tid // Q                                    # of lines 4 g .. 4 g + 3 (a warp's load: 4 whole 128-byte rows)
        swz = 4 * (q >> 1)                              # (rows 32 apart in distinct banks: the column's bits 2-3 flipped)
        w = cuda.local.array(16, uint32)
        for p in range(4):
            ldg_v4u32(ptr(w), 4 * p, src + (i0 + 16 * q) + (j0 + 4 * g + p) * s_j)
        for h in range(4):                              # a 4 x 4 block of bytes transposed: 8 picks
            lo01 = prmt(w[h], w[4 + h], 0x5140)
            hi01 = prmt(w[h], w[4 + h], 0x7362)
            lo23 = prmt(w[8 + h], w[12 + h], 0x5140)
            hi23 = prmt(w[8 + h], w[12 + h], 0x7362)
            i = 16 * q + 4 * h
            words[i, g ^ swz] = prmt(lo01, lo23, 0x5410)
            words[i + 1, g ^ swz] = prmt(lo01, lo23, 0x7632)
            words[i + 2, g ^ swz] = prmt(hi01, hi23, 0x5410)
            words[i + 3, g ^ swz] = prmt(hi01, hi23, 0x7632)
        cuda.syncthreads()
        c = tid % Q
        for p in range(PIECES):
            r = tid // Q + p * STEP
            for e in range(4):
                w[e] = words[r, (4 * c + e) ^ (4 * (r >> 5))]
            stg_v4u32(dst + (i0 + r) * ld_dst + j0 + 16 * c, ptr(w), 0)

    return vector_f32 if item == 4 else vector_u8
