"""One e4m3 product with per-tensor scales (bf16 out, A row-major, B a column-major view), for
Nsight Compute or compute-sanitizer:
    ncu --clock-control none -k regex:gemm -c 1 python benchmarks/profile_fp8.py SPEC M N K
SPEC: "scaled_mm" (torch._scaled_mm, cuBLASLt), "hopper" (``auto``'s choice) or a tile as
"key=value,..." of ``hopper.RUNG7.replace`` (``ab_fp8.py --also``'s form)."""
import sys

import torch

import numba_tc
from numba_tc import hopper

from features import quantize8

spec = sys.argv[1]
m, n, k = (int(x) for x in sys.argv[2:5])
a, sa = quantize8(torch.randn(m, k, device="cuda"))
w, sb = quantize8(torch.randn(n, k, device="cuda"))
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
if spec == "scaled_mm":
    torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
else:
    v = spec
    if spec != "hopper":
        kw = {kk: tuple(map(int, vv.split("/"))) if "/" in vv else int(vv)
              for kk, vv in (kv.split("=") for kv in spec.split(","))}
        v = numba_tc.variant_from(hopper.RUNG7.replace(**kw), "profiled", splits=1)
    numba_tc.gemm(a, w.t(), v, scale_a=sa, scale_b=sb, out=c)
torch.cuda.synchronize()
