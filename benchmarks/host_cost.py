"""Host-side cost of one ``numba_tc.gemm`` call (Python: argument checks, dispatch, tensor maps,
launch) on torch tensors too small for the GPU to matter, with the top functions by cProfile:
    python benchmarks/host_cost.py [variant ...]"""
import cProfile
import pstats
import sys
import time

import torch

import numba_tc


def per_call_us(fn, n=300):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    variants = sys.argv[1:] or ["hopper", "mma_tuned", "warptile"]
    for v in variants:
        dt = torch.float32 if v == "warptile" else torch.bfloat16
        a, b = (torch.randn(128, 128, device="cuda", dtype=dt) for _ in range(2))
        c = torch.empty(128, 128, device="cuda", dtype=dt)
        print(f"{v}: {per_call_us(lambda: numba_tc.gemm(a, b, variant=v, out=c)):.1f} us per call; "
              f"torch.matmul {per_call_us(lambda: torch.matmul(a, b, out=c)):.1f} us", flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            numba_tc.gemm(a, b, variant=v, out=c)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
