"""One launch of a variant, for Nsight Compute or compute-sanitizer:
    ncu --clock-control none -k regex:tiled -c 1 python benchmarks/profile_one.py warptile 4096
    python benchmarks/profile_one.py pipelined 8192 bfloat16 [NN|NT|TN|TT] [M N K]
The name "cublas" launches torch.matmul (cuBLAS) on the same inputs instead. A variant and cuBLAS
under the same sections (clocks left alone), as the ncu_*_vs_cublas logs in NOTES were made:
    for who in hopper cublas; do ncu --clock-control none -k 'regex:gemm|tiled|nvjet|xmma|cutlass' -c 1 \
        --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats \
        --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats \
        python benchmarks/profile_one.py $who 4096 bfloat16; done
"""
import sys

import torch

import numba_tc

name, n = sys.argv[1], int(sys.argv[2])
dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
layout = sys.argv[4] if len(sys.argv) > 4 else "NN"
m, n, k = (int(x) for x in sys.argv[5:8]) if len(sys.argv) > 7 else (n, n, n)
tdt = getattr(torch, "float32" if dtype == "tf32" else dtype)
a = torch.randn(k, m, device="cuda", dtype=tdt).T if layout[0] == "T" else torch.randn(m, k, device="cuda", dtype=tdt)
b = torch.randn(n, k, device="cuda", dtype=tdt).T if layout[1] == "T" else torch.randn(k, n, device="cuda", dtype=tdt)
c = torch.empty(m, n, device="cuda", dtype=tdt)
if name == "cublas":
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch.matmul(a, b, out=c)
else:
    numba_tc.gemm(a, b, variant=name, out=c)
torch.cuda.synchronize()
