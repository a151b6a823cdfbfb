"""The transposing copy that fp8 and tf32 operands wgmma cannot read as they lie go through, in a
product where it weighs most (few rows of A, a large row-major B: 1000x32000x4096 fp8,
1000x16000x4096 tf32). Prints each product's path and one timed call (ms); under Nsight Compute
the first kernel profiled is the fp8 copy, the fifth the tf32 one:

    ncu --clock-control none -k numba_tc_kernel -c 5 --section SpeedOfLight --section WarpStateStats \
        python benchmarks/probe_copy.py
"""
import torch

import numba_tc

for dt in ("fp8", "tf32"):
    if dt == "fp8":
        x, sx = numba_tc.fp8.quantize(torch.randn(1000, 4096, device="cuda"), "e4m3")
        y, sy = numba_tc.fp8.quantize(torch.randn(4096, 32000, device="cuda"), "e4m3")
        kw = dict(scale_a=sx, scale_b=sy)
    else:
        x, y = torch.randn(1000, 4096, device="cuda"), torch.randn(4096, 16000, device="cuda")
        kw = dict(allow_tf32=True)
    numba_tc.gemm(x, y, **kw)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    numba_tc.gemm(x, y, **kw)
    e.record()
    torch.cuda.synchronize()
    print(dt, numba_tc.explain(x, y, **kw), s.elapsed_time(e))
