"""The split-K fix-up: the partial sums that a split-K kernel wrote to scratch, one fp32 plane
per K range, added in a fixed order (range 0 first, whoever finished first), then the epilogue,
then C in its output type.

Why a pass of its own: the epilogue must see the whole sum (an activation of a partial sum is
not the partial of an activation), and a fixed order makes a result bitwise the same run to run,
which atomic adds into C would not. The planes are ``M x ldw`` fp32 (``ldw``: N rounded up to
the 16-byte loads here), ``M * ldw`` floats apart. A tail-split kernel (``hopper``'s ``tail``)
splits only the tiles of its last round, each split's partial sum a block of its own:
``tail_fixup_kernel`` adds those.
"""
from __future__ import annotations

from numba import cuda, int64

from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT
from .intrinsics import f32_ptr, load_f32x4
from .jit import device, kernel, kernel_factory
from .layout import ITEMSIZE
from .primitives import grid_dep_wait, stg_out1
from .schedule import cdiv, tile_origin

__all__ = ["fixup_kernel", "tail_fixup_kernel", "THREADS", "VEC", "plane_ld", "grid", "tail_grid", "PARAMS",
           "TAIL_PARAMS"]

THREADS = 256
VEC = 4                               # columns per thread: one 16-byte load per plane
PARAMS = ("i64",) * 7                 # W, C, M, N, ldw, ldc, splits
TAIL_PARAMS = ("i64",) * 9            # P, C, M, N, ldc, whole, rest, splits, grid_m (in cluster tiles)


def plane_ld(n: int) -> int:
    """The row pitch (floats) of a partial-sum plane of N columns."""
    return cdiv(max(n, 1), VEC) * VEC


def grid(m: int, n: int) -> int:
    return max(1, cdiv(m * (plane_ld(n) // VEC), THREADS))


def tail_grid(rest: int, tm: int, tn: int) -> int:
    """Blocks for ``rest`` split tiles of tm x tn."""
    return rest * cdiv(tm * tn // VEC, THREADS)


@device
def _sum_in_order(w, at, stride, splits):
    """The 4 floats at w + at summed over ``splits`` parts ``stride`` floats apart, part 0 first
    (in order: the same sum every run)."""
    x0, x1, x2, x3 = load_f32x4(w, at)
    for s in range(1, splits):
        y0, y1, y2, y3 = load_f32x4(w, at + s * stride)
        x0 += y0
        x1 += y1
        x2 += y2
        x3 += y3
    return x0, x1, x2, x3


def _store4(EPI, OUT_K, OUT_ITEM):
    """``store4(C, ldc, row, col, N, x0, x1, x2, x3, ep)``: columns col..col+3 of a row of C
    (those inside N) through the epilogue function EPI."""
    @device
    def store4(C, ldc, row, col, N, x0, x1, x2, x3, ep):
        out = C + (row * ldc + col) * OUT_ITEM
        stg_out1(out, EPI(x0, row, col, ep), OUT_K)
        if col + 1 < N:
            stg_out1(out + OUT_ITEM, EPI(x1, row, col + 1, ep), OUT_K)
        if col + 2 < N:
            stg_out1(out + 2 * OUT_ITEM, EPI(x2, row, col + 2, ep), OUT_K)
        if col + 3 < N:
            stg_out1(out + 3 * OUT_ITEM, EPI(x3, row, col + 3, ep), OUT_K)
    return store4


@kernel_factory
def fixup_kernel(out_dtype: str, epi=PLAIN):
    """C = epilogue(sum of the ``splits`` planes at W) in ``out_dtype``, row-major (``ldc``)."""
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
    store4 = _store4(make_epilogue(epi), OUT_K, OUT_ITEM)

    def fixup(W, C, M, N, ldw, ldc, splits, ep):
        grid_dep_wait()                     # launched as the split-K kernel's dependent: its planes done
        i = int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
        per_row = ldw // VEC
        row = i // per_row
        col = (i - row * per_row) * VEC
        if row >= M or col >= N:
            return
        w = f32_ptr(W)
        at = row * ldw + col
        plane = M * ldw
        x0, x1, x2, x3 = _sum_in_order(w, at, plane, splits)
        store4(C, ldc, row, col, N, x0, x1, x2, x3, ep)

    return kernel(fixup, PARAMS, values=len(epi.slots()))


@kernel_factory
def tail_fixup_kernel(out_dtype: str, TM: int, TN: int, GROUP: int, epi=PLAIN):
    """C = epilogue(sum of the ``splits`` partial sums) for each of the ``rest`` tiles after the
    first ``whole`` (of TM x TN, in ``schedule.tile_origin``'s order over ``grid_m`` x N / TN),
    split s of tile i a dense TM x TN fp32 block at P + (s * rest + i) * TM * TN * 4."""
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
    store4 = _store4(make_epilogue(epi), OUT_K, OUT_ITEM)
    PER_ROW = TN // VEC
    PER_TILE = cdiv(TM * PER_ROW, THREADS)

    def tail_fixup(P, C, M, N, ldc, whole, rest, splits, grid_m, ep):
        grid_dep_wait()                     # launched as the kernel's dependent: its blocks done
        tile = cuda.blockIdx.x // PER_TILE
        e = (cuda.blockIdx.x - tile * PER_TILE) * THREADS + cuda.threadIdx.x
        r = e // PER_ROW
        c = (e - r * PER_ROW) * VEC
        r0, c0 = tile_origin(whole + tile, grid_m, (N + TN - 1) // TN, GROUP, TM, TN)
        row = r0 + r
        col = c0 + c
        if r >= TM or row >= M or col >= N:
            return
        w = f32_ptr(P)
        at = int64(tile) * (TM * TN) + r * TN + c
        block = int64(rest) * (TM * TN)
        x0, x1, x2, x3 = _sum_in_order(w, at, block, splits)
        store4(C, ldc, row, col, N, x0, x1, x2, x3, ep)

    return kernel(tail_fixup, TAIL_PARAMS, values=len(epi.slots()))
