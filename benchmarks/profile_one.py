"""One launch of a variant, for Nsight Compute:
    ncu --clock-control none -k regex:tiled -c 1 python benchmarks/profile_one.py warptile 4096"""
import sys

import torch

import numba_tc

name, n = sys.argv[1], int(sys.argv[2])
a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
c = torch.empty(n, n, device="cuda")
numba_tc.gemm(a, b, variant=name, out=c)
torch.cuda.synchronize()
