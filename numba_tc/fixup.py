"""The split-K fix-up: the partial sums that a split-K kernel wrote to scratch, one fp32 plane
per K range, added in a fixed order (range 0 first, whoever finished first), then the epilogue,
then C in its output type.

Why a pass of its own: the epilogue must see the whole sum (an activation of a partial sum is
not the partial of an activation), and a fixed order makes a result bitwise the same run to run,
which atomic adds into C would not. The planes are ``M x ldw`` fp32 (``ldw``: N rounded up to
the 16-byte loads here), ``M * ldw`` floats apart.
"""
from __future__ import annotations

from numba import cuda, int64

from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT
from .intrinsics import f32_ptr, load_f32x4
from .jit import kernel, kernel_factory
from .layout import ITEMSIZE
from .primitives import grid_dep_wait, stg_out1
from .schedule import cdiv

__all__ = ["fixup_kernel", "THREADS", "VEC", "plane_ld", "grid", "PARAMS"]

THREADS = 256
VEC = 4                               # columns per thread: one 16-byte load per plane
PARAMS = ("i64",) * 7                 # W, C, M, N, ldw, ldc, splits


def plane_ld(n: int) -> int:
    """The row pitch (floats) of a partial-sum plane of N columns."""
    return cdiv(max(n, 1), VEC) * VEC


def grid(m: int, n: int) -> int:
    return max(1, cdiv(m * (plane_ld(n) // VEC), THREADS))


@kernel_factory
def fixup_kernel(out_dtype: str, epi=PLAIN):
    """C = epilogue(sum of the ``splits`` planes at W) in ``out_dtype``, row-major (``ldc``)."""
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
    EPI = make_epilogue(epi)

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
        x0, x1, x2, x3 = load_f32x4(w, at)
        for s in range(1, splits):                 # in order: the same sum every run
            y0, y1, y2, y3 = load_f32x4(w, at + s * plane)
            x0 += y0
            x1 += y1
            x2 += y2
            x3 += y3
        out = C + (row * ldc + col) * OUT_ITEM
        stg_out1(out, EPI(x0, row, col, ep), OUT_K)
        if col + 1 < N:
            stg_out1(out + OUT_ITEM, EPI(x1, row, col + 1, ep), OUT_K)
        if col + 2 < N:
            stg_out1(out + 2 * OUT_ITEM, EPI(x2, row, col + 2, ep), OUT_K)
        if col + 3 < N:
            stg_out1(out + 3 * OUT_ITEM, EPI(x3, row, col + 3, ep), OUT_K)

    return kernel(fixup, PARAMS, values=len(epi.slots()))
