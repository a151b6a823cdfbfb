"""Fused epilogues against what a torch user would otherwise call, checked, then timed interleaved
on the same inputs (torch tensors through the public ``gemm``).

    python benchmarks/features.py --json benchmarks/results/features_h100.json

Records ``{"feature", "m", "n", "k", "batch", "dtype", "ours_tflops", "ref_tflops", "ratio", "ref",
"rel_err", "commit", "command"}``; ``custom_epilogue`` also has ``"overhead"`` = (time with the
epilogue / time of plain ``gemm``) - 1 and ``"residual"`` (the array's dtype).
  * bias_gelu: ``gemm(a, b, bias=, activation="gelu_tanh")`` against cuBLASLt's fused bias + GELU
    (``torch._addmm_activation(bias, a, b, use_gelu=True)``, the tanh form).
  * custom_epilogue: a scaled residual add, a user's device function reading a device array
    (``"residual"``: its dtype, float32 or the model's bfloat16), against the plain ``gemm`` of
    the same operands.
  * batched: ``gemm`` on 3-D operands against ``torch.bmm`` (attention-like: many batches, small
    K or N, the second operand as attention reads it; MoE-like: few large ones).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

import numpy as np
import torch
from numba import cuda

import numba_tc
from numba_tc import bench


@cuda.jit(device=True)
def scaled_residual(acc, row, col, res, scale):
    return acc + scale * res[row, col]


def _rel(x, ref) -> float:
    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


def residual_check(a, b, variant, out, res, scale=0.5):
    """``gemm(a, b) + scale * res`` into ``out`` by ``variant`` through the user epilogue
    ``scaled_residual``: (its plan, rel_err against float64). The GPU checks' one case."""
    kw = dict(epilogue=scaled_residual, epilogue_args=(res, scale))
    plan = numba_tc.explain(a, b, variant, out=out, **kw)
    numba_tc.gemm(a, b, variant, out=out, **kw)
    return plan, _rel(out, a.double() @ b.double() + scale * res.double())


def _tflops(m, n, k, ms) -> float:
    return 2.0 * m * n * k / ms / 1e9


def bias_gelu(m, n, k, dtype, batch=1):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    numba_tc.gemm(a, b, bias=bias, activation="gelu_tanh", out=out)
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
    err, ref_err = _rel(out, ref), _rel(torch._addmm_activation(bias, a, b, use_gelu=True), ref)
    ours, theirs = bench.time_interleaved([
        lambda: numba_tc.gemm(a, b, bias=bias, activation="gelu_tanh", out=out),
        lambda: torch._addmm_activation(bias, a, b, use_gelu=True)])
    return dict(feature="bias_gelu", ours_ms=ours, ref_ms=theirs, rel_err=err, ref_rel_err=ref_err,
                ref="torch._addmm_activation(bias, a, b, use_gelu=True) (cuBLASLt bias+GELU epilogue)")


def custom_epilogue(m, n, k, dtype, batch=1, residual="float32"):
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g) / k ** 0.5
    res = torch.randn(m, n, device="cuda", dtype=getattr(torch, residual), generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    _, err = residual_check(a, b, "auto", out, res)
    plain = torch.empty_like(out)
    ours, theirs = bench.time_interleaved([
        lambda: numba_tc.gemm(a, b, epilogue=scaled_residual, epilogue_args=(res, 0.5), out=out),
        lambda: numba_tc.gemm(a, b, out=plain)])
    return dict(feature="custom_epilogue", ours_ms=ours, ref_ms=theirs, rel_err=err, overhead=ours / theirs - 1,
                residual=residual,
                ref="numba_tc.gemm(a, b) (the plain product, same operands)")


def batched(m, n, k, dtype, batch=1):
    """(batch, m, k) @ (batch, k, n); with n > k (attention's scores, Q K^T) b is a transposed view,
    as K^T is."""
    g = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(batch, m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(batch, n, k, device="cuda", dtype=dtype, generator=g).transpose(1, 2) if n > k else \
        torch.randn(batch, k, n, device="cuda", dtype=dtype, generator=g)
    b = b / k ** 0.5
    out = torch.full((batch, m, n), float("nan"), device="cuda", dtype=dtype)
    numba_tc.gemm(a, b, out=out)
    want = torch.bmm(a.double(), b.double())
    ref = torch.empty_like(out)
    err, ref_err = _rel(out, want), _rel(torch.bmm(a, b, out=ref), want)
    ours, theirs = bench.time_interleaved([lambda: numba_tc.gemm(a, b, out=out), lambda: torch.bmm(a, b, out=ref)])
    return dict(feature="batched", ours_ms=ours, ref_ms=theirs, rel_err=err, ref_rel_err=ref_err, path=numba_tc.explain(a, b, out=out),
                ref="torch.bmm(a, b) (cuBLAS strided batched)" + (", b a transposed view" if n > k else ""))


def quantize8(x, dtype=torch.float8_e4m3fn):
    """(values, per-tensor scale) of x, as torch's own recipe: scale = amax / the format's max."""
    scale = (x.abs().amax().float() / torch.finfo(dtype).max).clamp(min=1e-12)
    return (x / scale).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype), scale.reshape(1)


def fp8(m, n, k, dtype, batch=1, layout="tn"):
    """e4m3 per-tensor scaled ``gemm(a, b, scale_a=, scale_b=)`` (bf16 out) against
    ``torch._scaled_mm`` (cuBLASLt) on the same inputs: a row-major, b a column-major view (a
    row-major weight's ``.T``), the layout both read as they are; ``layout="nn"``: b row-major,
    which numba_tc transposes first (counted) and torch cannot take (timed against the TN
    reference)."""
    g = torch.Generator(device="cuda").manual_seed(3)
    a, sa = quantize8(torch.randn(m, k, device="cuda", generator=g))
    w, sb = quantize8(torch.randn(n, k, device="cuda", generator=g))
    b = w.t()
    ours_b = b.contiguous() if layout == "nn" else b
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    numba_tc.gemm(a, ours_b, scale_a=sa, scale_b=sb, out=out)
    want = (a.double() * sa.double()) @ (b.double() * sb.double())
    ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    err, ref_err = _rel(out, want), _rel(ref, want)
    ours, theirs = bench.time_interleaved([
        lambda: numba_tc.gemm(a, ours_b, scale_a=sa, scale_b=sb, out=out),
        lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)])
    return dict(feature="fp8", scaling="tensor", layout=layout, ours_ms=ours, ref_ms=theirs, rel_err=err,
                ref_rel_err=ref_err, dtype="e4m3", path=numba_tc.explain(a, ours_b, out=out, scale_a=sa, scale_b=sb),
                ref="torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=bfloat16) (cuBLASLt, per-tensor, TN)")


def fp8_block(m, n, k, dtype, batch=1):
    """e4m3 with block-wise scales (a by 1x128, b by 128x128, quantized by ``numba_tc.fp8.quantize``),
    bf16 out, against ``torch._scaled_mm`` with the same block scales where the installed torch
    runs them on this GPU, else its per-tensor path on the same values (per-tensor scales of
    the same matrices: the issue's reference) - ``ref`` says which."""
    g = torch.Generator(device="cuda").manual_seed(4)
    x, y = torch.randn(m, k, device="cuda", generator=g), torch.randn(n, k, device="cuda", generator=g)
    a, sa = numba_tc.fp8.quantize(x, "e4m3", block=(1, 128))
    w, sw = numba_tc.fp8.quantize(y, "e4m3", block=(128, 128))
    b, sb = w.t(), sw.t()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out)
    da = a.double() * sa.double().repeat_interleave(128, 1)[:, :k]
    db = b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    want = da @ db
    ref, ref_err, what = None, None, None
    # scale_a outer-dim-major, as cuBLASLt's block-wise scaling asks
    fn = lambda: torch._scaled_mm(a, b, scale_a=sa.t().contiguous().t(), scale_b=sb,  # noqa: E731
                                  out_dtype=torch.bfloat16)
    try:
        ref_err, what = _rel(fn(), want), "torch._scaled_mm(a, b, block-wise 1x128 / 128x128 scales, bf16) (cuBLASLt)"
        ref = fn
    except Exception as e:
        print(f"  (torch._scaled_mm has no block-wise path here: {str(e).splitlines()[0][:100]}; per-tensor instead)")
    if ref is None:
        a1, s1 = quantize8(x)
        w1, s2 = quantize8(y)
        want1 = (a1.double() * s1.double()) @ (w1.t().double() * s2.double())
        ref = lambda: torch._scaled_mm(a1, w1.t(), scale_a=s1, scale_b=s2, out_dtype=torch.bfloat16)  # noqa: E731
        ref_err = _rel(ref(), want1)
        what = "torch._scaled_mm(a, b, per-tensor scales of the same matrices, bf16) (cuBLASLt, TN)"
    err = _rel(out, want)
    ours, theirs = bench.time_interleaved([lambda: numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out), ref])
    return dict(feature="fp8", scaling="block", layout="tn", ours_ms=ours, ref_ms=theirs, rel_err=err,
                ref_rel_err=ref_err, dtype="e4m3", path=numba_tc.explain(a, b, out=out, scale_a=sa, scale_b=sb),
                ref=what)


FEATURES = {"bias_gelu": bias_gelu, "custom_epilogue": custom_epilogue, "batched": batched, "fp8": fp8,
            "fp8_block": fp8_block}
# (feature, batch, m, n, k)
DEFAULT = [("bias_gelu", 1, 4096, 11008, 4096), ("bias_gelu", 1, 4096, 4096, 4096), ("bias_gelu", 1, 2048, 5120, 3000),
           ("custom_epilogue", 1, 4096, 4096, 4096), ("custom_epilogue", 1, 8192, 8192, 8192),
           ("custom_epilogue", 1, 3000, 5000, 2000), ("custom_epilogue", 1, 4096, 4096, 4096, "bfloat16"),
           ("custom_epilogue", 1, 8192, 8192, 8192, "bfloat16"),
           ("batched", 512, 1024, 1024, 128), ("batched", 512, 1024, 128, 1024), ("batched", 64, 2048, 2048, 128),
           ("batched", 8, 2048, 4096, 4096), ("batched", 4, 4096, 8192, 4096),
           ("fp8", 1, 4096, 4096, 4096), ("fp8", 1, 8192, 8192, 8192), ("fp8", 1, 2048, 8192, 8192),
           ("fp8", 1, 8192, 7168, 2048), ("fp8", 1, 4096, 14336, 4096), ("fp8", 1, 256, 256, 16384),
           ("fp8", 1, 4096, 4096, 4096, "nn"), ("fp8", 1, 8192, 8192, 8192, "nn"), ("fp8", 1, 1000, 32000, 4096, "nn"),
           ("fp8_block", 1, 4096, 4096, 4096), ("fp8_block", 1, 8192, 8192, 8192), ("fp8_block", 1, 4096, 7168, 2048),
           ("fp8_block", 1, 2048, 2048, 16384), ("fp8_block", 1, 1024, 3072, 16384)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="merge the records into this file")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--features", nargs="+", choices=list(FEATURES), default=list(FEATURES))
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    stamp = bench.stamp(args.json)            # gpu and a clean commit, before measuring
    records = []
    for feature, nb, m, n, k, *extra in DEFAULT:
        if feature not in args.features:
            continue
        r = FEATURES[feature](m, n, k, dtype, nb, *extra)
        tol = 1e-2
        if not r["rel_err"] < tol:
            raise SystemExit(f"{feature} {m}x{n}x{k}: relative error {r['rel_err']:.2e} over {tol}: not timed")
        r.update(m=m, n=n, k=k, batch=nb, dtype=r.get("dtype", args.dtype), ours_tflops=nb * _tflops(m, n, k, r["ours_ms"]),
                 ref_tflops=nb * _tflops(m, n, k, r["ref_ms"]), ratio=r["ref_ms"] / r["ours_ms"],
                 device=stamp["gpu"], **stamp,
                 command="python " + " ".join(shlex.quote(x) for x in [os.path.relpath(__file__)] + sys.argv[1:]))
        records.append(r)
        extra = f"  overhead {r['overhead']:+.1%} ({r['residual']} residual)" if "overhead" in r else ""
        print(f"{feature:<16} {nb}x {m}x{n}x{k} {r['dtype']} {r.get('layout', '')}: ours {r['ours_tflops']:.0f} TFLOP/s, ref "
              f"{r['ref_tflops']:.0f}, ratio {r['ratio']:.3f}, rel_err {r['rel_err']:.1e}{extra}", flush=True)
    if args.json:
        old = []
        if os.path.exists(args.json):
            with open(args.json) as f:
                old = json.load(f)
        def key(r):
            return (r["feature"], r["batch"], r["m"], r["n"], r["k"], r["dtype"], r.get("layout"), r.get("scaling"),
                    r.get("residual", "float32"))
        keys = {key(r) for r in records}
        old = [r for r in old if key(r) not in keys]
        with open(args.json, "w") as f:
            json.dump(old + records, f, indent=1)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
