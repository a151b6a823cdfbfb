"""Sustained throughput and clocks: a variant and cuBLAS, each run back to back for a few seconds
at a time (alternating), on the same inputs, while ``nvidia-smi`` samples the SM clock and power.
Shows whether the GPU sits at its power limit and what clock each kernel gets there.

    python benchmarks/probe_power.py hopper bfloat16 4096 [seconds] [rounds]
"""
import subprocess
import sys
import time

import torch

import numba_tc


def burst(fn, seconds):
    """Back-to-back launches for about ``seconds``; returns (launches, milliseconds)."""
    fn(); torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); fn(); e1.record(); e1.synchronize()
    n = max(1, int(seconds * 1e3 / e0.elapsed_time(e1)))
    e0.record()
    for _ in range(n):
        fn()
    e1.record(); e1.synchronize()
    return n, e0.elapsed_time(e1)


def main():
    variant, dtype, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    tdt = getattr(torch, dtype)
    a = torch.randn(size, size, device="cuda", dtype=tdt)
    b = torch.randn(size, size, device="cuda", dtype=tdt)
    c = torch.empty(size, size, device="cuda", dtype=tdt)
    fns = {variant: lambda: numba_tc.gemm(a, b, variant=variant, out=c),
           "cuBLAS": lambda: torch.matmul(a, b, out=c)}
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,"
                            "clocks_event_reasons.active", "--format=csv,noheader", "-lms", "200"],
                           stdout=subprocess.PIPE, text=True)
    t0 = time.time()
    spans = []
    for r in range(rounds):
        for name, fn in fns.items():
            s = time.time() - t0
            n, ms = burst(fn, seconds)
            spans.append((name, s, time.time() - t0, 2.0 * size ** 3 * n / ms / 1e9))
    time.sleep(0.3)
    smi.terminate()
    samples = []
    for line in smi.stdout.read().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            ts = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
            samples.append((ts - t0, float(parts[1].split()[0]), float(parts[2].split()[0]), parts[3], parts[4]))
        except (ValueError, IndexError):
            continue
    print(f"{'kernel':10} {'t0':>6} {'t1':>6} {'TFLOP/s':>8} {'MHz (median)':>12} {'W (median)':>10} reasons")
    for name, s, e, tf in spans:
        inside = [x for x in samples if s + 0.5 <= x[0] <= e]
        mhz = sorted(x[1] for x in inside)
        w = sorted(x[2] for x in inside)
        reasons = sorted({x[4] for x in inside})
        print(f"{name:10} {s:6.1f} {e:6.1f} {tf:8.1f} {mhz[len(mhz) // 2] if mhz else float('nan'):12.0f} "
              f"{w[len(w) // 2] if w else float('nan'):10.0f} {' '.join(reasons)}")


if __name__ == "__main__":
    main()
