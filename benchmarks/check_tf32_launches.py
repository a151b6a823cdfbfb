"""tf32 launches for compute-sanitizer: every layout (the transposing copy, whole and edge tiles,
16-byte and element-wise), ragged and unaligned rows (the copy of rows TMA cannot read), split-K
with its fix-up, a one-row A, an epilogue; an n-major B copied by the producer's cp.async (few
rows: whole and split-K, ragged, an odd pitch) on both of its tiles; A read through registers
(swapped NN and TT, whole and split-K, ragged) on 128x256 and 64x256 tiles.

    compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/check_tf32_launches.py
"""
import torch

import numba_tc
from numba_tc import hopper


def operand(rows, cols, trans):
    return torch.randn(cols, rows, device="cuda").t() if trans else torch.randn(rows, cols, device="cuda")


for m, n, k in ((328, 200, 264), (1000, 777, 1001), (64, 256, 8192), (1, 4096, 4096), (200, 130, 136)):
    for ta in (False, True):
        for tb in (False, True):
            numba_tc.gemm(operand(m, k, ta), operand(k, n, tb), allow_tf32=True)
for m, n, k in ((8, 4100, 640), (257, 132, 96), (300, 776, 1001)):
    for cfg in hopper.ASYNC_CONFIGS:
        for splits in (1, 3):
            v = numba_tc.variant_from(cfg, f"async_{cfg.bm}_{splits}", splits=splits)
            numba_tc.gemm(operand(m, k, False), operand(k, n, False), v, allow_tf32=True)
for m, n, k in ((300, 776, 1000), (520, 264, 96)):
    for cfg in (hopper.RUNG7, hopper.RUNG7.replace(bm=64, consumers=1)):
        for splits in (1, 3):
            v = numba_tc.variant_from(cfg, f"regs_a_{cfg.bm}_{splits}", splits=splits)
            for t in (False, True):
                numba_tc.gemm(operand(m, k, t), operand(k, n, t), v, allow_tf32=True)
a, b = operand(300, 500, False), operand(500, 260, False)
numba_tc.gemm(a, b, allow_tf32=True, bias=torch.randn(260, device="cuda"), activation="relu")
torch.cuda.synchronize()
print("ok")
