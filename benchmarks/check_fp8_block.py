"""Block-scaled fp8 launches for compute-sanitizer: ragged M, N and K (a partial last K block),
a K sliced to whole blocks (strided scales), and a split-K one (128x256x16384); then every
promoted tile ``hopper`` can pick, forced, per-tensor and block-wise, whole and split-K, on a
ragged shape (the 256-wide tile's halves: N = 777 leaves its last tile's right half past C's edge);
then per-tensor products in every layout, through the transposing copy (whole tiles 16 bytes an
access, edge tiles and unaligned sources element-wise).

    compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/check_fp8_block.py
"""
import torch

import numba_tc
from numba_tc import hopper

a, sa = numba_tc.fp8.quantize(torch.randn(300, 1000, device="cuda"), "e4m3", block=(1, 128))
w, sw = numba_tc.fp8.quantize(torch.randn(520, 1000, device="cuda"), "e4m3", block=(128, 128))
numba_tc.gemm(a, w.t(), scale_a=sa, scale_b=sw.t(), out_dtype="float32")
numba_tc.gemm(a[:, :896], w.t()[:896], scale_a=sa[:, :7], scale_b=sw.t()[:7], out_dtype="float32")
a2, s2 = numba_tc.fp8.quantize(torch.randn(128, 16384, device="cuda"), "e4m3", block=(1, 128))
w2, t2 = numba_tc.fp8.quantize(torch.randn(256, 16384, device="cuda"), "e4m3", block=(128, 128))
numba_tc.gemm(a2, w2.t(), scale_a=s2, scale_b=t2.t())
a3, s3 = numba_tc.fp8.quantize(torch.randn(1000, 1000, device="cuda"), "e4m3", block=(1, 128))
w3, t3 = numba_tc.fp8.quantize(torch.randn(777, 1000, device="cuda"), "e4m3", block=(128, 128))
a4, s4 = numba_tc.fp8.quantize(torch.randn(1000, 1000, device="cuda"), "e4m3")
w4, t4 = numba_tc.fp8.quantize(torch.randn(777, 1000, device="cuda"), "e4m3")
for i, cfg in enumerate(hopper.FP8_CONFIGS):
    for splits in (1, 3):
        v = numba_tc.variant_from(cfg, f"sanitize{i}_{splits}", splits=splits)
        numba_tc.gemm(a3, w3.t(), v, scale_a=s3, scale_b=t3.t())
        numba_tc.gemm(a4, w4.t(), v, scale_a=s4, scale_b=t4, out_dtype="float32")
for m, n, k in ((1000, 777, 1000), (256, 512, 1024), (37, 300, 4100), (128, 200, 136)):
    for ta in (False, True):
        for tb in (False, True):
            x, sx = numba_tc.fp8.quantize(torch.randn(k, m, device="cuda") if ta else torch.randn(m, k, device="cuda"), "e4m3")
            y, sy = numba_tc.fp8.quantize(torch.randn(n, k, device="cuda") if tb else torch.randn(k, n, device="cuda"), "e4m3")
            numba_tc.gemm(x.t() if ta else x, y.t() if tb else y, scale_a=sx, scale_b=sy)
torch.cuda.synchronize()
print("ok")
