"""fp8 configurations A/B: ``hopper``'s choice, promoted tiles and (per-tensor) a tile unpromoted
(wgmma's own accumulation: faster, less accurate), against ``torch._scaled_mm`` with and without
its fast accumulation, bf16 out, interleaved on the same inputs; rel_err against float64 (into
NaN-poisoned outputs) at each shape. ``--block``: block-wise scales (a by 1x128, b by 128x128,
``numba_tc.fp8.quantize``) against ``_scaled_mm``'s block-wise path, and its per-tensor path on
per-tensor scales of the same matrices (issue 20's reference). ``--kernels``: the kernels
``_scaled_mm`` runs (torch.profiler), their tile in the name.

``--fp32 M,N,K``: first, each per-tensor candidate's rel_err with fp32 out at that shape, beside
``_scaled_mm``'s (bf16 out rounds away the accumulation's error; fp32 out shows it); ``--err-dtype
float16``: with that output instead. A kernel into fp32 or fp16 adds every slice whatever its
``promote_every`` (``hopper.promotion._promoted_mainloop``).

    python benchmarks/ab_fp8.py [--shapes 4096,4096,4096 8192,8192,8192] [--block] [--also SPEC ..] [--kernels]
                                [--fp32 M,N,K [--err-dtype float16]]
"""
from __future__ import annotations

import argparse

import torch

import numba_tc
from numba_tc import bench, hopper

from features import quantize8, _rel


def candidates(block: bool, also=()):
    """{name: variant}: ``hopper`` and fixed tiles; ``also``: more, each "key=value,..." of
    ``hopper.RUNG7.replace`` (e.g. "bn=192,promote=1,max_stages=5,epi_boxes=1"; a pair as
    "regs=40/152")."""
    r7 = hopper.RUNG7
    cands = {"hopper": "hopper"}
    tiles = [("128x192 promoted", r7.replace(bn=192, promote=True)),
             ("128x256 promoted (halves)", r7.replace(promote=True))]
    if not block:
        tiles.append(("128x256 unpromoted", r7))
    for spec in also:
        kw = {k: tuple(map(int, v.split("/"))) if "/" in v else int(v) for k, v in (kv.split("=") for kv in spec.split(","))}
        tiles.append((spec, r7.replace(**kw)))
    for name, cfg in tiles:
        cands[name] = numba_tc.variant_from(cfg, "ab" + str(len(cands)), splits=1)
    return cands


def inputs(m, n, k, block: bool):
    """(a, b, scale_a, scale_b, float64 product, references {name: fn}, their rel_err)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x, y = torch.randn(m, k, device="cuda", generator=g), torch.randn(n, k, device="cuda", generator=g)
    a1, s1 = quantize8(x)
    w1, s2 = quantize8(y)
    want1 = (a1.double() * s1.double()) @ (w1.t().double() * s2.double())
    refs = {}
    for fast in (False, True):
        refs["torch._scaled_mm per-tensor" + (" fast_accum" if fast else "")] = (
            lambda fast=fast: torch._scaled_mm(a1, w1.t(), scale_a=s1, scale_b=s2, out_dtype=torch.bfloat16,
                                               use_fast_accum=fast), want1)
    if not block:
        return a1, w1.t(), s1, s2, want1, refs
    a, sa = numba_tc.fp8.quantize(x, "e4m3", block=(1, 128))
    w, sw = numba_tc.fp8.quantize(y, "e4m3", block=(128, 128))
    b, sb = w.t(), sw.t()
    da = a.double() * sa.double().repeat_interleave(128, 1)[:, :k]
    db = b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    want = da @ db
    refs = {"torch._scaled_mm block-wise": (lambda: torch._scaled_mm(
        a, b, scale_a=sa.t().contiguous().t(), scale_b=sb, out_dtype=torch.bfloat16), want),
        "torch._scaled_mm per-tensor": refs["torch._scaled_mm per-tensor"]}
    return a, b, sa, sb, want, refs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=["4096,4096,4096", "8192,8192,8192"])
    p.add_argument("--block", action="store_true", help="block-wise scales")
    p.add_argument("--also", nargs="*", default=[], help='more tiles: "key=value,..." of RUNG7.replace')
    p.add_argument("--kernels", action="store_true", help="print the kernels _scaled_mm runs, and stop")
    p.add_argument("--fp32", help="M,N,K: rel_err with fp32 out first, per-tensor")
    p.add_argument("--err-dtype", default="float32", help="--fp32's output type (float32, float16)")
    args = p.parse_args()
    if args.kernels:
        return kernels(args.shapes)
    cands = candidates(args.block, args.also)
    if args.fp32:
        out_errors(cands, *map(int, args.fp32.split(",")), getattr(torch, args.err_dtype))
    for shape in args.shapes:
        m, n, k = map(int, shape.split(","))
        a, b, sa, sb, want, refs = inputs(m, n, k, args.block)
        fns, errs, names = [], [], []
        for name, v in cands.items():
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
            if name == "hopper":
                name += " (" + numba_tc.explain(a, b, out=out, scale_a=sa, scale_b=sb) + ")"
            names.append(name)
            errs.append(_rel(out, want))
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out))
        for name, (fn, w) in refs.items():
            names.append(name)
            errs.append(_rel(fn(), w))
            fns.append(fn)
        ms = bench.time_interleaved(fns)
        ref = ms[names.index("torch._scaled_mm per-tensor")]
        for nm, t, e in zip(names, ms, errs):
            print(f"{m}x{n}x{k} {nm[:60]:<60} {2 * m * n * k / t / 1e9:7.0f} TFLOP/s  x{ref / t:.3f} of "
                  f"_scaled_mm per-tensor  rel_err {e:.2e}", flush=True)


def out_errors(cands, m, n, k, dtype=torch.float32):
    """rel_err of each candidate and of ``_scaled_mm`` (with and without its fast accumulation)
    with ``dtype`` out, per-tensor scales, at m x n x k."""
    a, b, sa, sb, want, _ = inputs(m, n, k, False)
    tag = {torch.float32: "fp32", torch.float16: "fp16"}[dtype]
    for name, v in cands.items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
        print(f"{m}x{n}x{k} {tag} out {name[:60]:<60} rel_err {_rel(out, want):.3e}", flush=True)
    for fast in (False, True):
        out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=dtype, use_fast_accum=fast)
        print(f"{m}x{n}x{k} {tag} out torch._scaled_mm{' fast_accum' if fast else '':<45} rel_err "
              f"{_rel(out, want):.3e}", flush=True)


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
