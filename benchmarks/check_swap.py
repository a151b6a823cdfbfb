"""Swapped decode launches (C^T = B^T A^T on 64 x bn tiles, ``hopper.Policy.swap``) for compute-sanitizer:
each narrow tile, whole and split along K, a linear layer's weight (B k-major) and a row-major B,
ragged N, a bias and an activation; each checked against float64.

    compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/check_swap.py
    compute-sanitizer --tool racecheck --racecheck-report hazard --report-api-errors no python benchmarks/check_swap.py
"""
import torch

import numba_tc

for m, n, k in ((3, 1000, 4000), (8, 4104, 2048), (13, 2056, 1024), (32, 1032, 4096), (24, 264, 8192)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for b in (w.t(), w.t().contiguous()):
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        plan = numba_tc.explain(a, b)
        c = numba_tc.gemm(a, b, bias=bias, activation="gelu")
        ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
        err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
        print(f"{m}x{n}x{k} B {'k' if b.stride(0) == 1 else 'n'}-major: {plan}: rel_err {err:.2e}", flush=True)
        assert err < 1e-2, (plan, err)
