"""fp8 configurations A/B: ``hopper``'s choice, promoted tiles with one or two slice buffers, and
an unpromoted wider one (wgmma's own accumulation: faster, less accurate) and ``torch._scaled_mm`` with and without
its fast accumulation, interleaved on the same inputs; rel_err against float64 at each shape.

    python benchmarks/ab_fp8.py [--shapes 4096,4096,4096 8192,8192,8192]
"""
from __future__ import annotations

import argparse

import torch

import numba_tc
from numba_tc import bench, hopper

from features import quantize8, _rel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["4096,4096,4096", "8192,8192,8192", "1024,1024,16384"])
    args = p.parse_args()
    r7 = hopper.RUNG7
    cands = {"hopper": "hopper",
             "128x128 promote 2": numba_tc.variant_from(r7.replace(bn=128, max_stages=6, promote=2), "f1", splits=1),
             "128x192 promote 1": numba_tc.variant_from(r7.replace(bn=192, promote=1), "f2", splits=1),
             "128x128 promote 1": numba_tc.variant_from(r7.replace(bn=128, max_stages=6, promote=1), "f3", splits=1),
             "128x256 unpromoted": numba_tc.variant_from(r7, "f4", splits=1)}
    for shape in args.shapes:
        m, n, k = map(int, shape.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        a, sa = quantize8(torch.randn(m, k, device="cuda", generator=g))
        w, sb = quantize8(torch.randn(n, k, device="cuda", generator=g))
        b = w.t()
        want = (a.double() * sa.double()) @ (b.double() * sb.double())
        fns, errs = [], []
        for name, v in cands.items():
            out = torch.empty(m, n, device="cuda", dtype=torch.float32)
            numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
            errs.append(_rel(out, want))
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out))
        for fast in (False, True):
            errs.append(_rel(torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float32,
                                              use_fast_accum=fast), want))
            fns.append(lambda fast=fast: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                           use_fast_accum=fast))
        ms = bench.time_interleaved(fns)
        names = list(cands) + ["torch._scaled_mm", "torch._scaled_mm fast_accum"]
        for nm, t, e in zip(names, ms, errs):
            print(f"{m}x{n}x{k} {nm:<28} {2 * m * n * k / t / 1e9:7.0f} TFLOP/s  x{ms[-2] / t:.3f} of _scaled_mm  "
                  f"rel_err(fp32 out) {e:.2e}", flush=True)


if __name__ == "__main__":
    main()
