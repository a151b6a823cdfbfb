"""fp8 configurations A/B: ``hopper``'s choice, promoted tiles and the same tiles unpromoted
(wgmma's own accumulation: faster, less accurate), and ``torch._scaled_mm`` with and without its
fast accumulation, interleaved on the same inputs; rel_err against float64 at each shape.
``--kernels``: the kernels ``_scaled_mm`` runs (torch.profiler), their tile in the name.

    python benchmarks/ab_fp8.py [--shapes 4096,4096,4096 8192,8192,8192] [--kernels]
"""
from __future__ import annotations

import argparse

import torch

import numba_tc
from numba_tc import bench, hopper

from features import quantize8, _rel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["4096,4096,4096", "8192,8192,8192"])
    p.add_argument("--kernels", action="store_true", help="print the kernels _scaled_mm runs, and stop")
    args = p.parse_args()
    if args.kernels:
        return kernels(args.shapes)
    r7 = hopper.RUNG7
    cands = {"hopper": "hopper"}
    for name, cfg in (("128x192 promoted", r7.replace(bn=192, promote=True)),
                      ("128x128 promoted", r7.replace(bn=128, max_stages=6, promote=True)),
                      ("128x192 unpromoted", r7.replace(bn=192)),
                      ("128x128 unpromoted", r7.replace(bn=128, max_stages=6)),
                      ("128x256 unpromoted", r7)):
        cands[name] = numba_tc.variant_from(cfg, "ab" + str(len(cands)), splits=1)
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


def kernels(shapes):
    """The kernel cuBLASLt runs for ``torch._scaled_mm`` at each shape (torch.profiler)."""
    for shape in shapes:
        m, n, k = map(int, shape.split(","))
        a, sa = quantize8(torch.randn(m, k, device="cuda"))
        w, sb = quantize8(torch.randn(n, k, device="cuda"))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            torch.cuda.synchronize()
        print(shape, sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}))


if __name__ == "__main__":
    main()
