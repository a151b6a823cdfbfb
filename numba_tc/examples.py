"""Small kernels that use the tensor-core primitives directly, as a user's own ``@cuda.jit`` would
(shown in the README; compiled in CI, run on the GPU by the tests)."""
from numba import cuda, float32, uint32

from . import layout
from .intrinsics import ptr
from .primitives import ldsm_x2, ldsm_x4, mma_f16_m16n8k16, smem_addr

__all__ = ["mma_16x8x16"]


@cuda.jit
def mma_16x8x16(a, bt, c):
    """One warp: c (16x8 fp32, row-major) = a (16x16 fp16, row-major) @ b, where bt is b^T
    (8x16 fp16, row-major). a and bt arrive as uint32 words (two halves each)."""
    sa = cuda.shared.array(128, uint32)          # 16 rows x 32 bytes
    sb = cuda.shared.array(64, uint32)           # 8 rows x 32 bytes
    lane = cuda.threadIdx.x
    for i in range(lane, 128, 32):
        sa[i] = a[i]
    for i in range(lane, 64, 32):
        sb[i] = bt[i]
    cuda.syncwarp()
    fa = cuda.local.array(4, uint32)             # fragments and accumulators stay in registers
    fb = cuda.local.array(2, uint32)
    acc = cuda.local.array(4, float32)
    for i in range(4):
        acc[i] = float32(0)
    r, ch = layout.ldsm_a(lane, True)            # the row this lane hands to ldmatrix
    ldsm_x4(ptr(fa), 0, smem_addr(ptr(sa)) + r * 32 + ch * 16)
    r, ch = layout.ldsm_b(lane, True)            # lanes 0-15 address the two 8x8 matrices of x2
    ldsm_x2(ptr(fb), 0, smem_addr(ptr(sb)) + r * 32 + ch * 16)
    mma_f16_m16n8k16(ptr(acc), 0, ptr(fa), 0, ptr(fb), 0)
    for i in range(4):
        m, n = layout.c_fragment(lane, i)
        c[m * 8 + n] = acc[i]
