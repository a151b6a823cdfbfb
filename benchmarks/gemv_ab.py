"""The few-rows rung against the Hopper ladder and cuBLAS at decode shapes, B cold (rotated among
copies that together exceed the L2 cache, as a model's weights are), both B layouts, one row:
which one ``auto`` should take. Interleaved; the median of each.

    python benchmarks/gemv_ab.py
"""
import sys

import torch

import numba_tc
from numba_tc import bench

SHAPES = [(1, 2304, 768), (1, 768, 768), (1, 3072, 768), (1, 768, 3072), (1, 4096, 4096), (1, 8192, 8192),
          (1, 11008, 4096), (1, 4096, 11008), (4, 2304, 768), (8, 3072, 768)]


def main():
    for m, n, k in SHAPES:
        for kmajor in (False, True):
            copies = max(4, int(160e6 // (2 * n * k)))            # B's copies: > 3x the 50 MB L2
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            bs = [(torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if kmajor else
                   torch.randn(k, n, device="cuda", dtype=torch.bfloat16)) for _ in range(copies)]
            outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
            ref = a.double() @ bs[0].double()
            errs = []
            for v, o in (("gemv", outs[0]), ("hopper", outs[1])):
                numba_tc.gemm(a, bs[0], v, out=o)
                errs.append(float((o.double() - ref).norm() / ref.norm()))
            # each side: one CUDA graph of a product with every copy of B (GPU time, not launches)
            sides = [lambda b: numba_tc.gemm(a, b, "gemv", out=outs[0]),
                     lambda b: numba_tc.gemm(a, b, "hopper", out=outs[1]),
                     lambda b: torch.matmul(a, b, out=outs[2])]
            graphs = []
            s = torch.cuda.Stream()
            for f in sides:
                with torch.cuda.stream(s):
                    f(bs[0])
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=s):
                    for b in bs:
                        f(b)
                graphs.append(g)
            ms = [t / copies for t in bench.time_interleaved([g.replay for g in graphs], budget_s=0.9, reps=3)]
            moved = 2 * (m * k + k * n + m * n)
            print(f"{m}x{n}x{k} B {'k' if kmajor else 'n'}-major: gemv {ms[0]*1e3:6.1f} us "
                  f"({moved/ms[0]/1e9:4.2f} TB/s), hopper {ms[1]*1e3:6.1f}, cuBLAS {ms[2]*1e3:6.1f} "
                  f"({moved/ms[2]/1e9:4.2f} TB/s); cuBLAS/gemv {ms[2]/ms[0]:.3f}, cuBLAS/hopper {ms[2]/ms[1]:.3f}; "
                  f"err {errs[0]:.1e} {errs[1]:.1e}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
