"""The transposing copies alone under racecheck (their shared-memory tile and its one barrier):
fp8 and tf32 operands in every layout, whole 16-byte tiles and element-wise edges, small shapes.

    compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/check_copy_races.py
"""
import torch

import numba_tc

for m, n, k in ((256, 512, 1024), (200, 300, 136)):
    for tb in (False, True):
        x, sx = numba_tc.fp8.quantize(torch.randn(m, k, device="cuda"), "e4m3")
        y, sy = numba_tc.fp8.quantize(torch.randn(n, k, device="cuda") if tb else torch.randn(k, n, device="cuda"), "e4m3")
        numba_tc.gemm(x, y.t() if tb else y, scale_a=sx, scale_b=sy)
        b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
        numba_tc.gemm(torch.randn(m, k, device="cuda"), b, allow_tf32=True)
torch.cuda.synchronize()
print("ok")
