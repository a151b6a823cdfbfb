"""fp8 at its power limit: each candidate run back to back for a few seconds while nvidia-smi
samples the SM clock and the board power; prints TFLOP/s, the median clock, the power, and
TFLOP/s per GHz (the work a cycle does, which a lower clock does not change). Session 34's
question: does promotion cost cycles, or clock (energy)?

    python benchmarks/power_fp8.py [--size 8192] [--seconds 3] [--also SPEC ..]

The inputs and candidates are ``ab_fp8.py``'s (per-tensor): ``_scaled_mm`` with and without its
fast accumulation, ``hopper``'s choice and its fixed tiles, and ``--also``.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import torch

import numba_tc

from ab_fp8 import candidates, inputs


def sample_run(fn, seconds):
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    n, t0 = 0, time.perf_counter()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn()
        n += 20
        torch.cuda.synchronize()
    e1.record()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [list(map(float, line.split(","))) for line in smi.stdout.read().strip().splitlines() if line.count(",") == 2]
    rows = rows[len(rows) // 4:]                      # past the ramp
    return e0.elapsed_time(e1) / n, statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), \
        statistics.median(r[2] for r in rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--also", nargs="*", default=["bn=192"], help='more tiles, as ab_fp8.py\'s (default: 128x192 '
                                                                  'unpromoted)')
    args = p.parse_args()
    m = n = k = args.size
    a, b, sa, sb, _, refs = inputs(m, n, k, False)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    cands = {name: fn for name, (fn, _) in refs.items()}
    for name, v in candidates(False, args.also).items():
        cands[name] = lambda v=v: numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
    for fn in cands.values():
        fn()
    torch.cuda.synchronize()
    for name in list(cands) + list(reversed(cands)):
        ms, clk, pw, temp = sample_run(cands[name], args.seconds)
        tf = 2 * m * n * k / ms / 1e9
        print(f"{m}x{n}x{k} {name[:40]:<40} {tf:6.0f} TFLOP/s  SM {clk:5.0f} MHz  {pw:5.0f} W  {temp:3.0f} C  "
              f"{tf / clk * 1000:6.1f} TFLOP/s per GHz", flush=True)


if __name__ == "__main__":
    main()
