"""Each launch of a plan timed on the GPU (torch.profiler's CUDA activity), beside the plan's
whole call and cuBLAS's kernels on the same inputs: where a multi-launch plan (an operand copied
first, a split-K fix-up after) spends its time.

    python benchmarks/kernel_times.py 2056x4104x3000 3000x3000x3000 [--dtype bfloat16] [--variant auto]
"""
import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import numba_tc

REPS = 20


def kernel_us(fn):
    """{"launch i: kernel name": mean microseconds} over REPS calls of ``fn``: the i-th GPU
    activity of each call (a plan's launches all carry one kernel name)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            fn()
        torch.cuda.synchronize()
    gpu = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                 key=lambda e: e.time_range.start)
    per = max(1, len(gpu) // REPS)
    total = defaultdict(float)
    for i, e in enumerate(gpu):
        total[f"launch {i % per}: {e.name}"] += e.device_time / REPS      # microseconds
    return dict(total)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="+")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--variant", default="auto")
    args = p.parse_args()
    dt = getattr(torch, args.dtype)
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
        out, ref = torch.empty(m, n, device="cuda", dtype=dt), torch.empty(m, n, device="cuda", dtype=dt)
        print(f"{s}: {numba_tc.explain(a, b, args.variant, out=out)}", flush=True)
        for who, fn in (("numba_tc", lambda: numba_tc.gemm(a, b, args.variant, out=out)),
                        ("cuBLAS", lambda: torch.matmul(a, b, out=ref))):
            times = kernel_us(fn)
            for name, us in times.items():
                print(f"  {who:>8} {us:8.1f} us  {name[:110]}")
            print(f"  {who:>8} {sum(times.values()):8.1f} us  (kernels, summed)", flush=True)


if __name__ == "__main__":
    main()
